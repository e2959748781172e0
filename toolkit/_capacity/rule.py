"""The pass rule of one step: how many requests a percentile needs, its order statistic and its interval.

A step's latency percentile is the order statistic of rank ``ceil(q n)`` of its ``n`` measured requests
(``q = percentile / 100``), a request that did not finish counting as infinitely slow. The fewest
requests a step sends follow from the binomial law of order statistics, as MLPerf derives its minimum
query counts: the number of requests faster than the true ``q``-quantile is Binomial(n, q), so the
``u``-th fastest request bounds the quantile from above with confidence ``P(Binomial(n, q) <= u - 1)``.
The rule asks that this 95% upper confidence bound be the second-slowest request or faster (``u = n -
1``), so a verdict never rests on the single slowest request: ``P(Binomial(n, 1 - q) >= 2) >= 0.95``.
That needs 473 requests for p99, 93 for p95 and 46 for p90, and never fewer than ``MIN_GROWTH_REQUESTS`` (30),
so the queue's stability can be judged.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from toolkit._queueing.sim_result import MIN_GROWTH_REQUESTS

__all__: list[str] = []

# confidence of the percentile's distribution-free bounds
CONFIDENCE = 0.95


def rule_requests(percentile: float) -> int:
    """The fewest measured requests at which the 95% upper confidence bound of the ``percentile``-th
    percentile is the second-slowest request or faster (at least ``MIN_GROWTH_REQUESTS``)."""
    tail = 1.0 - percentile / 100.0
    if tail <= 0:
        raise ValueError(f"percentile must be below 100, got {percentile!r}")
    n = max(MIN_GROWTH_REQUESTS, 2)
    # P(Binomial(n, tail) >= 2) grows with n: step up geometrically, then bisect to the smallest n
    while stats.binom.sf(1, n, tail) < CONFIDENCE:
        n *= 2
    low = max(MIN_GROWTH_REQUESTS, n // 2)
    while low < n:
        mid = (low + n) // 2
        if stats.binom.sf(1, mid, tail) >= CONFIDENCE:
            n = mid
        else:
            low = mid + 1
    return n


def percentile_with_bounds(values: np.ndarray, percentile: float) -> tuple[float, float, float]:
    """The ``percentile``-th percentile of ``values`` (the order statistic of rank ``ceil(q n)``; inf
    counts as slower than everything) and its two-sided 95% distribution-free confidence bounds, the
    order statistics whose ranks are the binomial ``(1 - 0.95) / 2`` and ``(1 + 0.95) / 2``
    quantiles. A bound beyond the sample is -inf (low) or inf (high); no values give NaN."""
    n = values.size
    if n == 0:
        return math.nan, math.nan, math.nan
    ordered = np.sort(values)
    q = percentile / 100.0
    point = ordered[max(math.ceil(q * n), 1) - 1]
    alpha = 1.0 - CONFIDENCE
    low_rank = int(stats.binom.ppf(alpha / 2, n, q))  # P(Binomial <= low_rank - 1) <= alpha / 2
    high_rank = int(stats.binom.ppf(1 - alpha / 2, n, q)) + 1
    low = ordered[low_rank - 1] if low_rank >= 1 else -math.inf
    high = ordered[high_rank - 1] if high_rank <= n else math.inf
    return float(point), float(low), float(high)

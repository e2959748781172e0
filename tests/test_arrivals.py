"""Gamma arrivals at every accepted ca2: the simulator's arrival times against the requested rate and
ca2, with tolerances from their exact sampling distributions (issue 39).

The span of ``n`` gamma gaps of shape ``a = 1/ca2`` and scale ``ca2/rate`` is ``Gamma(n a, ca2/rate)``,
so the rate a run realises is checked against that distribution's central interval; the gaps
themselves are checked against the gamma's distribution by a chi-square test over bins of equal
probability, which tests the shape (hence ca2) and the scale. Each check is two-sided at ``ALPHA``:
with the seven ca2 values below and two checks each, a correct generator fails one with probability
at most 14 x 1e-6 for any seed. The gaps below 1 microsecond share a bin: the arrival times are
doubles of up to 2e5 s, whose spacing (3e-11 s) blurs a difference of two of them below that.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

import toolkit
from toolkit._queueing.workload import _load

ALPHA = 1e-6
RATE_RPS = 5.0
CA2 = (0.25, 1.0, 10.0, 173.0, 1e3, 3e3, 1e4)  # 173: the Azure 2023 code trace; 1e4: the largest accepted
BINS = 20
RESOLUTION_S = 1e-6


def _arrivals(ca2: float, n: int, seed: int) -> np.ndarray:
    """The arrival times the simulator replays for ``n`` gamma requests."""
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arrival, _, _ = _load(rng, 10, 10, n, RATE_RPS, None, "gamma", ca2, None)
    return arrival


@pytest.mark.parametrize("ca2", CA2)
def test_rate_and_gap_distribution_match_the_request(ca2):
    n = 10**6
    arrival = _arrivals(ca2, n, seed=int(ca2 * 4))
    shape, scale = 1.0 / ca2, ca2 / RATE_RPS
    # the rate: the span of n gaps is Gamma(n a, scale); 1e4 gives n a = 100, a 10% spread
    low, high = stats.gamma.ppf([ALPHA / 2, 1 - ALPHA / 2], n * shape, scale=scale)
    assert low <= arrival[-1] <= high, f"realised rate {n / arrival[-1]:.4g}/s against {RATE_RPS}/s"
    # the gaps: one bin below the resolution, BINS of equal probability above it
    gaps = np.diff(arrival, prepend=0.0)
    below = stats.gamma.cdf(RESOLUTION_S, shape, scale=scale)
    inner = stats.gamma.ppf(below + (1 - below) * np.arange(1, BINS) / BINS, shape, scale=scale)
    edges = np.concatenate([[0.0, RESOLUTION_S], inner, [np.inf]])
    observed = np.histogram(gaps, bins=edges)[0]
    expected = n * np.concatenate([[below], np.full(BINS, (1 - below) / BINS)])
    keep = expected > 0
    chi2 = float(np.sum((observed[keep] - expected[keep]) ** 2 / expected[keep]))
    assert stats.chi2.sf(chi2, keep.sum() - 1) > ALPHA, f"gap distribution off at ca2={ca2}: chi2 {chi2:.1f}"


def test_a_ca2_above_the_largest_accepted_is_refused():
    with pytest.raises(ValueError, match=r"ca2 must be \(> 0 and <= 10000\), got 1000000"):
        toolkit.simulate(
            "Llama-3.1-8B",
            "H100 SXM",
            "fp8",
            prompt_tokens=100,
            output_tokens=10,
            num_requests=100,
            arrival_rate=RATE_RPS,
            arrivals="gamma",
            ca2=1e6,
        )


def test_a_run_too_short_for_its_ca2_is_warned_of():
    # ca2 = 1e4 with 2,000 requests: the span is Gamma(0.2, 2000 s), whose median 41.5 s is a rate of
    # 48/s, so one run rarely shows the 5/s asked for; 25 x ca2 = 250,000 requests spread by 20%
    with pytest.warns(UserWarning, match=r"ca2=10000 with 2000 requests: .* spreads by about 224% .* at least 250000"):
        toolkit.simulate(
            "Llama-3.1-8B",
            "H100 SXM",
            "fp8",
            prompt_tokens=100,
            output_tokens=10,
            num_requests=2000,
            arrival_rate=RATE_RPS,
            arrivals="gamma",
            ca2=1e4,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _arrivals(4.0, 2000, seed=0)  # 2000 / 4 = 500 gaps per unit shape: a 4.5% spread, no warning

"""Statistics shared by more than one concept: one copy of each formula."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import binom

if TYPE_CHECKING:
    from pandas.core.groupby import SeriesGroupBy

__all__: list[str] = []


def pooled_sd(grouped: SeriesGroupBy) -> tuple[float, int]:
    """Standard deviation pooled over groups, each about its own mean, and its degrees of freedom
    (``nan, 0`` when no group has two values).

    ``sqrt(sum((n_i - 1) * s_i**2) / sum(n_i - 1))``; for pairs it is ``sqrt(sum(d**2) / (2 k))``
    over the ``k`` pairs' differences ``d``."""
    n = grouped.count()
    df = int((n - 1).clip(lower=0).sum())
    if df < 1:
        return math.nan, 0
    return math.sqrt(float(grouped.var(ddof=1).fillna(0.0).mul((n - 1).clip(lower=0)).sum()) / df), df


def quantile_ci95(values: object, q: float) -> tuple[float, float]:
    """Distribution-free 95% interval of the ``q`` quantile of the population ``values`` were drawn
    from: the order statistics ``x_(r)`` and ``x_(s)`` (1-based) whose ranks bracket the count ``B``
    of draws below the quantile, ``B ~ Binomial(n, q)``, with ``P(r <= B < s) >= 0.95``: ``r - 1`` the
    largest ``k`` with ``P(B <= k) <= 0.025``, ``s - 1`` the smallest with ``P(B <= k) >= 0.975``
    (Hahn and Meeker, *Statistical Intervals*, 1991, 5.2). NaN values are dropped; a bound whose rank
    falls outside ``1..n`` (too few values to bound it) is NaN. It assumes independent draws."""
    x = np.sort(np.asarray(values, dtype=float))
    x = x[~np.isnan(x)]
    n = x.size
    cdf = binom.cdf(np.arange(n + 1), n, q)
    r = int(np.searchsorted(cdf, 0.025, side="right"))
    s = int(np.searchsorted(cdf, 0.975, side="left")) + 1
    return (float(x[r - 1]) if r >= 1 else math.nan, float(x[s - 1]) if s <= n else math.nan)


def block_resamples(n: int, *, resamples: int, rng: np.random.Generator, block: int | None = None) -> np.ndarray:
    """Row indices of a moving-block bootstrap of ``n`` observations in order, one resample a row.

    Each resample joins ``ceil(n / block)`` runs of ``block`` consecutive indices, each run's start
    drawn uniformly from ``0 .. n - block``, cut to ``n`` (Kuensch, "The jackknife and the bootstrap
    for general stationary observations", Annals of Statistics 17, 1989): neighbours stay together,
    so a statistic of observations that depend on their neighbours is resampled with that dependence.
    ``block`` defaults to ``ceil(n ** (1/3))``, the order of the block length that is best for a
    bootstrap's variance and distribution estimates (Hall, Horowitz and Jing, Biometrika 82, 1995);
    ``block`` 1 is the ordinary bootstrap."""
    block = min(n, block or math.ceil(n ** (1 / 3)))
    runs = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(resamples, runs))
    return (starts[:, :, None] + np.arange(block)).reshape(resamples, runs * block)[:, :n]

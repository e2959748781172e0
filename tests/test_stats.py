"""The shared statistics: pooled standard deviation, order-statistic quantile intervals and block
resampling, against hand sums, textbook formulas and simulations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._stats import block_resamples, pooled_sd, quantile_ci95


def _binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_pooled_sd_of_pairs_is_the_root_mean_half_square_difference():
    values = pd.Series([1.0, 3.0, 10.0, 11.0, 5.0])
    groups = pd.Series(["a", "a", "b", "b", "c"])  # "c" alone adds no degree of freedom
    s, df = pooled_sd(values.groupby(groups))
    assert df == 2
    assert s == pytest.approx(math.sqrt((2.0**2 + 1.0**2) / (2 * 2)))
    assert pooled_sd(pd.Series([1.0, 2.0]).groupby(pd.Series(["a", "b"]))) == (pytest.approx(math.nan, nan_ok=True), 0)


def test_the_median_interval_of_46_values_is_their_16th_and_31st():
    # by hand: P(B <= 15) < 0.025 <= P(B <= 16) and P(B <= 29) < 0.975 <= P(B <= 30), B ~ Bin(46, 1/2)
    assert _binomial_cdf(15, 46, 0.5) <= 0.025 < _binomial_cdf(16, 46, 0.5)
    assert _binomial_cdf(29, 46, 0.5) < 0.975 <= _binomial_cdf(30, 46, 0.5)
    values = np.random.default_rng(1).permutation(np.arange(1.0, 47.0))
    assert quantile_ci95(values, 0.5) == (16.0, 31.0)
    # the 90th percentile: ranks 37 and 46 (P(B <= 36) <= 0.025 and P(B <= 45) >= 0.975, B ~ Bin(46, 0.9))
    assert _binomial_cdf(36, 46, 0.9) <= 0.025 < _binomial_cdf(37, 46, 0.9)
    assert _binomial_cdf(44, 46, 0.9) < 0.975 <= _binomial_cdf(45, 46, 0.9)
    assert quantile_ci95(values, 0.9) == (37.0, 46.0)


def test_too_few_values_leave_a_bound_open_and_nan_is_dropped():
    low, high = quantile_ci95([0.1, 0.2, 0.3, math.nan], 0.5)  # P(B = 0) = 1/8 > 0.025: no lower rank
    assert math.isnan(low) and math.isnan(high)
    assert all(math.isnan(v) for v in quantile_ci95([], 0.5))


def test_the_median_interval_covers_the_true_median_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true_median = math.log(2)  # of the unit exponential
    hits = [lo <= true_median <= hi for lo, hi in (quantile_ci95(rng.exponential(size=46), 0.5) for _ in range(4000))]
    # exact coverage for n = 46: P(16 <= B <= 30) = 0.974; 4,000 draws put the rate within about 0.005
    assert np.mean(hits) == pytest.approx(_binomial_cdf(30, 46, 0.5) - _binomial_cdf(15, 46, 0.5), abs=0.01)


def test_the_accuracy_summary_gives_each_median_its_interval():
    accuracy = pd.DataFrame(
        {
            "split": "dev",
            "family": "ttft",
            "predicted": 1.0,
            "below_floor": False,
            "abs_err": np.arange(1.0, 47.0) / 100,
            "signed_err": np.arange(1.0, 47.0) / 100,
        }
    )
    row = toolkit.accuracy_summary(accuracy).set_index("family").loc["ttft"]
    assert row["median_abs_err"] == pytest.approx(0.235)
    assert (row["median_abs_err_low"], row["median_abs_err_high"]) == (0.16, 0.31)
    assert (row["p90_abs_err_low"], row["p90_abs_err_high"]) == (0.37, 0.46)


def test_block_resamples_join_runs_of_consecutive_indices():
    rows = block_resamples(10, resamples=50, rng=np.random.default_rng(3))
    # block ceil(10 ** (1/3)) = 3: runs at positions 0-2, 3-5, 6-8 and the first of a fourth at 9
    assert rows.shape == (50, 10) and rows.min() >= 0 and rows.max() <= 9
    steps = np.diff(rows, axis=1)
    assert (steps[:, [0, 1, 3, 4, 6, 7]] == 1).all()
    assert (rows[:, [0, 3, 6, 9]] <= 7).all()  # a run of 3 starts at 7 at the latest
    assert block_resamples(5, resamples=2, rng=np.random.default_rng(0), block=9).tolist() == [[0, 1, 2, 3, 4]] * 2


def _ar1(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    x = np.empty(n)
    x[0] = rng.normal()
    for i in range(1, n):
        x[i] = rho * x[i - 1] + rng.normal(scale=math.sqrt(1 - rho**2))
    return x


def test_block_resamples_keep_the_spread_of_a_mean_of_dependent_values():
    # the mean of n AR(1) values with unit variance and lag correlation rho has a standard deviation
    # of about sqrt((1 + rho) / (1 - rho) / n); drawing values one by one sees only sqrt(1 / n)
    n, rho = 1000, 0.5
    rng = np.random.default_rng(5)
    expected = math.sqrt((1 + rho) / (1 - rho) / n)
    ratios = {1: [], None: []}
    for _ in range(10):
        x = _ar1(rng, n, rho)
        for block in ratios:
            rows = block_resamples(n, resamples=2000, rng=rng, block=block)
            ratios[block].append(float(x[rows].mean(axis=1).std()) / expected)
    # with blocks of 10 the lags past 10 and the triangular weighting of the shorter ones are lost:
    # sqrt((1 + 2 * sum((1 - k / 10) * 0.5**k, k = 1..9)) / 3) = 0.93
    assert np.mean(ratios[None]) == pytest.approx(0.93, abs=0.1)
    assert np.mean(ratios[1]) == pytest.approx(math.sqrt(1 / 3), abs=0.1)

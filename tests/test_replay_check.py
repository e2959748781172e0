"""The replay check's 95% interval (toolkit._validation.replay_check.replay_error_ci95), against an
exact case and against the sampling spread found by drawing fresh replays from a known distribution."""

import numpy as np
import pytest

from toolkit._validation.replay_check import replay_error_ci95


def test_a_model_off_by_one_factor_has_an_interval_of_that_factor_alone():
    # a percentile scales with its data: every resample of predicted = 1.25 x measured gives +25%
    measured = np.random.default_rng(1).exponential(400.0, size=50)
    low, high, median_abs = replay_error_ci95(
        {"ttft_ms": 1.25 * measured, "e2e_ms": 0.8 * measured}, {"ttft_ms": measured, "e2e_ms": measured}, (50, 90)
    )
    np.testing.assert_allclose(low, [0.25, 0.25, -0.2, -0.2], atol=1e-12)
    np.testing.assert_allclose(high, [0.25, 0.25, -0.2, -0.2], atol=1e-12)
    # the median of |+25%, +25%, -20%, -20%| is 22.5%
    assert median_abs == pytest.approx((0.225, 0.225), abs=1e-12)


def _pair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    # measured latencies exponential; the model 20% slow on average with a lognormal per-request error
    measured = rng.exponential(1.0, size=n)
    return 1.2 * measured * rng.lognormal(0.0, 0.3, size=n), measured


def test_the_interval_is_as_wide_as_the_spread_of_fresh_replays():
    n = 200
    rng = np.random.default_rng(7)
    # the sampling distribution of the p90 error, from 400 independent replays of n requests
    fresh = []
    for _ in range(400):
        predicted, measured = _pair(rng, n)
        fresh.append(np.percentile(predicted, 90) / np.percentile(measured, 90) - 1)
    sd = float(np.std(fresh, ddof=1))
    # one replay's 95% interval spans about 2 x 1.96 of those standard deviations
    widths = []
    for seed in range(5):
        predicted, measured = _pair(rng, n)
        low, high, _ = replay_error_ci95({"e2e_ms": predicted}, {"e2e_ms": measured}, (90,), resamples=1000, seed=seed)
        widths.append(float(high[0] - low[0]))
    assert np.mean(widths) / (2 * 1.96 * sd) == pytest.approx(1.0, abs=0.3)


def test_fewer_than_two_requests_leave_the_interval_unknown():
    low, high, median_abs = replay_error_ci95({"ttft_ms": np.array([5.0])}, {"ttft_ms": np.array([4.0])}, (50, 90))
    assert np.isnan(low).all() and np.isnan(high).all() and np.isnan(median_abs).all()

"""The planner's own gamma quantile and log-factorial against scipy's (an independent implementation)."""

import numpy as np
import pytest
from scipy.special import gammaincinv, gammaln

from toolkit._planning.gamma import gamma_quantile, log_factorial

SHAPES = np.concatenate([np.geomspace(0.01, 20_000, 300), np.arange(1.0, 2049.0)])


@pytest.mark.parametrize("probability", [1e-6, 0.001, 0.05, 0.3, 0.5, 0.9, 0.95, 0.99, 0.999, 1 - 1e-6])
def test_gamma_quantile_matches_scipy(probability):
    ours = gamma_quantile(probability, SHAPES)
    ref = gammaincinv(SHAPES, probability)
    zero = ours == 0  # only where the quantile, (p Gamma(a + 1))^(1/a) at tiny shapes, is below 1e-300
    assert np.all(ref[zero] < 1e-300)
    np.testing.assert_allclose(ours[~zero], ref[~zero], rtol=1e-10, atol=0)


def test_gamma_quantile_textbook_cases():
    # shape 1 is the exponential: -ln(1 - p); shape 2 solves 1 - e^-x (1 + x) = p
    assert gamma_quantile(0.95, 1.0) == pytest.approx(-np.log(0.05), rel=1e-12)
    x = float(gamma_quantile(0.5, 2.0))
    assert 1 - np.exp(-x) * (1 + x) == pytest.approx(0.5, rel=1e-12)
    assert gamma_quantile(0.95, 3.0).shape == ()


def test_log_factorial_matches_scipy_and_hand_values():
    n = np.arange(0, 5000)
    np.testing.assert_allclose(log_factorial(n.astype(float)), gammaln(n + 1), rtol=1e-13, atol=1e-13)
    assert log_factorial(np.array([0, 1, 5])).tolist() == pytest.approx([0.0, 0.0, np.log(120)], abs=1e-12)

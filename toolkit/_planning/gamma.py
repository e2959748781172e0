"""Gamma-distribution quantiles and log-factorials for the planner, in numpy alone.

The planner needs three special functions: the inverse of the regularised incomplete gamma function
(for gamma length quantiles and Poisson quantile thresholds) and ``log(n!)``. They are written here
rather than taken from :mod:`scipy.special` because importing that module costs about 0.1-0.2 s on a
2-core machine (scipy 1.17 clones numpy's namespace for its array-API layer, which loads
``numpy.testing`` and ``numpy.f2py``), a third of a planning question's wall clock on the command
line. The tests check every function against scipy's to 1e-10.

The methods are the textbook ones of Press, Teukolsky, Vetterling and Flannery, *Numerical Recipes*
(3rd ed., 2007), section 6.2: the series below ``x < a + 1``, the Lentz continued fraction above it,
and Halley's iteration from their initial guess for the inverse.
"""

from __future__ import annotations

import math

import numpy as np

__all__: list[str] = []

_EPS = 1e-15
_TINY = 1e-300
_HALLEY_STEPS = 50
_MAX_TERMS = 100_000  # far beyond what a shape of 10^6 needs (about sqrt(2 a ln 1e15) terms)
_lgamma = np.frompyfunc(math.lgamma, 1, 1)


def _log_gamma(a: np.ndarray) -> np.ndarray:
    return np.asarray(_lgamma(a), dtype=float)


def _series(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_n x^n / (a (a + 1) ... (a + n)), for x < a + 1; elements leave the loop as they converge."""
    total = 1.0 / a
    left = np.arange(a.size)
    xx, tt, ss, den = x, total.copy(), total.copy(), a.copy()
    for _ in range(_MAX_TERMS):
        den = den + 1
        tt = tt * xx / den
        ss = ss + tt
        going = np.abs(tt) >= np.abs(ss) * _EPS
        if not going.all():
            total[left[~going]] = ss[~going]
            left, xx, tt, ss, den = left[going], xx[going], tt[going], ss[going], den[going]
            if not left.size:
                break
    return total


def _fraction(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The continued fraction of Q(a, x) / (x^a e^-x / Gamma(a)), for x >= a + 1 (modified Lentz)."""
    b = x + 1 - a
    c = np.full(a.size, 1 / _TINY)
    d = 1 / b
    h = d.copy()
    out = h.copy()
    left = np.arange(a.size)
    aa = a
    for i in range(1, _MAX_TERMS):
        an = -i * (i - aa)
        b = b + 2
        d = an * d + b
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1 / d
        delta = d * c
        h = h * delta
        going = np.abs(delta - 1) >= _EPS
        if not going.all():
            out[left[~going]] = h[~going]
            left, aa, b, c, d, h = left[going], aa[going], b[going], c[going], d[going], h[going]
            if not left.size:
                break
    return out


def _lower_regularized(a: np.ndarray, x: np.ndarray, log_gamma_a: np.ndarray) -> np.ndarray:
    """P(a, x), elementwise, for a > 0 and x >= 0 (arrays of one shape)."""
    p = np.zeros(a.shape)
    positive = x > 0
    with np.errstate(divide="ignore"):
        log_front = np.where(positive, a * np.log(np.where(positive, x, 1.0)) - x - log_gamma_a, -np.inf)
    series = positive & (x < a + 1)
    if series.any():
        p[series] = _series(a[series], x[series]) * np.exp(log_front[series])
    fraction = positive & ~series
    if fraction.any():
        p[fraction] = 1 - np.exp(log_front[fraction]) * _fraction(a[fraction], x[fraction])
    return p


def gamma_quantile(probability: float, shape: np.ndarray | float) -> np.ndarray:
    """The ``probability`` quantile of a gamma distribution of unit scale with ``shape``: x with
    P(shape, x) = probability (``scipy.special.gammaincinv(shape, probability)``).

    Parameters
    ----------
    probability : float
        In (0, 1).
    shape : float or numpy.ndarray
        Shape parameters, each > 0.

    Returns
    -------
    numpy.ndarray
        One quantile per shape (a 0-d array for a scalar shape); quantiles below 1e-300 are 0.
    """
    a = np.asarray(shape, dtype=float)
    p = float(probability)
    log_gamma_a = _log_gamma(a)
    # initial guess (Numerical Recipes 3rd ed., invgammp)
    tail = p if p < 0.5 else 1 - p
    t = math.sqrt(-2 * math.log(tail))
    z = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t
    z = -z if p < 0.5 else z
    with np.errstate(divide="ignore", invalid="ignore"):
        large = np.maximum(1e-3, a * (1 - 1 / (9 * a) - z / (3 * np.sqrt(a))) ** 3)
        cut = 1 - a * (0.253 + a * 0.12)
        small = np.where(p < cut, (p / cut) ** (1 / a), 1 - np.log1p(-(p - cut) / (1 - cut)))
    x = np.where(a > 1, large, small)
    log_a1 = np.log(np.maximum(a - 1, _TINY))
    front = np.exp((a - 1) * (log_a1 - 1) - log_gamma_a)
    # A guess below 1e-300 (tiny shapes at tiny probabilities) is returned as 0: there the density
    # underflows and Halley's step is undefined. Halley's iteration: an element stops once its step
    # is below 1e-8 of it, after which the cubic convergence has put its error below double
    # precision (Numerical Recipes' criterion).
    out = np.where(x > _TINY, x, 0.0).ravel()
    left = np.flatnonzero(out)
    xa, aa, ga, la, fa = (np.broadcast_to(v, x.shape).ravel()[left] for v in (x, a, log_gamma_a, log_a1, front))
    for _ in range(_HALLEY_STEPS):
        err = _lower_regularized(aa, xa, ga) - p
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            density = np.where(
                aa > 1,
                fa * np.exp(-(xa - (aa - 1)) + (aa - 1) * (np.log(xa) - la)),
                np.exp(-xa + (aa - 1) * np.log(xa) - ga),
            )
            u = err / density
            step = np.where(density > 0, u / (1 - 0.5 * np.minimum(1.0, u * ((aa - 1) / xa - 1))), 0.0)
        moved = xa - step
        xa = np.where(moved <= 0, 0.5 * xa, moved)
        going = (np.abs(step) >= 1e-8 * xa) & (xa > 0)
        out[left] = xa
        if not going.all():
            left, xa, aa, ga, la, fa = left[going], xa[going], aa[going], ga[going], la[going], fa[going]
            if not left.size:
                break
    return out.reshape(x.shape)


def log_factorial(n: np.ndarray) -> np.ndarray:
    """``log(n!)`` of non-negative whole numbers (``scipy.special.gammaln(n + 1)``).

    Parameters
    ----------
    n : numpy.ndarray
        Whole numbers >= 0 (any numeric dtype).

    Returns
    -------
    numpy.ndarray
        Float array of ``n``'s shape.
    """
    n = np.asarray(n)
    whole = n.astype(np.int64)
    table = _log_gamma(np.arange(1, int(whole.max(initial=0)) + 2, dtype=float))
    return table[whole]

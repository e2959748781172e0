"""Open-loop arrivals, Poisson or gamma-distributed gaps: for the simulator and for sweep levels.

Gamma gaps come from numpy's sampler, exact in distribution for every shape: for a shape ``1/ca2``
below 1 it draws ``U**(1/shape)`` (Ahrens and Dieter's GS algorithm), so at large ``ca2`` most gaps
are tiny. At ``ca2 = 1e4`` 93% of them lie below 5e-324, the smallest double, and come back as 0,
which is the nearest double to them; their sum, the time the run spans, keeps its exact distribution
(``Gamma(n / ca2, ca2 / rate)`` for ``n`` gaps), tested in ``tests/test_arrivals.py``. What such
arrivals cannot do is show the mean rate in a short run: the rate one run realises spreads by a
factor of about ``sqrt(ca2 / n)`` around the mean, and its median lies far above it (rate 5/s,
``ca2 = 1e4``, 2,000 requests: a median of 48/s), so :func:`check_burst` warns when a run is
too short for its ``ca2``.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__: list[str] = []

ARRIVALS = ("poisson", "gamma")
# The largest squared coefficient of variation accepted: production traces reach a few hundred
# (the shipped Azure code-completion trace: 173), and a run then needs about 25 x ca2 requests to show its rate.
MAX_CA2 = 10_000.0
# A run whose realised rate spreads by more than this share of the mean (sqrt(ca2 / n)) is warned of.
RATE_SPREAD = 0.2


def inter_arrival_gaps_s(rng: np.random.Generator, n: int, rate_rps: float, *, arrivals: str, ca2: float) -> np.ndarray:
    """``n`` gaps (s) between arrivals at mean rate ``rate_rps``: exponential (``poisson``) or gamma
    with squared coefficient of variation ``ca2`` (shape ``1/ca2``, scale ``ca2 / rate_rps``)."""
    if arrivals == "poisson":
        return rng.exponential(1.0 / rate_rps, n)
    return rng.gamma(1.0 / ca2, ca2 / rate_rps, n)


def check_burst(n: int, rate_rps: float, ca2: float, realised_rps: float) -> None:
    """Warn when ``n`` gamma arrivals with ``ca2`` are too few to show their mean rate: the rate a
    run realises then spreads by more than ``RATE_SPREAD`` (``sqrt(ca2 / n)``) of ``rate_rps``."""
    spread = float(np.sqrt(ca2 / n))
    if spread > RATE_SPREAD:
        warnings.warn(
            f"ca2={ca2:g} with {n} requests: one run's arrival rate spreads by about {spread:.0%} of "
            f"arrival_rate={rate_rps:g}/s (this run: {realised_rps:.3g}/s); use at least "
            f"{int(np.ceil(ca2 / RATE_SPREAD**2))} requests or several seeds",
            UserWarning,
            stacklevel=4,
        )


def arrival_offsets_s(n: int, rate_rps: float, *, arrivals: str, ca2: float, seed: int) -> np.ndarray:
    """Offsets (s) of ``n`` arrivals from the level's start, the first at 0.

    Gaps are exponential with mean ``1/rate_rps`` (``poisson``) or gamma with that mean and
    squared coefficient of variation ``ca2`` (shape ``1/ca2``, scale ``ca2 / rate_rps``; ``ca2=1`` is
    Poisson, smaller is more regular, larger is burstier). ``seed`` makes the schedule repeatable.
    """
    gaps = inter_arrival_gaps_s(np.random.default_rng(seed), n, rate_rps, arrivals=arrivals, ca2=ca2)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)

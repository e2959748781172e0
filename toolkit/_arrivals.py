"""Arrival times for open-loop sweep levels: Poisson or gamma-distributed gaps."""

from __future__ import annotations

import numpy as np

ARRIVALS = ("poisson", "gamma")


def arrival_offsets_s(n: int, rate_rps: float, *, arrival: str, cv: float, seed: int) -> np.ndarray:
    """Offsets (s) of ``n`` arrivals from the level's start, the first at 0.

    Gaps are exponential with mean ``1/rate_rps`` (``poisson``) or gamma with that mean and
    coefficient of variation ``cv`` (shape ``1/cv**2``, scale ``cv**2 / rate_rps``; ``cv=1`` is
    Poisson, smaller is more regular, larger is burstier). ``seed`` makes the schedule repeatable.
    """
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate_rps, size=n)
    else:
        gaps = rng.gamma(1.0 / cv**2, cv**2 / rate_rps, size=n)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)

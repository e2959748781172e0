"""Open-loop arrivals, Poisson or gamma-distributed gaps: for the simulator and for sweep levels."""

from __future__ import annotations

import numpy as np

__all__: list[str] = []

ARRIVALS = ("poisson", "gamma")


def inter_arrival_gaps_s(rng: np.random.Generator, n: int, rate_rps: float, *, arrivals: str, cv2: float) -> np.ndarray:
    """``n`` gaps (s) between arrivals at mean rate ``rate_rps``: exponential (``poisson``) or gamma
    with squared coefficient of variation ``cv2`` (shape ``1/cv2``, scale ``cv2 / rate_rps``)."""
    if arrivals == "poisson":
        return rng.exponential(1.0 / rate_rps, n)
    return rng.gamma(1.0 / cv2, cv2 / rate_rps, n)


def arrival_offsets_s(n: int, rate_rps: float, *, arrivals: str, ca2: float, seed: int) -> np.ndarray:
    """Offsets (s) of ``n`` arrivals from the level's start, the first at 0.

    Gaps are exponential with mean ``1/rate_rps`` (``poisson``) or gamma with that mean and
    squared coefficient of variation ``ca2`` (shape ``1/ca2``, scale ``ca2 / rate_rps``; ``ca2=1`` is
    Poisson, smaller is more regular, larger is burstier). ``seed`` makes the schedule repeatable.
    """
    gaps = inter_arrival_gaps_s(np.random.default_rng(seed), n, rate_rps, arrivals=arrivals, cv2=ca2)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)

"""What a simulation returns: per-request records and their summary."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["SimulationResult"]


class SimulationResult:
    """The outcome of :func:`simulate`: one row per request and a one-row summary.

    Parameters
    ----------
    requests : pandas.DataFrame
        One row per request (see :func:`simulate`).
    summary : pandas.DataFrame
        One row of aggregate statistics (see :func:`simulate`).
    config : dict
        The resolved simulation settings (load, batching limits, KV budget in tokens, ...).

    Attributes
    ----------
    requests, summary : pandas.DataFrame
    config : dict
    """

    def __init__(self, requests: pd.DataFrame, summary: pd.DataFrame, config: dict):
        self.requests = requests
        self.summary = summary
        self.config = config

    def __repr__(self) -> str:
        s = self.summary.iloc[0]
        return (
            f"SimulationResult({len(self.requests)} requests, {s['throughput_rps']:.3g} req/s, "
            f"ttft p95 {s['ttft_p95_s']:.3g} s, e2e p95 {s['e2e_p95_s']:.3g} s, "
            f"{int(s['preemptions'])} preemptions)"
        )


def _percentiles(values: np.ndarray) -> tuple[float, float, float, float]:
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    p50, p95, p99 = np.percentile(finite, [50, 95, 99])
    return float(finite.mean()), float(p50), float(p95), float(p99)

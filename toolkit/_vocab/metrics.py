"""Metric names and units shared by the simulator, the planner, verification and the scale-out.

Units are part of every column name, one convention per domain:

- the simulator and the scale-out (:func:`toolkit.simulate`, :func:`toolkit.simulate_grid`) work in
  seconds, the clock of an event simulation: ``ttft_s``, ``tpot_s``, ``e2e_s``, ``queue_wait_s`` per
  request and ``{metric}_p{percentile}_s`` in a summary;
- the serving model, the planner, plan verification, the sweep harness and calibration work in
  milliseconds, the unit latency SLOs and serving benchmarks are quoted in: ``ttft_ms``, ``tpot_ms``,
  ``e2e_p95_ms``, ``sim_e2e_ms``;
- rates are per second (``arrival_rate`` requests/s, ``*_tok_s`` tokens/s), sizes in tokens
  (``*_tokens``) or GB (``*_gb``), money in US dollars (``*_usd_month``).

Where one domain reads the other's numbers it converts with :func:`ms_from_s`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is not loaded for this module: the command line's --help imports it
    import numpy as np

__all__: list[str] = []

# the request latencies every layer reports: time to first token, time per output token, end to end
LATENCY_METRICS = ("ttft", "tpot", "e2e")
# the simulator's per-request latencies: the wait in the queue before admission, then the three above
SIMULATED_METRICS = ("queue_wait", *LATENCY_METRICS)

MS_PER_S = 1e3


def ms_from_s(seconds: float | np.ndarray) -> float | np.ndarray:
    """Durations in seconds (the simulator's unit) in milliseconds (the planner's and the model's)."""
    return seconds * MS_PER_S


def percentile_label(percentile: float) -> str:
    """The label of a quantile in a column name: 0.95 -> ``"95"``, 0.999 -> ``"99.9"``."""
    return f"{100 * percentile:g}"


def quantile_column(metric: str, percentile: float, unit: str) -> str:
    """The column holding ``metric``'s ``percentile`` quantile in ``unit``: ``e2e_p95_ms``."""
    return f"{metric}_p{percentile_label(percentile)}_{unit}"

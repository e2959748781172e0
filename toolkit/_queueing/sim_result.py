"""What a simulation returns: per-request records and their summary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from toolkit._vocab.metrics import SIMULATED_METRICS

__all__ = ["SimulationResult"]

# the latencies summarised (SIMULATED_METRICS), each as mean, p50, p95 and p99 (s)

# An open-loop run is unstable where the queue wait rises by more than this many seconds per second of
# arrivals. An engine offered rho times the mu requests/s it serves builds a backlog of (rho - 1) mu t by
# time t, which a request arriving then waits out: (rho - 1) t, so the rise is rho - 1. A stable queue
# rises by chance too, most in short runs near saturation: in simulated M/D/1 queues at rho 0.9, about 5%
# of runs of 300 requests rise above 0.05 and no run of 3,000 (they stay below 0.002); at rho 1.1 every
# run of 3,000 does.
UNSTABLE_GROWTH = 0.05
# fewest measured requests whose first and last thirds are compared
MIN_GROWTH_REQUESTS = 30


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

    Notes
    -----
    ``summary["queue_wait_growth"]`` is NaN for a closed loop (which cannot overload: its clients wait
    for their answers) and for fewer than ``MIN_GROWTH_REQUESTS`` measured requests;
    ``summary["stable"]`` is then True and None (unknown) respectively.
    """

    def __init__(self, requests: pd.DataFrame, summary: pd.DataFrame, config: dict):
        self.requests = requests
        self.summary = summary
        self.config = config

    def __repr__(self) -> str:
        s = self.summary.iloc[0]
        unstable = ", UNSTABLE: the queue grew through the run" if known_unstable(s["stable"]) else ""
        return (
            f"SimulationResult({len(self.requests)} requests, {s['throughput_rps']:.3g} req/s, "
            f"ttft p95 {s['ttft_p95_s']:.3g} s, e2e p95 {s['e2e_p95_s']:.3g} s, "
            f"{int(s['preemptions'])} preemptions{unstable})"
        )


def _percentiles(values: np.ndarray) -> tuple[float, float, float, float]:
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    p50, p95, p99 = np.percentile(finite, [50, 95, 99])
    return float(finite.mean()), float(p50), float(p95), float(p99)


def known_unstable(stable: object) -> bool:
    """Whether a summary's ``stable`` says unstable: False, not True and not unknown (None or NA)."""
    return bool(pd.notna(stable) and not stable)


def queue_wait_growth(arrival_s: np.ndarray, queue_wait_s: np.ndarray) -> float:
    """Seconds of queue wait gained per second of arrivals, from the first third of the requests (in
    sending order) to the last: the difference of their mean waits over that of their mean arrival
    times. About ``rho - 1`` for an engine offered ``rho`` times what it serves, about 0 for a stable
    one; NaN for fewer than ``MIN_GROWTH_REQUESTS`` requests."""
    if arrival_s.size < MIN_GROWTH_REQUESTS:
        return math.nan
    third = arrival_s.size // 3
    first, last = slice(0, third), slice(arrival_s.size - third, None)
    span = arrival_s[last].mean() - arrival_s[first].mean()
    return float((queue_wait_s[last].mean() - queue_wait_s[first].mean()) / span) if span > 0 else math.nan


def request_records(engine, overhead_s: float, n_warm: int) -> pd.DataFrame:
    """The per-request frame of a finished engine run (times in seconds; see ``simulate``). The
    engine's record arrays become its columns (the times turned into latencies in place)."""
    arrival_s = engine.arrival
    out_tokens = engine.output
    first, finish, admit = engine.first_t, engine.finish_t, engine.admit_t
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (finish - first) / (out_tokens - 1), np.nan)
    admit -= arrival_s + overhead_s  # the queue wait, from reaching the engine
    first -= arrival_s  # ttft
    finish -= arrival_s  # e2e
    columns = {
        "arrival_s": arrival_s,
        "queue_wait_s": admit,
        "ttft_s": first,
        "tpot_s": tpot,
        "e2e_s": finish,
        "prompt_tokens": engine.prompt,
        "output_tokens": out_tokens,
        "replica": engine.replica_of.astype(np.int64),
        "preempted": engine.preempted.astype(np.int64),
        "cached_tokens": engine.cached,
        "warmup": np.arange(arrival_s.size) < n_warm,
    }
    return pd.DataFrame(columns, copy=False)


def summarize(requests: pd.DataFrame, engine, end: float, n_replicas: int, kv_budget: int) -> dict[str, Any]:
    """The summary row of a run: percentiles of the measured (non-warm-up) requests, throughput, utilisation.
    The warm-up requests are the first ones sent, so the measured ones are views of the columns' tails."""
    first = int(requests["warmup"].sum())
    measured = lambda column: requests[column].to_numpy()[first:]  # noqa: E731
    arrival = measured("arrival_s")
    t0 = float(np.nanmin(arrival))
    span = float(np.nanmax(arrival + measured("e2e_s"))) - t0
    summary: dict[str, Any] = {"requests": arrival.size}
    for metric in SIMULATED_METRICS:
        mean, p50, p95, p99 = _percentiles(measured(f"{metric}_s"))
        summary.update(
            {
                f"{metric}_mean_s": mean,
                f"{metric}_p50_s": p50,
                f"{metric}_p95_s": p95,
                f"{metric}_p99_s": p99,
            }
        )
    throughput = arrival.size / span if span > 0 else math.nan
    # a closed loop cannot overload: its clients wait for their answers before sending again
    growth = math.nan if engine.closed_loop else queue_wait_growth(arrival, measured("queue_wait_s"))
    stable = True if engine.closed_loop else (None if math.isnan(growth) else bool(growth <= UNSTABLE_GROWTH))
    busy = sum(r.busy_s for r in engine.reps) - sum(engine.busy_at_window)
    window = end - engine.window_start
    summary.update(
        {
            "throughput_rps": throughput,
            "output_tok_s": float(measured("output_tokens").sum()) / span if span > 0 else math.nan,
            "achieved_concurrency": throughput * summary["e2e_mean_s"],
            "preemptions": int(requests["preempted"].to_numpy().sum()),
            "prefix_hit_rate": float(measured("cached_tokens").sum() / measured("prompt_tokens").sum()),
            "prefill_tokens_saved": int(measured("cached_tokens").sum()),
            "utilization": busy / (n_replicas * window) if window > 0 else math.nan,
            "kv_budget_tokens": kv_budget,
            "queue_wait_growth": growth,
            "stable": stable,
        }
    )
    return summary

"""The verdict of one step: its percentiles, goodput, queue stability, and why it failed if it did.

Measured and simulated steps are judged by this one function, so a prediction and a measurement fail
for the same reasons.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from toolkit._capacity.rule import percentile_with_bounds
from toolkit._capacity.spec import METRICS, Spec
from toolkit._queueing.sim_result import UNSTABLE_GROWTH, queue_wait_growth

__all__: list[str] = []


def judge_step(requests: pd.DataFrame, spec: Spec, *, rate_rps: float, end_s: float) -> dict[str, Any]:
    """One step's row from its requests, in sending order.

    Parameters
    ----------
    requests : pandas.DataFrame
        ``arrival_s`` (when the request reached the server, s from the step's start), ``ttft_ms``,
        ``tpot_ms``, ``e2e_ms`` (NaN where it did not finish) and ``finished`` (bool). The first
        ``spec.warmup_requests`` rows are the warm-up and are left out; an unfinished request counts
        as infinitely slow in every percentile.
    spec : Spec
        The SLOs and percentile.
    rate_rps : float
        The step's scheduled arrival rate.
    end_s : float
        When the step stopped waiting (s from its start); recorded as ``end_s``.

    Returns
    -------
    dict
        The step's columns, as :class:`toolkit.CapacityResult` lists them.
    """
    measured = requests.iloc[spec.warmup_requests :]
    arrival = measured["arrival_s"].to_numpy(dtype=float)
    finished = measured["finished"].to_numpy(dtype=bool)
    q = spec.percentile
    row: dict[str, Any] = {
        "rate_rps": rate_rps,
        "requests": int(arrival.size),
        "finished": int(finished.sum()),
        "end_s": end_s,
    }
    ends = arrival[finished] + measured["e2e_ms"].to_numpy(dtype=float)[finished] / 1e3
    duration = float(ends.max() - arrival.min()) if ends.size else math.nan
    span = float(arrival.max() - arrival.min()) if arrival.size > 1 else math.nan
    row["offered_rps"] = (arrival.size - 1) / span if span > 0 else math.nan
    row["achieved_rps"] = finished.sum() / duration if duration > 0 else math.nan
    meets = finished.copy()
    over: dict[str, float] = {}
    clear_pass, clear_fail = True, False
    for metric in METRICS:
        values = measured[f"{metric}_ms"].to_numpy(dtype=float)
        if metric == "tpot":  # a one-token answer has no time per output token: nothing to miss
            values = np.where(finished & np.isnan(values), 0.0, values)
        values = np.where(finished, values, math.inf)
        point, low, high = percentile_with_bounds(values, q)
        row[f"{metric}_p{q:g}_ms"] = point
        row[f"{metric}_p{q:g}_low_ms"] = low
        row[f"{metric}_p{q:g}_high_ms"] = high
        slo = spec.slos.get(metric)
        if slo is not None:
            meets &= values <= slo
            clear_pass &= high <= slo
            clear_fail |= low > slo
            if point > slo:
                over[metric] = point / slo - 1
    row["goodput_rps"] = meets.sum() / duration if duration > 0 else 0.0
    # the finished requests' TTFT: an unfinished one's is only bounded below by the step's end, a bound
    # that shrinks with its arrival time and would hide the growth of an overloaded queue
    ttft_s = measured["ttft_ms"].to_numpy(dtype=float) / 1e3
    seen = finished & ~np.isnan(ttft_s)
    growth = queue_wait_growth(arrival[seen], ttft_s[seen])
    stable = None if math.isnan(growth) else bool(growth <= UNSTABLE_GROWTH)
    row["ttft_growth"] = growth
    row["stable"] = stable
    row["passed"] = not over and stable is not False
    row["clear_pass"] = bool(row["passed"] and clear_pass and stable is True)
    row["clear_fail"] = bool(clear_fail or stable is False)
    worst = max(over, key=over.get) if over else ("queue" if stable is False else None)
    row["failed_metric"] = worst
    row["excess"] = over.get(worst, math.nan)
    row["reason"] = _reason(row, spec, over, stable, growth, finished)
    return row


def _reason(row: dict, spec: Spec, over: dict[str, float], stable: bool | None, growth: float, finished) -> str:
    q = spec.percentile
    parts = []
    for metric, excess in sorted(over.items(), key=lambda kv: -kv[1]):
        value = row[f"{metric}_p{q:g}_ms"]
        if math.isinf(value):
            missing = int((~finished).sum())
            parts.append(
                f"{metric} p{q:g} not reached: {missing} of {finished.size} requests failed or did not finish "
                f"(SLO {spec.slos[metric]:g} ms)"
            )
        else:
            parts.append(f"{metric} p{q:g} {value:.4g} ms > SLO {spec.slos[metric]:g} ms (+{excess:.0%})")
    if stable is False:
        parts.append(
            f"unstable queue: TTFT grew {growth:.3g} s per s of arrivals (limit {UNSTABLE_GROWTH:g}, "
            "from the first third of the requests to the last)"
        )
    return "; ".join(parts)

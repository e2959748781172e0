"""Planning for a production trace: its variability in the closed form, its requests in the simulator.

``plan(workload=<trace frame>)`` takes the service-time variance (``cs2`` of the trace's output
tokens) and the arrival variability (``ca2`` of its gaps, split over replicas round robin: a
replica's gaps are sums of ``replicas`` consecutive gaps, so ``ca2 / replicas``) from the trace
instead of a preset. The closed form cannot see what the trace does over minutes (bursts, drift),
so the cheapest plans on the cost-latency frontier are then checked by replaying the trace itself
through :func:`toolkit.simulate` on each configuration, and both answers are reported side by side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from toolkit._planning.inputs import SIMULATED_PLANS
from toolkit._planning.pareto import pareto
from toolkit._queueing.simulator import simulate
from toolkit._workload.describe import describe_workload

__all__: list[str] = []

# closed form and simulation "disagree" beyond this relative difference at the SLO percentile
DISAGREE_REL = 0.25


def trace_variability(trace: pd.DataFrame) -> tuple[float, float]:
    """(cs2 of output tokens, ca2 of inter-arrival gaps) of a trace frame."""
    summary = describe_workload(trace).summary.iloc[0]
    return float(summary["output_cs2"]), float(summary["ca2"])


def check_on_trace(
    table: pd.DataFrame,
    trace: pd.DataFrame,
    *,
    percentile: float,
    slos: dict,
    calibration: object,
    e2e_column: str,
    bar: Any,
) -> pd.DataFrame:
    """Replay ``trace`` on the cheapest frontier plans and add the simulated percentiles.

    Adds ``sim_ttft_ms``, ``sim_tpot_ms``, ``sim_e2e_ms`` (at ``percentile``, ms), ``sim_meets_slo``
    and ``sim_disagrees`` (closed-form and simulated end-to-end percentile differ by more than
    ``DISAGREE_REL``) to the rows simulated; NaN / NA elsewhere. ``bar.update()`` follows each replay.
    """
    out = table.copy()
    for col in ("sim_ttft_ms", "sim_tpot_ms", "sim_e2e_ms"):
        out[col] = np.nan
    out["sim_meets_slo"] = pd.Series(pd.NA, index=out.index, dtype="boolean")
    out["sim_disagrees"] = pd.Series(pd.NA, index=out.index, dtype="boolean")
    meeting = out[out["meets_slo"]]
    if meeting.empty:
        return out
    front = pareto(meeting, minimize=("cost_usd_month", e2e_column), maximize=()).head(SIMULATED_PLANS)
    for label, row in front.iterrows():
        requests = simulate(
            row["model"],
            row["gpu"],
            row["quant"],
            None,
            None,
            None,
            trace=trace,
            max_batch=int(row["batch"]),
            tensor_parallel=int(row["tensor_parallel"]),
            replicas=int(row["replicas"]),
            backend=row["backend"],
            calibration=calibration,
            warmup_fraction=0.0,
            progress=False,
        ).requests
        bar.update()
        sim = {m: float(np.quantile(requests[f"{m}_s"], percentile)) * 1e3 for m in ("ttft", "tpot", "e2e")}
        out.loc[label, ["sim_ttft_ms", "sim_tpot_ms", "sim_e2e_ms"]] = [sim["ttft"], sim["tpot"], sim["e2e"]]
        limits = {"slo_ttft": sim["ttft"], "slo_tpot": sim["tpot"], "slo_e2e": sim["e2e"]}
        out.loc[label, "sim_meets_slo"] = all(slos[k] is None or limits[k] <= slos[k] for k in limits)
        out.loc[label, "sim_disagrees"] = abs(row[e2e_column] / sim["e2e"] - 1) > DISAGREE_REL
    return out

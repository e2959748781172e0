"""Checking plans by simulation: the frontier replayed through ``simulate_grid``, side by side.

The closed form of the planner sizes every candidate; the simulator then runs the ones worth buying,
the cost-latency frontier of the plans that meet the SLOs, on their exact configuration (model, GPU,
format, backend, tensor parallel, replicas, batch): its ``SIMULATED_PLANS`` cheapest plans when only
a trace workload asks for it, its ``SIMULATED_PLANS`` cheapest plans of each backend with
``verify="simulate"``. The requests are the trace's when the workload is
a trace; with a variance preset and ``verify="simulate"`` they are ``VERIFY_REQUESTS``
Poisson arrivals at the planned rate with the planned prompt length and output lengths of the
preset's variance: fixed (cs2 0), geometric (cs2 1) or lognormal with ``cv = sqrt(cs2)``. A trace
with ``prefix_blocks`` is replayed through the simulator's prefix cache of the plan's backend; a constant
``prefix_cache_hit_rate`` is not simulated. Every simulation goes through :func:`toolkit.simulate_grid`,
in-process or on the Dask ``client`` given.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from toolkit._planning.pareto import pareto
from toolkit._queueing.sim_result import known_unstable
from toolkit._scale.grid import simulate_grid
from toolkit._vocab.load import Load
from toolkit._vocab.metrics import LATENCY_METRICS, ms_from_s, quantile_column

__all__: list[str] = []

# frontier plans simulated: the cheapest overall (a trace workload), or per backend (verify="simulate")
SIMULATED_PLANS = 8
# synthetic requests per plan for verify="simulate" with a variance preset (10% of them warm-up)
VERIFY_REQUESTS = 4000
# closed form and simulation "disagree" beyond this relative difference at the SLO percentile
DISAGREE_REL = 0.25
SIM_COLUMNS = tuple(f"sim_{metric}_ms" for metric in LATENCY_METRICS)


def synthetic_load(load: Load) -> dict:
    """``simulate`` arguments of ``VERIFY_REQUESTS`` Poisson arrivals shaped like the planned request."""
    if load.cs2 == 0:
        lengths: object = load.output_tokens
    elif load.cs2 == 1:
        lengths = ("geometric", load.output_tokens)
    else:
        lengths = ("lognormal", load.output_tokens, math.sqrt(load.cs2))
    return {
        "arrival_rate": load.arrival_rate,
        "prompt_tokens": load.prompt_tokens,
        "output_tokens": lengths,
        "num_requests": VERIFY_REQUESTS,
    }


def verify_plans(
    table: pd.DataFrame,
    load: Load,
    per_backend: bool,
    percentile: float,
    slos: dict,
    *,
    calibration: object,
    client: object,
) -> pd.DataFrame:
    """``table`` with ``sim_ttft_ms``, ``sim_tpot_ms``, ``sim_e2e_ms`` (at ``percentile``, ms),
    ``sim_meets_slo`` and ``sim_disagrees`` filled for the frontier plans simulated (NaN / NA
    elsewhere); a simulation that failed leaves them missing and says why in ``warnings``, one whose
    queue grew through the run (``stable`` False) does not meet the SLOs and says so there.

    ``load`` is what arrives (its ``trace``, or its ``arrival_rate``, token lengths and ``cs2``, the
    output-length variance); ``per_backend`` simulates the
    ``SIMULATED_PLANS`` cheapest frontier plans of each backend, otherwise of all.
    """
    requests = {"trace": load.trace, "warmup_fraction": 0.0} if load.trace is not None else synthetic_load(load)
    e2e = quantile_column("e2e", percentile, "ms")
    out = table.copy()
    for col in SIM_COLUMNS:
        out[col] = np.nan
    out["sim_meets_slo"] = pd.Series(pd.NA, index=out.index, dtype="boolean")
    out["sim_disagrees"] = pd.Series(pd.NA, index=out.index, dtype="boolean")
    meeting = out[out["meets_slo"]]
    if meeting.empty:
        return out
    front = pareto(meeting, minimize=("cost_usd_month", e2e), maximize=())
    front = front.groupby("backend", sort=False).head(SIMULATED_PLANS) if per_backend else front.head(SIMULATED_PLANS)
    scenarios = [
        {
            "model": row["model"],
            "gpu": row["gpu"],
            "quant": row["quant"],
            "backend": row["backend"],
            "max_batch": int(row["batch"]),
            "tensor_parallel": int(row["tensor_parallel"]),
            "replicas": int(row["replicas"]),
            "calibration": calibration,
            **requests,
        }
        for _, row in front.iterrows()
    ]
    sims = simulate_grid(scenarios, client=client, percentiles=(percentile,), progress=False)
    sims.index = front.index

    def warn(label_: object, note: str) -> None:
        out.loc[label_, "warnings"] = "; ".join(w for w in (out.loc[label_, "warnings"], note) if w)

    for label_, sim in sims.iterrows():
        if sim["error"] is not None:
            warn(label_, f"simulation failed: {sim['error']}")
            continue
        ms = {m: ms_from_s(float(sim[quantile_column(m, percentile, "s")])) for m in LATENCY_METRICS}
        out.loc[label_, list(SIM_COLUMNS)] = [ms[m] for m in LATENCY_METRICS]
        meets = all(slos[f"slo_{m}"] is None or ms[m] <= slos[f"slo_{m}"] for m in LATENCY_METRICS)
        if known_unstable(sim["stable"]):  # latencies that grow with the run meet no SLO
            warn(label_, "simulation unstable: its queue grew through the run")
            meets = False
        out.loc[label_, "sim_meets_slo"] = meets
        out.loc[label_, "sim_disagrees"] = abs(out.loc[label_, e2e] / ms["e2e"] - 1) > DISAGREE_REL
    return out

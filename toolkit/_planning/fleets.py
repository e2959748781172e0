"""The planner's answer as columns: fleets per evaluation unit, spread over the candidates that share it.

An evaluation unit is one (configuration, batch) pair; the backends that allow that batch on that
configuration plan the same fleet, so each unit is searched once and only what differs between its
candidates (backend, and the binding constraint where the batch is at a backend's or the KV cache's
cap) is filled in per candidate.
"""

from __future__ import annotations

import numpy as np

from toolkit._planning.evaluate import _Evaluator, _first_failure, _headroom, _search
from toolkit._planning.grid import _Grid
from toolkit._planning.inputs import _CHECKS

__all__: list[str] = []


def fleet_columns(
    ev: _Evaluator,
    grid: _Grid,
    replicas_max: int,
    output: int,
    budget: float | None,
    const: dict,
    e2e_column: str,
    workload: tuple[str, float, bool],
) -> dict[str, np.ndarray]:
    """The plan table's columns (see :func:`toolkit.plan`), one element per candidate stable with at
    most ``replicas_max`` replicas, cheapest first among those meeting the SLOs, then by latency.
    ``workload`` is (label, service cs2, whether the closed form under-estimates its tail)."""
    units, replicas, at, cost, meets, binding, broke = _fleets(ev, grid, replicas_max, output, budget, const)
    position = np.full(grid.cfg.size, -1)
    position[units] = np.arange(units.size)
    candidate = np.flatnonzero(position[grid.unit] >= 0)
    unit = position[grid.unit[candidate]]
    order = np.lexsort((at["e2e_ms"][unit], cost[unit], ~meets[unit]))
    candidate, unit = candidate[order], unit[order]
    cfg = grid.cfg[units]
    configs = {name: values[cfg] for name, values in grid.configs.items()}
    per_unit = {
        "replicas": replicas,
        "batch": grid.batch[units],
        "utilization": at["utilization"],
        "ttft_ms": at["ttft_ms"],
        "tpot_ms": at["tpot_ms"],
        e2e_column: at["e2e_ms"],
        "cost_usd_month": cost,
        "cost_usd_per_1m_tokens": grid.gpu_cost_hour[cfg] / (at["lam"] * output * 3600.0) * 1e6,
        "quality": configs["quality"],
        "meets_slo": meets,
    }
    columns = {name: configs[name][unit] for name in ("model", "gpu", "quant")}
    columns["backend"] = grid.backend[candidate]
    columns["tensor_parallel"] = configs["tensor_parallel"][unit]
    columns.update({name: values[unit] for name, values in per_unit.items()})
    # where one replica fewer breaks capacity, a candidate at its cap names what caps it
    again = broke[unit]
    capped = (again == "capacity") & grid.at_cap[candidate]
    bound = np.where(capped, grid.cap_reason[candidate].astype(str), again)
    columns["binding_constraint"] = np.where(again == "", binding[unit], bound)
    columns["warnings"] = _warnings(per_unit, configs, const, workload)[unit]
    return columns


def _fleets(ev: _Evaluator, grid: _Grid, replicas_max: int, output: int, budget: float | None, const: dict):
    """Per unit stable with at most ``replicas_max`` replicas: (its index, the fewest replicas that meet
    the SLOs, else the fewest stable; the evaluation there; cost; verdict; binding constraint, and
    for plans of more than one replica that meet the SLOs within budget the first check one replica
    fewer breaks, else '')."""
    stable_at, meeting, at = _search(ev, grid.batch.size, replicas_max)
    keep = stable_at > 0
    replicas = np.where(meeting > 0, meeting, stable_at)[keep]
    units = np.flatnonzero(keep)
    # Only units that needed more replicas than the fewest stable are evaluated again.
    moved = np.flatnonzero(replicas != stable_at[keep])
    if moved.size:
        again = ev.evaluate(units[moved], replicas[moved])
        for key, value in again.items():
            at[key][moved] = value
    cost = grid.gpu_cost_hour[grid.cfg[units]] * replicas * const["hours_per_month"]
    within = np.ones(units.size, dtype=bool) if budget is None else cost <= budget
    meets = at["meets"] & within

    binding = np.where(at["meets"], _headroom(ev, at, cost, budget), _first_failure(at)).astype(str)
    binding = np.where(at["meets"] & ~within, "budget", binding)
    broke = np.full(units.size, "", dtype=f"<U{max(map(len, _CHECKS))}")
    more = np.flatnonzero(at["meets"] & within & (replicas > 1))
    if more.size:
        broke[more] = _first_failure(ev.evaluate(units[more], replicas[more] - 1))
    return units, replicas, at, cost, meets, binding, broke


def _warnings(out: dict[str, np.ndarray], configs: dict[str, np.ndarray], const: dict, workload: tuple) -> np.ndarray:
    """One '; '-joined string per row: each row's set of warnings is coded as a bit pattern, and each
    pattern that occurs is joined once. ``workload`` is (label, cs2, whether the closed form
    under-estimates its tail)."""
    label, cs2, underestimated = workload
    rows = out["utilization"].size
    util = out["utilization"]
    pcie = (configs["tensor_parallel"] > 1) & (configs["interconnect_gb_s"] <= const["pcie_interconnect_gb_s"])
    checks = [
        (
            np.full(rows, underestimated),
            f"high service-time variance ({label}, cs2={cs2:g}): the closed-form wait under-estimates the "
            "tail at this variance (workload_presets()); validate with simulate() or a load test",
        ),
        (
            util > const["utilization_warning"],
            f"utilization above {const['utilization_warning']:g}: little headroom for load spikes",
        ),
        (np.isnan(out["quality"]), "quality unknown (no published score for this model and format)"),
        (pcie, "tensor parallel over PCIe: all-reduces are slow without NVLink"),
        (np.isnan(out["cost_usd_month"]), "price unknown for this GPU"),
    ]
    code = np.zeros(rows, dtype=np.int64)
    for bit, (mask, _) in enumerate(checks):
        code |= mask.astype(np.int64) << bit
    patterns, inverse = np.unique(code, return_inverse=True)
    joined = np.array(
        ["; ".join(message for bit, (_, message) in enumerate(checks) if pattern >> bit & 1) for pattern in patterns],
        dtype=object,
    )
    return joined[inverse] if rows else np.array([], dtype=object)

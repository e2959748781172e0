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
from toolkit._planning.inputs import _CONSTRAINTS

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
) -> dict[str, object]:
    """The plan table's columns (see :func:`toolkit.plan`), one element per candidate stable with at
    most ``replicas_max`` replicas, cheapest first among those meeting the SLOs, then by latency.
    ``workload`` is (label, service cs2, whether the closed form under-estimates its tail). Text
    columns are (their few distinct values, per row the position of its value there): no per-row
    string work (:func:`_text` makes them pandas arrays); every other column a new array."""
    units, replicas, at, cost, meets, binding, broke = _fleets(ev, grid, replicas_max, output, budget, const)
    position = np.full(grid.cfg.size, -1)
    position[units] = np.arange(units.size)
    candidate = np.flatnonzero(position[grid.unit] >= 0)
    unit = position[grid.unit[candidate]]
    order = _order(unit, meets, cost, at["e2e_ms"])
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
        "prefix_hit_rate": grid.prefix_hit_rate[units],
        "meets_slo": meets,
    }
    config = cfg[unit]
    columns: dict[str, object] = {name: (grid.configs[name], config) for name in ("model", "gpu", "quant")}
    columns["backend"] = (grid.backend_names, grid.backend_code[candidate])
    columns["tensor_parallel"] = configs["tensor_parallel"][unit]
    columns.update({name: values[unit] for name, values in per_unit.items()})
    # where one replica fewer breaks capacity, a candidate at its cap names what caps it
    again = broke[unit]
    capped = (again == _CONSTRAINTS.index("capacity")) & grid.at_cap[candidate]
    reason = np.where(grid.kv_capped[candidate], *map(_CONSTRAINTS.index, ("kv_memory", "max_batch")))
    bound = np.where(capped, reason, again)
    columns["binding_constraint"] = (np.array(_CONSTRAINTS, dtype=object), np.where(again < 0, binding[unit], bound))
    patterns, code = _warnings(per_unit, configs, const, workload)
    columns["warnings"] = (patterns, code[unit])
    return columns


def _order(unit: np.ndarray, meets: np.ndarray, cost: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """The candidates' order by their units' (``~meets``, ``cost``, ``latency``), NaN last, ties in
    candidate order: the units are sorted (fewer than the candidates), ranked with equal keys (NaN
    equal to NaN) sharing a rank, and the candidates stably sorted by that one integer. Equal keys
    share a rank whatever their order, so the units' sort needs no stability: by latency, then stably
    by a small integer for (``~meets``, cost) - numpy's stable sort is a radix sort for 16-bit keys."""
    prices, cost_rank = np.unique(cost, return_inverse=True)  # NaN last, all NaN one value
    head = np.where(meets, 0, prices.size) + cost_rank.reshape(-1)
    by_unit = np.argsort(latency)
    by_unit = by_unit[np.argsort(_radix(head[by_unit], 2 * prices.size), kind="stable")]
    head, last = head[by_unit], latency[by_unit]
    same = (head[1:] == head[:-1]) & ((last[1:] == last[:-1]) | (np.isnan(last[1:]) & np.isnan(last[:-1])))
    rank = np.empty(by_unit.size, dtype=np.int64)
    rank[by_unit] = np.concatenate(([0], np.cumsum(~same)))[: by_unit.size]
    return np.argsort(_radix(rank[unit], by_unit.size), kind="stable")


def _radix(keys: np.ndarray, bound: int) -> np.ndarray:
    """Non-negative integer ``keys`` below ``bound`` as 16-bit integers where they fit."""
    return keys.astype(np.uint16) if bound <= 1 << 16 else keys


def _text(values: np.ndarray, index: np.ndarray) -> object:
    """The pandas text array of ``values[index]``, with the dtype pandas infers for strings."""
    import pandas as pd  # the command line prints plans without pandas

    return pd.Series(values, copy=False).array.take(index)


def _fleets(ev: _Evaluator, grid: _Grid, replicas_max: int, output: int, budget: float | None, const: dict):
    """Per unit stable with at most ``replicas_max`` replicas: (its index, the fewest replicas that meet
    the SLOs, else the fewest stable; the evaluation there; cost; verdict; binding constraint, and
    for plans of more than one replica that meet the SLOs within budget the first check one replica
    fewer breaks, else -1; constraints as codes in ``_CONSTRAINTS``)."""
    stable_at, meeting, at, below = _search(ev, grid.batch.size, replicas_max)
    keep = stable_at > 0
    replicas = np.where(meeting > 0, meeting, stable_at)[keep]
    units = np.flatnonzero(keep)
    cost = grid.gpu_cost_hour[grid.cfg[units]] * replicas * const["hours_per_month"]
    within = np.ones(units.size, dtype=bool) if budget is None else cost <= budget
    meets = at["meets"] & within

    binding = np.where(at["meets"], _headroom(ev, at, cost, budget), _first_failure(at))
    binding = np.where(at["meets"] & ~within, _CONSTRAINTS.index("budget"), binding)
    broke = np.where(at["meets"] & within & (replicas > 1), below, -1)
    return units, replicas, at, cost, meets, binding, broke


def _warnings(
    out: dict[str, np.ndarray], configs: dict[str, np.ndarray], const: dict, workload: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """(the '; '-joined text of each set of warnings, and per row the code of its set): a row's set is
    a bit pattern, and each possible pattern is joined once. ``workload`` is (label, cs2, whether
    the closed form under-estimates its tail)."""
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
    joined = np.array(
        [
            "; ".join(message for bit, (_, message) in enumerate(checks) if pattern >> bit & 1)
            for pattern in range(1 << len(checks))
        ],
        dtype=object,
    )
    return joined, code

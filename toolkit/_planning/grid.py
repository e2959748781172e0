"""The planner's candidate grid: one cost model per model x GPU x format x TP x reservation, tabulated and cached."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from toolkit._model.efficiency import TUNABLE_EFFICIENCIES, _calibration_mapping
from toolkit._model.serving import cost_model
from toolkit._planning.inputs import _CONFIG_COLUMNS, _support, quality_score

__all__: list[str] = []


@dataclass
class _Grid:
    """Candidate arrays (one element per configuration x backend x batch) and per-config tables."""

    cfg: np.ndarray  # index into the per-config arrays
    batch: np.ndarray  # slots c (int)
    cap_reason: np.ndarray  # what caps the batch at its largest value: kv_memory / max_batch
    at_cap: np.ndarray  # batch equals its cap
    backend: np.ndarray  # names
    step_table: np.ndarray  # (configs, max_cap + 1): decode step ms at n = 0..cap sequences
    ttft_ms: np.ndarray  # per config: prefill of the uncached prompt + request overhead
    prefill_ms: np.ndarray  # per config: the prefill alone (GPU time)
    gpu_cost_hour: np.ndarray  # per config: price x tensor parallel
    configs: dict[str, np.ndarray]  # per config: model, gpu, quant, tensor_parallel, interconnect_gb_s, quality


def _freeze(spec: dict[str, Any]) -> tuple:
    """A hashable, equality-stable key for a resolved spec (NaN, which equals nothing, becomes None,
    which the resolvers read back as 'blank')."""
    return tuple(sorted((k, None if isinstance(v, float) and math.isnan(v) else v) for k, v in spec.items()))


# Cost models and their tables are cached across calls: a sweep over request rates, SLOs or
# workloads re-plans the same configurations, and a CostModel is immutable.
@lru_cache(maxsize=16384)
def _cost_model(model: tuple, gpu: tuple, quant: tuple, tp: int, calib: tuple, reserved_gb: float):
    return cost_model(
        dict(model), dict(gpu), dict(quant), tensor_parallel=tp, calibration=dict(calib), reserved_gb=reserved_gb
    )


@lru_cache(maxsize=16384)
def _kv_cap(
    model: tuple, gpu: tuple, quant: tuple, tp: int, calib: tuple, reserved_gb: float, context_tokens: int
) -> int:
    return _cost_model(model, gpu, quant, tp, calib, reserved_gb).max_concurrent_seqs(context_tokens)


@lru_cache(maxsize=16384)
def _tables(
    model: tuple,
    gpu: tuple,
    quant: tuple,
    tp: int,
    calib: tuple,
    reserved_gb: float,
    top: int,
    prompt: int,
    output: int,
    cached: float,
):
    """(decode step ms at 0..top sequences of mean context prompt + output/2, TTFT ms, prefill ms).
    The step time does not depend on the runtime reservation, so any reservation's model serves."""
    cm = _cost_model(model, gpu, quant, tp, calib, reserved_gb)
    n = np.arange(top + 1, dtype=float)
    first = cm.ttft_ms(prompt, cached)
    return cm.step_ms(n, n * (prompt + output / 2)), first, first - cm.request_overhead_ms


def _calibration_key(calibration: object) -> tuple:
    """The calibration's efficiencies as a hashable key for the cost-model caches."""
    mapping = _calibration_mapping(calibration)
    return tuple(sorted((k, float(mapping[k])) for k in TUNABLE_EFFICIENCIES if k in mapping and pd.notna(mapping[k])))


@lru_cache(maxsize=1024)
def _batch_grid(cap: int) -> np.ndarray:
    powers = 2 ** np.arange(int(math.log2(cap)) + 1)
    return np.unique(np.append(powers, cap))


def _thaw(frozen: tuple) -> dict[str, Any]:
    """The spec dict back from :func:`_freeze`, blanks as NaN again."""
    return {k: math.nan if v is None else v for k, v in frozen}


# The grid does not depend on the rate, the SLOs, the percentile, the workload or the budget, so a
# sweep over those re-uses it; its arrays are read-only.
@lru_cache(maxsize=32)
def _build_grid(
    models: tuple,
    gpus: tuple,
    quants: tuple,
    backends: tuple,
    tensor_parallel: tuple,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: float,
    calib: tuple,
    grid_max: int,
) -> _Grid:
    """Loop over the few (model, GPU, format, TP) combinations (frozen specs) to build their cost
    models and tables."""
    support = _support()
    context = prompt_tokens + output_tokens
    entries = []  # (config index, backend name, batch cap, what caps it), one per config x backend
    tables, ttft, prefill, cost_hour, rows = [], [], [], [], []  # rows: per config, its _CONFIG_COLUMNS
    gpu_specs = [(fg, _thaw(fg)) for fg in gpus]
    quant_specs = [(fq, _thaw(fq)) for fq in quants]
    backend_specs = [_thaw(fb) for fb in backends]
    for fm in models:
        m = _thaw(fm)
        if not (math.isnan(m["max_context"]) or context <= m["max_context"]):
            continue
        for fg, g in gpu_specs:
            for fq, q in quant_specs:
                usable = [b for b in backend_specs if q["name"] in support.get(b["name"], (frozenset(), False))[0]]
                for tp in tensor_parallel:
                    if m["attention_heads"] % tp or (tp > 1 and not g["interconnect_gb_s"] > 0):
                        continue
                    tp_backends = [b for b in usable if tp == 1 or support[b["name"]][1]]
                    specs = (fm, fg, fq, tp, calib)
                    caps = []
                    for b in tp_backends:
                        kv_cap = _kv_cap(*specs, b["reserved_gb"], context)
                        limit = b["max_batch"] if b["continuous_batching"] else 1
                        limit = min(grid_max, grid_max if math.isnan(limit) else int(limit))
                        if kv_cap >= 1:
                            caps.append((b, min(kv_cap, limit), "kv_memory" if kv_cap < limit else "max_batch"))
                    if not caps:
                        continue
                    index = len(rows)
                    step, first, alone = _tables(
                        *specs,
                        caps[0][0]["reserved_gb"],
                        max(c for _, c, _ in caps),
                        prompt_tokens,
                        output_tokens,
                        cached_tokens,
                    )
                    tables.append(step)
                    ttft.append(first)
                    prefill.append(alone)
                    cost_hour.append(g["price_usd_hour"] * tp)
                    rows.append(
                        (
                            m["name"],
                            g["name"],
                            q["name"],
                            tp,
                            g["interconnect_gb_s"],
                            quality_score(m["name"], q["name"]),
                        )
                    )
                    entries.extend((index, b["name"], cap, why) for b, cap, why in caps)
    width = max((t.size for t in tables), default=1)
    table = np.full((len(tables), width), np.nan)
    for i, t in enumerate(tables):
        table[i, : t.size] = t
    grids = [_batch_grid(cap) for _, _, cap, _ in entries]
    sizes = [grid.size for grid in grids]
    per_entry = lambda k, dtype: np.repeat(np.array([e[k] for e in entries], dtype=dtype), sizes)
    batch = np.concatenate(grids) if grids else np.array([], dtype=int)
    grid = _Grid(
        cfg=per_entry(0, int),
        batch=batch,
        cap_reason=per_entry(3, object),
        at_cap=batch == per_entry(2, int),
        backend=per_entry(1, object),
        step_table=table,
        ttft_ms=np.array(ttft, dtype=float),
        prefill_ms=np.array(prefill, dtype=float),
        gpu_cost_hour=np.array(cost_hour, dtype=float),
        configs={
            name: np.array([r[i] for r in rows], dtype=dtype) for i, (name, dtype) in enumerate(_CONFIG_COLUMNS.items())
        },
    )
    for value in (*vars(grid).values(), *grid.configs.values()):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return grid

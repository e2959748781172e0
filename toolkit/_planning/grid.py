"""The planner's candidate grid: every model x GPU x format x TP configuration and its backends, as arrays.

The catalog rows are resolved and validated once (by the planner, into frozen specs); here their
fields become columns, and the cost model's formulas (:mod:`toolkit._model.terms`, the ones
:class:`toolkit.CostModel` evaluates) run once over all configurations, a configuration per array
element: KV-bound batch caps per backend, TTFT and prefill, and the decode step table over batch
0..cap, each element computed where a plan first reads it.
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from toolkit._model.constants import cost_constants
from toolkit._model.efficiency import TUNABLE_EFFICIENCIES, _calibration_mapping, _efficiencies, engine_efficiencies
from toolkit._model.memory import _max_seqs, shards_heads
from toolkit._model.resolve import _GPU_FIELDS as _GPU_SPEC
from toolkit._model.resolve import _GPU_OPTIONAL, _MODEL_OPTIONAL, within_window
from toolkit._model.resolve import _MODEL_FIELDS as _MODEL_SPEC
from toolkit._model.serving import _memory_settings
from toolkit._model.terms import step_time
from toolkit._planning.inputs import _support, quality_score
from toolkit._planning.prefix import unit_prefill

__all__: list[str] = []

# the spec fields the cost model reads, per spec kind: the resolvers' numeric fields (one list of
# them, in toolkit._model.resolve); tied_embeddings is a flag, taken apart, and max_context only
# filters configurations
_MODEL_FIELDS = tuple(
    f for f in (*_MODEL_SPEC, *_MODEL_OPTIONAL) if f not in ("name", "tied_embeddings", "max_context")
)
_GPU_FIELDS = tuple(f for f in (*_GPU_SPEC, *_GPU_OPTIONAL) if f != "name")
# the KV cache of planned configurations: the cost model's default format
_KV_FP16 = {"name": "fp16", "bits_per_element": 16}


@dataclass
class _Grid:
    """Evaluation units (distinct configuration x batch pairs), candidates (configuration x backend x
    batch, each pointing at its unit) and per-config tables."""

    cfg: np.ndarray  # per unit: index into the per-config arrays
    batch: np.ndarray  # per unit: slots c (int)
    unit: np.ndarray  # per candidate: its unit
    cap_reason: np.ndarray  # what caps the batch at its largest value: kv_memory / max_batch
    at_cap: np.ndarray  # batch equals its cap
    backend: np.ndarray  # names
    step_table: np.ndarray  # (configs, max_cap + 1): decode step ms at n = 0..cap sequences, read by steps()
    ttft_ms: np.ndarray  # per unit: prefill of the uncached prompt + request overhead
    prefill_ms: np.ndarray  # per unit: the prefill alone (GPU time)
    prefix_hit_rate: np.ndarray  # per unit: share of the prompt found in the prefix cache
    gpu_cost_hour: np.ndarray  # per config: price x tensor parallel
    configs: dict[str, np.ndarray]  # per config: model, gpu, quant, tensor_parallel, interconnect_gb_s, quality
    backend_names: np.ndarray | None = None  # the backend names (None: the distinct ones of backend) ...
    backend_code: np.ndarray | None = None  # ... and per candidate its position there
    kv_capped: np.ndarray = field(init=False)  # per candidate: cap_reason is kv_memory
    # fills step_table where a plan reads it (None: step_table is complete)
    step_fill: _StepFill | None = None

    def __post_init__(self) -> None:
        if self.backend_code is None:
            names = dict.fromkeys(self.backend.tolist())
            position = {name: i for i, name in enumerate(names)}
            self.backend_names = np.array(list(names), dtype=object)
            self.backend_code = np.array([position[name] for name in self.backend.tolist()], dtype=np.intp)
        self.kv_capped = self.cap_reason == "kv_memory"

    def steps(self, positions: np.ndarray) -> np.ndarray:
        """Decode step ms at flat positions of ``step_table``. Elements not computed yet are NaN: only
        a NaN read makes it look further (an element that is NaN once computed is read twice)."""
        table = self.step_table.reshape(-1)
        values = table.take(positions)
        if self.step_fill is not None and np.isnan(values).any():
            self.step_fill.complete(positions)
            values = table.take(positions)
        return values


class _StepFill:
    """A decode step table (row: configuration, column: ``n`` sequences of ``tokens_per_sequence`` KV
    tokens each) computed element by element where it is first read, with the cost model's step
    formula over the configurations' ``constants``: a plan reads a small share of the table (the
    batches its fixed points and percentiles visit), and each element is what the formula gives for
    that configuration alone, whoever asks first."""

    def __init__(self, table: np.ndarray, constants: dict[str, Any], tokens_per_sequence: float) -> None:
        self.table, self.width = table.reshape(-1), table.shape[1]
        self.tokens_per_sequence = tokens_per_sequence
        # the per-configuration columns stacked by dtype, so a fill gathers its rows in one take per dtype
        self.scalars = {k: v for k, v in constants.items() if k != "model" and np.ndim(v) != 2}
        columns = [((None, k), v) for k, v in constants.items() if k != "model" and np.ndim(v) == 2]
        columns += [(("model", k), v) for k, v in constants["model"].items()]
        self.stacks = [
            (
                [key for key, v in columns if v.dtype == dtype],
                np.stack([v[:, 0] for _, v in columns if v.dtype == dtype]),
            )
            for dtype in dict.fromkeys(v.dtype for _, v in columns)
        ]
        self.known = np.zeros(self.table.size, dtype=bool)
        self._scratch = np.empty(self.table.size, dtype=np.int32)
        self._lock = threading.Lock()

    def complete(self, positions: np.ndarray) -> None:
        """Compute the elements at ``positions`` (flat) not computed yet."""
        missing = positions[~self.known[positions]]
        if not missing.size:
            return
        with self._lock:
            missing = missing[~self.known[missing]]  # unless another thread just computed them
            # each position once (its last occurrence), in linear time: no sort, no hash
            seen = np.arange(missing.size, dtype=np.int32)
            self._scratch[missing] = seen
            missing = missing[self._scratch[missing] == seen]
            rows, n = np.divmod(missing, self.width)
            part: dict[str, Any] = {**self.scalars, "model": {}}
            for keys, stack in self.stacks:
                for (group, name), values in zip(keys, stack.take(rows, axis=1)):
                    (part["model"] if group else part)[name] = values
            n = n.astype(float)
            self.table[missing] = step_time(part, n, n * self.tokens_per_sequence, 0.0, 0.0)
            self.known[missing] = True  # after the values: a reader that sees it finds them


def _freeze(spec: dict[str, Any]) -> tuple:
    """A hashable, equality-stable key for a resolved spec (NaN, which equals nothing, becomes None,
    which the resolvers read back as 'blank')."""
    return tuple(sorted((k, None if isinstance(v, float) and math.isnan(v) else v) for k, v in spec.items()))


def _thaw(frozen: tuple) -> dict[str, Any]:
    """The spec dict back from :func:`_freeze`, blanks as NaN again."""
    return {k: math.nan if v is None else v for k, v in frozen}


def _calibration_key(calibration: object) -> tuple:
    """The calibration's efficiencies as a hashable key for the grid cache."""
    mapping = _calibration_mapping(calibration)
    return tuple(sorted((k, float(mapping[k])) for k in TUNABLE_EFFICIENCIES if k in mapping and _given(mapping[k])))


def _given(value: object) -> bool:
    """Whether a calibration value is set: not None, NaN or pandas' NA."""
    pd = sys.modules.get("pandas")  # a pandas NA can only come with pandas loaded
    return bool(pd.notna(value)) if pd is not None else value is not None and value == value


def _columns(frozen: tuple, fields: tuple[str, ...], index: np.ndarray) -> dict[str, np.ndarray]:
    """Spec fields as arrays, one element per ``index`` entry (a column vector, to broadcast)."""
    specs = [_thaw(f) for f in frozen]
    return {field: np.array([s[field] for s in specs])[index][:, None] for field in fields}


def _batch_grids(cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(entry of each batch, batch) of every entry's grid: powers of two up to its cap, and the cap."""
    top = np.frexp(cap)[1] - 1  # floor(log2(cap)), exact for integers
    sizes = top + 1 + ((1 << top) != cap)
    entry = np.repeat(np.arange(cap.size), sizes)
    pos = np.arange(entry.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return entry, np.where(pos <= top[entry], np.left_shift(1, pos), cap[entry])


def _step_kind(backend: dict[str, Any]) -> tuple:
    """What sets a backend's step costs beyond the configuration: fp16 accumulation and its
    all-release efficiency defaults (data/engine_efficiency.csv)."""
    return bool(backend["fp16_accumulate"]), tuple(sorted(engine_efficiencies(backend["name"]).items()))


def _limits(backend_specs: list[dict[str, Any]], grid_max: int) -> np.ndarray:
    """Per backend: its cap on the batch (1 without continuous batching), at most ``grid_max``."""
    limits = []
    for b in backend_specs:
        limit = b["max_batch"] if b["continuous_batching"] else 1
        limits.append(min(grid_max, grid_max if math.isnan(limit) else int(limit)))
    return np.array(limits)


# The grid does not depend on the rate, the SLOs, the percentile, the workload or the budget, so a
# sweep over those re-uses it; its arrays are read-only (the step table is filled where read, never altered).
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
    curve: tuple | None = None,
) -> _Grid:
    """Every (model, GPU, format, TP) configuration (frozen specs, nested in that order) with the
    backends that load the format, shard where TP > 1 and fit one sequence, evaluated as arrays.
    With a reuse ``curve`` (:func:`toolkit._planning.prefix.capacity_curve`) each unit is one backend's
    and finds the hit rate its KV budget leaves room for; otherwise ``cached_tokens`` each."""
    context = prompt_tokens + output_tokens
    model_specs, gpu_specs, quant_specs = ([_thaw(f) for f in kind] for kind in (models, gpus, quants))
    backend_specs = [_thaw(f) for f in backends]
    tps = np.array(tensor_parallel)
    mi, gi, qi, ti = (a.ravel() for a in np.indices((len(models), len(gpus), len(quants), tps.size)))
    tp = tps[ti]

    support = _support()
    known = [support.get(b["name"], (frozenset(), False)) for b in backend_specs]
    loads = np.array([[q["name"] in formats for formats, _ in known] for q in quant_specs]).reshape(len(quants), -1)
    shards = np.array([shard for _, shard in known], dtype=bool)
    max_context = np.array([m["max_context"] for m in model_specs])
    heads = np.array([m["attention_heads"] for m in model_specs])
    kv_heads = np.array([m["kv_heads"] for m in model_specs])
    interconnect = np.array([g["interconnect_gb_s"] for g in gpu_specs])
    fits = within_window(max_context, context)[mi] & shards_heads(heads[mi], kv_heads[mi], tp)
    fits &= (tp == 1) | (interconnect[gi] > 0)
    usable = loads[qi] & ((tp == 1)[:, None] | shards) & fits[:, None]
    # a configuration served by engines whose steps cost differently (GEMMs accumulating in fp16 or
    # fp32, their own efficiency defaults) is one row per kind, each usable by its kind of backend
    keys = [_step_kind(b) for b in backend_specs]
    kinds = list(dict.fromkeys(keys))
    kind_of = np.array([kinds.index(k) for k in keys])
    usable = np.stack([usable & (kind_of == k) for k in range(len(kinds))], axis=1).reshape(-1, len(keys))
    mi, gi, qi, tp = (np.repeat(a, len(kinds)) for a in (mi, gi, qi, tp))
    kind = np.tile(np.arange(len(kinds)), mi.size // len(kinds))
    rows = np.flatnonzero(usable.any(axis=1))
    mi, gi, qi, tp, usable, kind = mi[rows], gi[rows], qi[rows], tp[rows], usable[rows], kind[rows]
    per_kind = [_efficiencies(dict(calib), {}, dict(engine)) for _, engine in kinds]
    efficiencies = {name: np.array([e[name] for e in per_kind])[kind][:, None] for name in per_kind[0]}
    acc16 = np.array([accumulate for accumulate, _ in kinds], dtype=bool)[kind]

    model = _columns(models, _MODEL_FIELDS, mi)
    model["tied_embeddings"] = _columns(models, ("tied_embeddings",), mi)["tied_embeddings"].astype(int)
    gpu = _columns(gpus, _GPU_FIELDS, gi)
    quant = _columns(quants, ("bits_per_weight", "compute", "weight_read_efficiency"), qi)
    util, act_tokens, _ = _memory_settings()
    reserved = np.array([b["reserved_gb"] for b in backend_specs], dtype=float)
    kv_fraction = np.array([b["kv_free_fraction"] for b in backend_specs], dtype=float)
    constants = cost_constants(
        {"model": model, "gpu": gpu, "quant": quant, "kv_dtype": _KV_FP16},
        tp[:, None],
        efficiencies,
        gpu_memory_utilization=util,
        activation_tokens=act_tokens,
        reserved_gb=reserved,  # one column per backend
        fp16_accumulate=acc16[:, None],
        kv_free_fraction=kv_fraction,  # one column per backend
    )
    constants.update(model=model, tensor_parallel=tp[:, None])
    kv_cap = _max_seqs(
        model,
        {"kv_budget": constants["kv_budget_bytes"], "kv_layer_bytes": constants["kv_layer_bytes"]},
        float(context),
        constants["kv_block_tokens"],
    )
    limit = _limits(backend_specs, grid_max)
    ok = usable & (kv_cap >= 1)
    kept = np.flatnonzero(ok.any(axis=1))
    ok, kv_cap = ok[kept], kv_cap[kept]
    constants = {k: v[kept] if np.ndim(v) == 2 else v for k, v in constants.items() if k != "model"}
    constants["model"] = {k: v[kept] for k, v in model.items()}
    cap = np.minimum(kv_cap, limit)

    # the decode step at 0..cap sequences of mean context prompt + output / 2, row by configuration,
    # filled where a plan reads it
    width = int(np.where(ok, cap, 0).max(initial=0)) + 1
    per_config = {k: v for k, v in constants.items() if k == "model" or np.ndim(v) != 2 or v.shape[1] == 1}
    config, backend = np.nonzero(ok)
    entry, batch = _batch_grids(cap[config, backend])
    # a unit: (configuration, batch), and the backend too where the hit rate depends on its KV budget
    key = config[entry] if curve is None else config[entry] * len(backend_specs) + backend[entry]
    units, unit = np.unique(key * (batch.max(initial=0) + 1) + batch, return_inverse=True)
    unit_key, unit_batch = units // (batch.max(initial=0) + 1), units % (batch.max(initial=0) + 1)
    unit_cfg = unit_key if curve is None else unit_key // len(backend_specs)
    unit_backend = None if curve is None else unit_key % len(backend_specs)
    args = (prompt_tokens, output_tokens, cached_tokens, curve)
    hit, first = unit_prefill(constants, unit_cfg, unit_backend, unit_batch, *args)
    backend_names = np.array([b["name"] for b in backend_specs], dtype=object)
    names = lambda specs, index: np.array([s["name"] for s in specs], dtype=object)[index[kept]]
    quality = np.array([[quality_score(m["name"], q["name"]) for q in quant_specs] for m in model_specs])
    grid = _Grid(
        cfg=unit_cfg,
        batch=unit_batch,
        unit=unit.ravel(),
        cap_reason=np.where(kv_cap < limit, "kv_memory", "max_batch")[config, backend][entry],
        at_cap=batch == cap[config, backend][entry],
        backend=backend_names[backend[entry]],
        backend_names=backend_names,
        backend_code=backend[entry],
        step_table=np.full((kept.size, width), np.nan),
        ttft_ms=first,
        prefill_ms=first - constants["request_overhead_ms"][unit_cfg, 0],
        prefix_hit_rate=hit,
        gpu_cost_hour=gpu["price_usd_hour"][kept, 0] * tp[kept],
        configs={
            "model": names(model_specs, mi),
            "gpu": names(gpu_specs, gi),
            "quant": names(quant_specs, qi),
            "tensor_parallel": tp[kept],
            "interconnect_gb_s": gpu["interconnect_gb_s"][kept, 0].astype(float),
            "quality": quality[mi[kept], qi[kept]],
        },
    )
    for value in (*vars(grid).values(), *grid.configs.values()):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    grid.step_table.flags.writeable = True  # filled where read, each element once
    grid.step_fill = _StepFill(grid.step_table, per_config, prompt_tokens + output_tokens / 2)
    return grid

"""The planner's prefix-cache hit rate per candidate, from the workload's reuse curve and the candidate's KV budget.

With a trace whose requests carry ``prefix_blocks``, :func:`toolkit.plan` takes the trace's capacity
curve (the hit rate of an LRU prefix cache of every capacity, :func:`toolkit._workload.prefix.reuse_curve`)
once and reads each candidate's hit rate off it at the cache that candidate leaves free: a replica's KV
budget less what its ``batch`` running sequences of mean context (``prompt + output / 2``) hold, in tokens
of full-attention KV. That is the memory vLLM keeps freed blocks cached in (``toolkit._queueing.prefix_cache``):
a full batch leaves least, so the largest batches find the least. The hit rate then cuts the prefill, as a
constant ``prefix_cache_hit_rate`` does (``CostModel.ttft_ms(prompt, cached = hit x prompt)``).

The curve is of one cache seeing the whole stream: a replica's, when one replica serves the trace or a
prefix-aware router keeps each prefix on one replica; round robin over several replicas finds less. It is
also the block cache's: llama.cpp's slots keep one prompt each, so for its backends the figure is an upper bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit._model.memory import _seq_kv_bytes
from toolkit._model.terms import ttft_time

__all__: list[str] = []


def capacity_curve(trace: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(capacities in tokens, hit rates) of a trace's reuse curve, from (0, 0) (a hashable pair, for the
    grid's cache), or None for a trace without ``prefix_blocks``."""
    if "prefix_blocks" not in getattr(trace, "columns", ()):
        return None
    from toolkit._workload.prefix import reuse_curve  # pandas: only a trace with prefixes needs it

    curve = reuse_curve(trace)
    capacity = np.concatenate(([0.0], curve["capacity_tokens"].to_numpy(dtype=float)))
    hit = np.concatenate(([0.0], curve["hit_rate"].to_numpy(dtype=float)))
    return tuple(capacity.tolist()), tuple(hit.tolist())


def free_cache_tokens(
    model: dict[str, np.ndarray], constants: dict[str, np.ndarray], batch: np.ndarray, context_tokens: float
) -> np.ndarray:
    """Per candidate (rows of ``model`` and ``constants``, a column of ``kv_budget_bytes`` each), the KV
    tokens ``batch`` sequences of ``context_tokens`` leave free, at least 0."""
    layer_bytes = constants["kv_layer_bytes"]
    held = batch * _seq_kv_bytes(
        model, layer_bytes, np.asarray(context_tokens, dtype=float), constants["kv_block_tokens"]
    )
    free = np.maximum(constants["kv_budget_bytes"] - held, 0.0)
    return free / (layer_bytes * model["layers"])


def unit_prefill(
    constants: dict[str, Any],
    cfg: np.ndarray,
    backend: np.ndarray | None,
    batch: np.ndarray,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: float,
    curve: tuple[tuple[float, ...], tuple[float, ...]] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per evaluation unit (configuration ``cfg``, backend ``backend`` where the curve splits units by it,
    ``batch``): (its prefix hit rate, its TTFT in ms: the prefill of the uncached prompt plus the request
    overhead). Without a curve every unit finds ``cached_tokens``."""
    if curve is None:
        hit = np.full(cfg.size, cached_tokens / prompt_tokens)
        first = ttft_time(constants, float(prompt_tokens), cached_tokens)[:, 0]
        return hit, first[cfg]
    per_unit = {k: v[cfg] for k, v in constants.items() if k != "model" and np.ndim(v) == 2}
    model = {k: v[cfg] for k, v in constants["model"].items()}
    memory = {}
    for k in ("kv_budget_bytes", "kv_layer_bytes", "kv_block_tokens"):
        v = per_unit.get(k, constants[k])
        memory[k] = v if np.ndim(v) < 2 or v.shape[1] == 1 else v[np.arange(cfg.size), backend][:, None]
    free = free_cache_tokens(model, memory, batch.astype(float)[:, None], prompt_tokens + output_tokens / 2)
    hit = np.interp(free[:, 0], *curve)
    unit_constants = {**constants, **per_unit, "model": model}
    first = ttft_time(unit_constants, float(prompt_tokens), (hit * prompt_tokens)[:, None])[:, 0]
    return hit, first

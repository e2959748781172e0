"""GPU memory of a served model: weights, KV cache per token, activations, and KV-bound concurrency.

Units: bytes internally; every ``*_gb`` figure is decimal GB (1e9 bytes), including GPU capacities
(``data/gpus.csv`` stores an "80 GB" H100 as its real 80 GiB = 85.90 GB). Nothing here mixes GiB.

The budget, per GPU::

    usable      = memory_gb * 1e9 * gpu_memory_utilization
    weights     = params * bits_per_weight / 8 / tensor_parallel
    activation  = activation_tokens * (hidden + 3 * intermediate * k / tensor_parallel) * 2 bytes
    kv_budget   = usable - weights - reserved - activation
                  (or kv_free_fraction x (memory - weights - reserved - activation))

The second form is a backend's whose ``kv_free_fraction`` is set (``data/backends.csv``): TensorRT-LLM
loads the engine first and gives its KV cache a fraction of the memory then still free, so a model that
nearly fills the GPU still gets most of the rest, where vLLM's ``gpu_memory_utilization`` caps the
total and leaves the KV cache only what is left under that cap.

``activation`` is the peak of one forward pass over ``activation_tokens`` tokens: the residual stream
(hidden) plus the MLP's gate, up and activated buffers (3 x intermediate, times the k routed experts of
an MoE, split by tensor parallel), in fp16. It is linear in the tokens of the largest forward pass:
one whole prompt by default, or a continuous-batching engine's ``max_num_batched_tokens``.
``reserved``: the runtime's memory outside torch tensors (CUDA context, workspaces, sampler buffers), a
backend's ``reserved_gb`` or the default in ``data/efficiency.csv``. KV is paged in blocks of
``kv_block_tokens`` (16): T tokens hold ceil(T / 16) blocks, ``max_concurrent_seqs`` = floor(budget / per seq).

Checked against vLLM (gpu_memory_utilization 0.9): Llama-3.1-8B bf16 on an RTX 4090 with an 8k
forward pass, ours 40,896 KV tokens vs 41,408 measured (-1.2%); Llama-2-7B on an H100 with its 4k
context, 119,264 vs 119,408 (-0.1%); see tests/test_memory.py for the derivation of the bounds.

Why we differ from chimeraforge 0.6.0's ``max_concurrent_seqs`` (3B Q4_K_M at 2k on 24 GB: ours 85 vs
their 89; 7B at 2k on 12 GB: ours 22 vs their 25): they multiply the weights by a 1.10 overhead but
reserve nothing for the runtime (CUDA context, workspaces) or for activations, take Q4_K_M at 4.5
bits per weight where real files average ~4.9 (K-quant mixes keep some tensors at 6 bits), ignore KV
paging, and subtract decimal-GB weights from GiB of VRAM. Our 1 GB runtime reservation and the
activation reserve cost 4-5 sequences of 2k tokens on these cards; their unit mix alone costs them one.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit._args import check_array, check_int, check_number
from toolkit._data import load_rows
from toolkit._model.resolve import (
    resolve_backend,
    resolve_gpu,
    resolve_kv_dtype,
    resolve_model,
    resolve_quant,
    within_window,
)
from toolkit._vocab.keywords import positional_deprecated

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["kv_bytes_per_token", "memory"]


@lru_cache(maxsize=1)
def _efficiency() -> dict[str, float]:
    return {str(row["parameter"]): float(row["value"]) for row in load_rows("efficiency.csv")}


def efficiency_value(parameter: str) -> float:
    """One default from ``data/efficiency.csv`` (private helper shared with the cost model)."""
    return _efficiency()[parameter]


def _kv_layer_bytes(model: dict[str, Any], kv: dict[str, Any], tensor_parallel: int = 1) -> float:
    """Bytes one token's K and V occupy in one layer on one GPU (KV heads split by tensor parallel,
    replicated once there are more GPUs than KV heads)."""
    kv_heads = -(-model["kv_heads"] // tensor_parallel)  # ceil, for integers and integer arrays
    return 2 * kv_heads * model["head_dim"] * kv["bits_per_element"] / 8


def _layer_split(model: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(global layers, sliding-window layers, window tokens; 0 where there are no window layers, so
    that every window term, a multiple of the window layers, is 0). Broadcasts over array specs."""
    window_layers = model["sliding_window_layers"]
    if isinstance(window_layers, np.ndarray):
        window = np.where(window_layers > 0, model["sliding_window"], 0.0)
    else:
        window = model["sliding_window"] if window_layers else 0.0
    return model["layers"] - window_layers, window_layers, window


def _seq_kv_bytes(model: dict[str, Any], layer_bytes: float, tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Bytes one sequence of ``tokens`` tokens holds, in whole paged blocks (window layers capped)."""
    full, windowed, window = _layer_split(model)
    blocks = np.ceil(tokens / block_tokens) * block_tokens
    capped = np.ceil(np.minimum(tokens, window) / block_tokens) * block_tokens
    return layer_bytes * (full * blocks + windowed * capped)


def shards_heads(attention_heads: Any, kv_heads: Any, tensor_parallel: Any) -> Any:
    """Whether ``tensor_parallel`` GPUs can share a model's heads: each takes an equal share of the
    attention heads, and of the KV heads, or one KV head replicated on ``tensor_parallel / kv_heads``
    GPUs (vLLM's QKVParallelLinear splits or replicates KV heads so, and refuses any other degree).
    Vectorised over all three."""
    return (attention_heads % tensor_parallel == 0) & (
        (kv_heads % tensor_parallel == 0) | (tensor_parallel % kv_heads == 0)
    )


def _check_tensor_parallel(model: dict[str, Any], tensor_parallel: object) -> int:
    tp = check_int("tensor_parallel", tensor_parallel, low=1, high=64)
    if not shards_heads(model["attention_heads"], model["kv_heads"], tp):
        raise ValueError(
            f"tensor_parallel must divide the model's {model['attention_heads']} attention heads and divide, "
            f"or be a multiple of, its {model['kv_heads']} KV heads; got {tp}"
        )
    return tp


def kv_bytes_per_token(model: object, kv_dtype: object = "fp16", context_tokens: object = None) -> float | np.ndarray:
    """KV-cache bytes per token: 2 (K and V) x layers x KV heads x head dim x bytes per element.

    Grouped-query attention counts KV heads, not attention heads. With sliding-window layers the
    figure depends on the context: a window layer keeps at most ``window`` tokens, so a sequence of T
    tokens holds ``per_layer x (global_layers x T + window_layers x min(T, window))`` bytes and the
    per-token average is that over T. Without ``context_tokens`` (or for a model without windows) it is
    the uncapped figure, every layer storing every token: the upper bound.

    Parameters
    ----------
    model : str, dict, pandas.Series or one-row DataFrame
        Catalog name or architecture spec.
    kv_dtype : str or dict
        KV-cache format (``fp16``, ``fp8``, ``q8``, ``q4``) or a spec with ``bits_per_element``.
    context_tokens : int, array-like or None
        Tokens held by the sequence (>= 1); None for the uncapped per-token figure.

    Returns
    -------
    float or numpy.ndarray
        Bytes per token (average over the sequence when windows cap it); an array when
        ``context_tokens`` is array-like.
    """
    spec = resolve_model(model)
    layer_bytes = _kv_layer_bytes(spec, resolve_kv_dtype(kv_dtype))
    full, windowed, window = _layer_split(spec)
    if context_tokens is None:
        return layer_bytes * spec["layers"]
    tokens = check_array("context_tokens", context_tokens, low=1)
    per_token = layer_bytes * (full + windowed * np.minimum(tokens, window) / tokens)
    return float(per_token[0]) if np.ndim(context_tokens) == 0 else per_token


def _budget(
    model: dict[str, Any],
    gpu: dict[str, Any],
    quant: dict[str, Any],
    kv: dict[str, Any],
    *,
    tensor_parallel: int,
    gpu_memory_utilization: float,
    reserved_gb: float,
    activation_tokens: float,
    kv_free_fraction: Any = math.nan,
) -> dict[str, float]:
    """Per-GPU byte budget (the one place the memory arithmetic lives). ``kv_free_fraction`` (NaN:
    none; a number or an array, NaN where none): the KV cache takes that fraction of the memory free
    after weights, runtime and activations, in place of what ``gpu_memory_utilization`` leaves."""
    tp = tensor_parallel
    act_bytes = efficiency_value("activation_bytes_per_value")
    routed = np.maximum(model["experts_per_token"], 1)
    memory = gpu["memory_gb"] * 1e9
    weights = model["params_b"] * 1e9 * quant["bits_per_weight"] / 8 / tp
    per_token_act = (model["hidden_size"] + 3 * model["intermediate_size"] * routed / tp) * act_bytes
    activation = activation_tokens * per_token_act
    reserved = reserved_gb * 1e9
    taken = weights + reserved + activation
    capped = memory * gpu_memory_utilization - taken
    if isinstance(kv_free_fraction, np.ndarray):
        kv_budget = np.where(np.isnan(kv_free_fraction), capped, kv_free_fraction * (memory - taken))
    else:
        kv_budget = capped if math.isnan(kv_free_fraction) else kv_free_fraction * (memory - taken)
    return {
        "usable": taken + kv_budget,
        "weights": weights,
        "activation": activation,
        "reserved": reserved,
        "kv_budget": kv_budget,
        "kv_layer_bytes": _kv_layer_bytes(model, kv, tp),
    }


def _kv_budget_tokens(model: dict[str, Any], budget: dict[str, float], block_tokens: int) -> int:
    """Tokens the KV budget holds, at every layer, in whole blocks (what vLLM logs as its KV cache size)."""
    per_token = budget["kv_layer_bytes"] * model["layers"]
    blocks = np.floor(np.maximum(budget["kv_budget"], 0.0) / per_token / block_tokens).astype(np.int64)
    return blocks * block_tokens if isinstance(blocks, np.ndarray) else int(blocks) * block_tokens


def _max_seqs(
    model: dict[str, Any], budget: dict[str, float], context_tokens: np.ndarray, block_tokens: int
) -> np.ndarray:
    per_seq = _seq_kv_bytes(model, budget["kv_layer_bytes"], context_tokens, block_tokens)
    return np.floor(np.maximum(budget["kv_budget"], 0.0) / per_seq).astype(int)


@positional_deprecated
def memory(
    model: object,
    gpu: object,
    quant: object,
    context_tokens: int,
    *,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float | None = None,
    kv_dtype: object = "fp16",
    backend: object = None,
    max_num_batched_tokens: int | None = None,
    reserved_gb: float | None = None,
) -> pd.DataFrame:
    """Memory budget of one model on one GPU (per GPU under tensor parallel), and how many sequences fit.

    Parameters
    ----------
    model, gpu, quant : str or spec
        Catalog names (loosely written) or spec dicts / Series / one-row DataFrames.
    context_tokens : int
        Tokens each sequence holds (prompt + output), >= 1.
    tensor_parallel : int
        GPUs the model is split over (must divide the attention heads).
    gpu_memory_utilization : float, optional
        Fraction of GPU memory the engine may use, in (0, 1]; default 0.9 (vLLM's).
    kv_dtype : str or spec
        KV-cache format.
    backend : str or spec, optional
        Serving backend whose ``reserved_gb`` replaces the default runtime reservation; one with a
        ``kv_free_fraction`` (TensorRT-LLM) sizes its KV cache as that fraction of the memory left
        after weights, runtime and activations, and ``gpu_memory_utilization`` does not apply.
    max_num_batched_tokens : int, optional
        Tokens in the largest forward pass, which sizes the activation reserve; default
        ``context_tokens`` (one whole prompt). A chunked-prefill engine profiles its token budget.
    reserved_gb : float, optional
        Runtime memory outside weights, KV and activations (GB); overrides backend and default.

    Returns
    -------
    pandas.DataFrame
        One row: ``model``, ``gpu``, ``quant``, ``kv_dtype``, ``backend``, ``context_tokens``,
        ``tensor_parallel``, ``gpu_memory_utilization``, ``memory_gb`` (capacity of one GPU),
        ``usable_gb`` (what the engine takes: weights, activations, runtime and KV), ``weights_gb``,
        ``activation_gb``, ``reserved_gb``, ``kv_budget_gb`` (all per GPU, 1e9 bytes; 0, never
        negative, where weights, activations and runtime take all the usable memory),
        ``kv_gb_per_seq`` (one sequence at ``context_tokens``, whole blocks), ``kv_budget_tokens``
        (tokens the KV budget holds, whole blocks), ``max_concurrent_seqs`` (KV-bound), ``fits`` (at
        least one sequence fits and ``context_tokens`` is within the model's maximum context).
    """
    spec_model = resolve_model(model)
    spec_gpu = resolve_gpu(gpu)
    spec_quant = resolve_quant(quant)
    spec_kv = resolve_kv_dtype(kv_dtype)
    spec_backend = None if backend is None else resolve_backend(backend)
    context = check_int("context_tokens", context_tokens, low=1)
    tp = _check_tensor_parallel(spec_model, tensor_parallel)
    util = check_number(
        "gpu_memory_utilization",
        efficiency_value("gpu_memory_utilization") if gpu_memory_utilization is None else gpu_memory_utilization,
        low=0,
        high=1,
        low_inclusive=False,
    )
    if reserved_gb is None:
        reserved_gb = spec_backend["reserved_gb"] if spec_backend else efficiency_value("reserved_gb")
    reserved = check_number("reserved_gb", reserved_gb, low=0)
    act_tokens = (
        context
        if max_num_batched_tokens is None
        else check_int("max_num_batched_tokens", max_num_batched_tokens, low=1)
    )
    block = int(efficiency_value("kv_block_tokens"))
    budget = _budget(
        spec_model,
        spec_gpu,
        spec_quant,
        spec_kv,
        tensor_parallel=tp,
        gpu_memory_utilization=util,
        reserved_gb=reserved,
        activation_tokens=act_tokens,
        kv_free_fraction=spec_backend["kv_free_fraction"] if spec_backend else math.nan,
    )
    seq_bytes = float(_seq_kv_bytes(spec_model, budget["kv_layer_bytes"], np.array([context]), block)[0])
    max_seqs = int(_max_seqs(spec_model, budget, np.array([context]), block)[0])
    within = within_window(spec_model["max_context"], context)
    import pandas as pd  # the planner sizes memory without pandas

    return pd.DataFrame(
        [
            {
                "model": spec_model["name"],
                "gpu": spec_gpu["name"],
                "quant": spec_quant["name"],
                "kv_dtype": spec_kv["name"],
                "backend": spec_backend["name"] if spec_backend else None,
                "context_tokens": context,
                "tensor_parallel": tp,
                "gpu_memory_utilization": util,
                "memory_gb": spec_gpu["memory_gb"],
                "usable_gb": budget["usable"] / 1e9,
                "weights_gb": budget["weights"] / 1e9,
                "activation_gb": budget["activation"] / 1e9,
                "reserved_gb": budget["reserved"] / 1e9,
                "kv_budget_gb": max(budget["kv_budget"], 0.0) / 1e9,
                "kv_gb_per_seq": seq_bytes / 1e9,
                "kv_budget_tokens": _kv_budget_tokens(spec_model, budget, block),
                "max_concurrent_seqs": max_seqs,
                "fits": bool(max_seqs >= 1 and within),
            }
        ]
    )

"""The cost model's formulas as numpy-broadcasting functions: its per-GPU constants, one engine step, TTFT.

Every formula of :class:`toolkit.CostModel` lives here once. ``CostModel`` calls these functions with
the scalars of one model on one GPU; the planner calls them with arrays holding one element per
(model, GPU, format, tensor parallel) configuration, so the whole candidate grid is one evaluation.
The formulas themselves are documented in the module docstring of :mod:`toolkit._model.serving`.

``specs`` arguments are mappings of the spec fields each function reads (``model``, ``gpu``,
``quant``, ``kv_dtype`` dicts, their values scalars or arrays of one shape); ``constants`` is a
mapping of the numeric :class:`CostModel` fields plus ``model``, as :func:`cost_constants` returns
(``vars(cost_model)`` is one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from toolkit._model.memory import _budget, _kv_budget_tokens, _kv_layer_bytes, _layer_split, efficiency_value

__all__: list[str] = []


# For plain numbers (the simulator's one step at a time) Python's builtins replace numpy's scalar
# calls, which cost a microsecond each; they return the same values. The exact type test is the
# cheapest check: the arrays here are plain ndarrays, never subclasses.
_ARRAY = np.ndarray


def _any(value: Any) -> bool:
    """Whether any element is non-zero."""
    return bool(value.any()) if type(value) is _ARRAY else bool(value)


def _lesser(a: Any, b: Any) -> Any:
    """Elementwise minimum (of two numbers: ``min(a, b)``, without the builtin's argument parsing)."""
    if type(a) is not _ARRAY and type(b) is not _ARRAY:
        return b if b < a else a
    return np.minimum(a, b)


def _greater(a: Any, b: Any) -> Any:
    """Elementwise maximum (of two numbers: ``max(a, b)``, without the builtin's argument parsing)."""
    if type(a) is not _ARRAY and type(b) is not _ARRAY:
        return b if b > a else a
    return np.maximum(a, b)


def weight_terms(model: Mapping[str, Any], quant: Mapping[str, Any], tp: Any) -> tuple[Any, Any, Any, Any]:
    """(embedding parameters, non-embedding active parameters, weight bytes per GPU, one expert's
    bytes per GPU; 0 for a dense model).

    Raises
    ------
    ValueError
        If the active parameters do not exceed the embeddings (of any element).
    """
    embed = model["vocab_size"] * model["hidden_size"]
    body = model["active_params_b"] * 1e9 - embed * (2 - model["tied_embeddings"])
    if np.any(body <= 0):
        raise ValueError("model['active_params_b'] must exceed the embedding parameters (vocab x hidden)")
    bytes_per_weight = quant["bits_per_weight"] / 8
    weights = model["params_b"] * 1e9 * bytes_per_weight / tp
    # one expert's gate, up and down projections over all layers
    expert = 3 * model["hidden_size"] * model["intermediate_size"] * model["layers"] * bytes_per_weight / tp
    return embed, body, weights, expert * (model["experts"] > 0)


def tp_factor(nvlink_factor: Any, interconnect_gb_s: Any) -> Any:
    """MBU kept per doubling of tensor parallel: ``nvlink_factor`` on GPUs whose interconnect reaches
    ``nvlink_min_gb_s``, ``tp_mbu_factor_pcie`` (efficiency.csv) on PCIe-only cards."""
    nvlink = np.asarray(interconnect_gb_s) >= efficiency_value("nvlink_min_gb_s")
    return np.where(nvlink, nvlink_factor, efficiency_value("tp_mbu_factor_pcie"))


def allreduce_bandwidth(interconnect_gb_s: Any) -> Any:
    """Bus bandwidth (GB/s) of a tensor-parallel all-reduce: ``allreduce_bw_efficiency_nvlink`` of the
    interconnect on NVLink-class GPUs (``interconnect_gb_s`` >= ``nvlink_min_gb_s``),
    ``allreduce_bw_efficiency_pcie`` of it on PCIe-only cards (efficiency.csv)."""
    nvlink = np.asarray(interconnect_gb_s) >= efficiency_value("nvlink_min_gb_s")
    shares = efficiency_value("allreduce_bw_efficiency_nvlink"), efficiency_value("allreduce_bw_efficiency_pcie")
    return interconnect_gb_s * np.where(nvlink, *shares)


def fp16_rate(gpu: Mapping[str, Any], fp16_accumulate: Any) -> Any:
    """Dense 16-bit tensor rate (TFLOPS) of an engine's GEMMs: ``fp16_acc16_tflops`` where the engine
    accumulates in fp16 and the GPU lists that rate, else ``fp16_tflops`` (FP32 accumulate)."""
    acc16 = np.asarray(gpu["fp16_acc16_tflops"], dtype=float)
    with np.errstate(invalid="ignore"):
        faster = np.asarray(fp16_accumulate, dtype=bool) & (acc16 > 0)
    return np.where(faster, acc16, gpu["fp16_tflops"])


def cost_constants(
    specs: Mapping[str, Mapping[str, Any]],
    tp: Any,
    efficiencies: Mapping[str, float],
    *,
    gpu_memory_utilization: float,
    activation_tokens: int,
    reserved_gb: Any,
    fp16_accumulate: Any,
    kv_free_fraction: Any = np.nan,
) -> dict[str, Any]:
    """The numeric fields of :class:`CostModel` (per GPU) from validated specs and efficiencies.

    Parameters
    ----------
    specs : mapping
        ``model``, ``gpu``, ``quant`` and ``kv_dtype`` spec mappings (scalars or arrays).
    tp : int or numpy.ndarray
        Tensor-parallel degree(s), dividing the attention heads.
    efficiencies : mapping
        The validated tunable efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ...).
    gpu_memory_utilization : float
        Fraction of GPU memory the engine may use.
    activation_tokens : int
        Tokens of the largest forward pass (activation reserve).
    reserved_gb : float or numpy.ndarray
        Runtime memory outside weights, KV and activations (GB).
    fp16_accumulate : bool or numpy.ndarray
        Whether the engine's 16-bit GEMMs accumulate in fp16: they then run at the GPU's
        ``fp16_acc16_tflops`` where it has one (GeForce cards), else at ``fp16_tflops``.
    kv_free_fraction : float or numpy.ndarray
        The backend's share of the memory free after weights, runtime and activations given to its
        KV cache (TensorRT-LLM); NaN where the KV cache is what ``gpu_memory_utilization`` leaves.

    Returns
    -------
    dict
        ``mbu`` ... ``kv_block_tokens`` as in :class:`CostModel`, broadcast over the inputs.
    """
    model, gpu, quant = specs["model"], specs["gpu"], specs["quant"]
    embed, body, weights, expert = weight_terms(model, quant, tp)
    # the weight matrices (every parameter but the embeddings) of a weight-only format (GGUF blocks,
    # int4): packed bytes per GPU, and their 16-bit copy where an engine dequantizes before its GEMMs
    packed = (quant["compute"] == "fp16") & (quant["bits_per_weight"] < 16)
    matrices = (model["params_b"] * 1e9 - embed * (2 - model["tied_embeddings"])) / tp * packed
    value_bytes = efficiency_value("activation_bytes_per_value")
    budget = _budget(
        model,
        gpu,
        quant,
        specs["kv_dtype"],
        tensor_parallel=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        reserved_gb=reserved_gb,
        activation_tokens=activation_tokens,
        kv_free_fraction=kv_free_fraction,
    )
    block = int(efficiency_value("kv_block_tokens"))
    fp8 = gpu["fp8_tflops"]
    layer_bytes = _kv_layer_bytes(model, specs["kv_dtype"], tp)
    return {
        "mbu": efficiencies["mbu"] * tp_factor(efficiencies["tp_mbu_factor"], gpu["interconnect_gb_s"]) ** np.log2(tp),
        "mfu": efficiencies["mfu"],
        "step_overhead_ms": efficiencies["step_overhead_ms"],
        "request_overhead_ms": efficiencies["request_overhead_ms"],
        "allreduce_latency_us": efficiencies["allreduce_latency_us"],
        "serial_share": efficiencies["serial_share"],
        "batched_mbu_factor": efficiencies["batched_mbu_factor"],
        "seq_overhead_us": efficiencies["seq_overhead_us"],
        "attention_score_bytes": efficiencies["attention_score_bytes"],
        "dequant_gemm_tokens": efficiencies["dequant_gemm_tokens"],
        "dequant_weights_bytes": matrices * quant["bits_per_weight"] / 8,
        "dequant_copy_bytes": matrices * value_bytes,
        "bandwidth_gb_s": gpu["bandwidth_gb_s"],
        "tflops": np.where((quant["compute"] == "fp8") & (fp8 > 0), fp8, fp16_rate(gpu, fp16_accumulate)),
        "interconnect_gb_s": gpu["interconnect_gb_s"],
        "allreduce_gb_s": allreduce_bandwidth(gpu["interconnect_gb_s"]),
        "weights_bytes": weights,
        "weight_read_efficiency": quant["weight_read_efficiency"],
        "shared_weights_bytes": weights - expert * model["experts"],
        "expert_bytes": expert,
        "kv_bytes_per_token": layer_bytes * model["layers"],
        "kv_layer_bytes": layer_bytes,
        "active_params": model["active_params_b"] * 1e9,
        "body_flops_per_token": 2 * body / tp,
        "logits_flops_per_token": 2 * embed / tp,
        "attention_flops_per_pair": 4 * model["attention_heads"] / tp * model["head_dim"],
        "kv_budget_bytes": budget["kv_budget"],
        "kv_budget_tokens": _kv_budget_tokens(model, budget, block),
        "kv_block_tokens": block,
    }


def step_formula(constants: Mapping[str, Any]) -> tuple[Callable, Callable, Callable]:
    """The one step formula bound to ``constants``: ``(parts, combine, step)``.

    ``parts(n, kv, p, c)`` is (memory_ms, compute_ms, overhead_ms) of one engine step: ``n`` decoding
    sequences holding ``kv`` KV tokens, ``p`` prefilled tokens attending to ``c`` earlier ones
    (validated numbers or arrays, broadcast against the constants' arrays). ``combine(memory_ms,
    compute_ms, overhead_ms)`` is the step time in ms: max(memory, compute) + serial_share x
    min(memory, compute) + overhead (``serial_share`` 0 is the roofline, loads hidden behind math or
    the reverse, as on GPUs; 1 adds the two, as a CPU core that waits for its loads before it
    computes). ``step(n, kv, p, c)`` is the two together.

    What depends only on the constants (their lookups, which terms apply, products of constants) is
    done here once, so a caller stepping one iteration at a time pays only for the arithmetic on its
    arguments; every expression keeps its order of operations, so the values are those of the
    formula written out.
    """
    model = constants["model"]
    windowed = model["sliding_window_layers"]
    layers = model["layers"]
    full = layers - windowed
    window = _layer_split(model)[2] if _any(windowed) else None
    experts = model["experts"]
    moe = _any(experts)
    if moe:
        # dense elements (0 experts) touch none: their shared weights are all the weights
        share = model["experts_per_token"] / _greater(experts, 1)
        shared_weights, expert_bytes = constants["shared_weights_bytes"], constants["expert_bytes"]
    weights = constants["weights_bytes"]
    # weights in a dequantized format stream at weight_read_efficiency of the step's bandwidth
    weight_read_efficiency = constants["weight_read_efficiency"]
    layer_bytes = constants["kv_layer_bytes"]
    # a step of two or more tokens reads at batched_mbu_factor x mbu (exactly mbu when the factor is 1)
    mbu_one, mbu_batched = constants["mbu"], constants["batched_mbu_factor"] - 1
    bandwidth = constants["bandwidth_gb_s"] * 1e9
    body, logits = constants["body_flops_per_token"], constants["logits_flops_per_token"]
    per_pair = constants["attention_flops_per_pair"]
    rate = constants["tflops"] * 1e12 * constants["mfu"]
    step_overhead, per_seq = constants["step_overhead_ms"], constants["seq_overhead_us"] / 1e3
    score_bytes = constants["attention_score_bytes"]
    scores = _any(score_bytes)
    if scores:
        # materialised attention scores: written, softmaxed and read back by kernels of their own
        score_bytes = score_bytes * (per_pair / (4 * model["head_dim"]))
    dequant_at = constants["dequant_gemm_tokens"]
    dequant = _any(dequant_at) and _any(constants["dequant_weights_bytes"])
    if dequant:
        # a step of more than dequant_at tokens converts the packed weights to a 16-bit copy (reading
        # one, writing the other, in kernels of their own before the GEMMs), then its GEMMs read the copy
        packed, copy = constants["dequant_weights_bytes"], constants["dequant_copy_bytes"]
        swap, convert = copy - packed / weight_read_efficiency, packed + copy
    tp = constants["tensor_parallel"]
    tp_array = isinstance(tp, np.ndarray)
    allreduce = bool(tp.max(initial=1) > 1) if tp_array else tp > 1
    if allreduce:
        # the 2 all-reduces per layer of a tensor-parallel step: latency plus a ring transfer of the
        # step's activations at the all-reduce's bus bandwidth
        hidden, value_bytes = model["hidden_size"], efficiency_value("activation_bytes_per_value")
        ring, link = 2 * (tp - 1) / tp, constants["allreduce_gb_s"] * 1e9
        per_layer, latency_ms = 2 * layers, constants["allreduce_latency_us"] / 1e3

        def _allreduce(tokens: Any) -> Any:
            return per_layer * (latency_ms + ring * (tokens * hidden * value_bytes) / link * 1e3)

    def parts(n: Any, kv: Any, p: Any, c: Any) -> tuple[Any, Any, Any]:
        c = c * (p > 0)
        tokens = n + p
        decode_kv = full * kv  # per-layer token reads (and attention pairs) of the decoding sequences
        context_kv = full * c
        pairs = full * (p * c + p * (p + 1) / 2)
        if window is not None:
            decode_kv = decode_kv + windowed * _lesser(kv, n * window)
            context_kv = context_kv + windowed * _lesser(c, window)
            uncapped = _lesser(_greater(window - c, 0), p)  # prompt tokens whose keys fit in the window
            pairs = pairs + windowed * (uncapped * c + uncapped * (uncapped + 1) / 2 + (p - uncapped) * window)
        read_weights = weights
        if moe:
            read_weights = shared_weights + expert_bytes * (experts * (1 - (1 - share) ** tokens))
        read = read_weights / weight_read_efficiency + layer_bytes * (decode_kv + context_kv + layers * tokens)
        mbu = mbu_one * (1 + mbu_batched * (tokens >= 2))
        memory_ms = read / (bandwidth * mbu) * 1e3
        flops = body * tokens + logits * n + per_pair * (decode_kv + pairs)
        compute_ms = flops / rate * 1e3
        overhead_ms = step_overhead + per_seq * n + 0 * tokens
        if scores:
            overhead_ms = overhead_ms + score_bytes * (decode_kv + pairs) / (bandwidth * mbu) * 1e3
        if dequant:
            on = (tokens > dequant_at) * (dequant_at > 0)
            memory_ms = memory_ms + on * swap / (bandwidth * mbu) * 1e3
            overhead_ms = overhead_ms + on * convert / (bandwidth * mbu) * 1e3
        if allreduce:
            if tp_array:
                with np.errstate(invalid="ignore"):  # elements without tensor parallel may lack an interconnect
                    overhead_ms = overhead_ms + np.where(tp > 1, _allreduce(tokens), 0.0)
            else:
                overhead_ms = overhead_ms + _allreduce(tokens)
        return memory_ms, compute_ms, overhead_ms

    serial = constants["serial_share"]
    serial_any = _any(serial)

    def combine(memory_ms: Any, compute_ms: Any, overhead_ms: Any) -> Any:
        longer = _greater(memory_ms, compute_ms)
        if serial_any:
            longer = longer + serial * _lesser(memory_ms, compute_ms)
        return longer + overhead_ms

    def step(n: Any, kv: Any, p: Any, c: Any) -> Any:
        return combine(*parts(n, kv, p, c))

    return parts, combine, step


def step_parts(constants: Mapping[str, Any], n: Any, kv: Any, p: Any, c: Any) -> tuple[Any, Any, Any]:
    """(memory_ms, compute_ms, overhead_ms) of one engine step (see :func:`step_formula`)."""
    return step_formula(constants)[0](n, kv, p, c)


def combine(constants: Mapping[str, Any], memory_ms: Any, compute_ms: Any, overhead_ms: Any) -> Any:
    """Step time in ms from its parts (see :func:`step_formula`)."""
    return step_formula(constants)[1](memory_ms, compute_ms, overhead_ms)


def step_time(constants: Mapping[str, Any], n: Any, kv: Any, p: Any, c: Any) -> Any:
    """Step time in ms of :func:`step_parts` combined by :func:`combine`."""
    return step_formula(constants)[2](n, kv, p, c)


def ttft_time(constants: Mapping[str, Any], prompt: Any, cached: Any) -> Any:
    """Time to first token in ms: one prefill step of the uncached prompt (at least one token, as
    engines compute on a full cache hit) plus the request overhead; validated inputs."""
    new = _greater(prompt - cached, 1)
    return step_time(constants, 0, 0, new, prompt - new) + constants["request_overhead_ms"]

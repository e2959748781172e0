"""The cost model's formulas as numpy-broadcasting functions: one engine step, TTFT.

Every formula of :class:`toolkit.CostModel` lives here once. ``CostModel`` calls these functions with
the scalars of one model on one GPU; the planner calls them with arrays holding one element per
(model, GPU, format, tensor parallel) configuration, so the whole candidate grid is one evaluation.
The formulas themselves are documented in the module docstring of :mod:`toolkit._model.serving`.

``constants`` is a mapping of the numeric :class:`CostModel` fields plus ``model``, as
:func:`toolkit._model.constants.cost_constants` returns (``vars(cost_model)`` is one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from toolkit._model.memory import _layer_split, efficiency_value

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


def step_formula(constants: Mapping[str, Any]) -> tuple[Callable, Callable, Callable]:
    """The one step formula bound to ``constants``: ``(parts, combine, step)``.

    ``parts(n, kv, p, c, e=1)`` is (memory_ms, compute_ms, overhead_ms) of one engine step: ``n``
    decoding sequences holding ``kv`` KV tokens, ``p`` prefilled tokens attending to ``c`` earlier
    ones, of which the last tokens of ``e`` prompts (at most ``p``; validated numbers or arrays,
    broadcast against the constants' arrays). Each decoding sequence and each prompt ending in the
    step computes a row of logits; a step that computes none (a prompt chunk that ends no prompt)
    does not read the output matrix. ``combine(memory_ms,
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
    # a matrix multiplied by two or more rows reads at batched_mbu_factor x mbu (exactly mbu when the factor
    # is 1): the body's matrices by the step's tokens, the output matrix by its rows of logits
    mbu_one, mbu_batched = constants["mbu"], constants["batched_mbu_factor"] - 1
    bandwidth = constants["bandwidth_gb_s"] * 1e9
    body, logits = constants["body_flops_per_token"], constants["logits_flops_per_token"]
    per_pair = constants["attention_flops_per_pair"]
    rate = constants["tflops"] * 1e12 * constants["mfu"]
    step_overhead, per_seq = constants["step_overhead_ms"], constants["seq_overhead_us"] / 1e3
    output_read = constants["output_weights_bytes"] / weight_read_efficiency
    # llama.cpp's CPU backend multiplies a Q8_0 matrix in tiles of four rows and then the remainder in
    # a second pass over the whole matrix (tinyBLAS_Q0_AVX::mnpack in ggml-cpu/llamafile/sgemm.cpp, on
    # 32-register AVX-512 hosts; repack.cpp's forward_mul_mat_one_chunk does alike): a step whose rows of
    # logits are above four and not a multiple of four reads the output matrix again
    remainder_reads = constants["logit_remainder_reads"]
    remainder = _any(remainder_reads)
    # the output matrix's own kernel may cost more (or less) than one read at the body's batched rate
    # once it has two rows of logits (a Q8_0 matrix through tinyBLAS beside K-quant matrices on a CPU)
    batched_extra = constants["logit_batched_reads"] - 1
    batched_other = _any(batched_extra)
    # the weights a step reads besides the output matrix (a dense model's: every step the same)
    body_weights_read = weights / weight_read_efficiency - output_read
    score_bytes = constants["attention_score_bytes"]
    scores = _any(score_bytes)
    if scores:
        # materialised attention scores: written, softmaxed and read back by kernels of their own
        score_bytes = score_bytes * (per_pair / (4 * model["head_dim"]))
    masked_share = constants["masked_pair_share"]
    masked = _any(masked_share)
    if masked:
        # a unified KV buffer (llama.cpp --kv-unified) runs each full-attention layer of a step as one
        # kernel over every cell in use: each query row visits kv + c + p cells and masks those of
        # other sequences and its own later tokens; a masked pair costs masked_share of an attended one
        masked_cost = masked_share * per_pair
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

    def parts(n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> tuple[Any, Any, Any]:
        c = c * (p > 0)
        tokens = n + p
        rows = n + _lesser(e, p)  # rows of logits
        decode_kv = full * kv  # per-layer token reads (and attention pairs) of the decoding sequences
        context_kv = full * c
        pairs = full * (p * c + p * (p + 1) / 2)
        if window is not None:
            decode_kv = decode_kv + windowed * _lesser(kv, n * window)
            context_kv = context_kv + windowed * _lesser(c, window)
            uncapped = _lesser(_greater(window - c, 0), p)  # prompt tokens whose keys fit in the window
            pairs = pairs + windowed * (uncapped * c + uncapped * (uncapped + 1) / 2 + (p - uncapped) * window)
        body_read = body_weights_read
        if moe:
            read_weights = shared_weights + expert_bytes * (experts * (1 - (1 - share) ** tokens))
            body_read = read_weights / weight_read_efficiency - output_read
        read = body_read + layer_bytes * (decode_kv + context_kv + layers * tokens)
        mbu = mbu_one * (1 + mbu_batched * (tokens >= 2))
        # the output matrix multiplies only the rows that need logits (llama.cpp's inp_out_ids, vLLM's
        # logits_indices), so its kernel is a matrix-vector one for one row whatever the step's tokens
        output_mbu = mbu_one * (1 + mbu_batched * (rows >= 2))
        output_reads = rows > 0
        if batched_other:
            output_reads = output_reads + batched_extra * (rows >= 2)
        if remainder:
            output_reads = output_reads + remainder_reads * (rows > 4) * (rows % 4 != 0)
        memory_ms = (read / (bandwidth * mbu) + output_read * output_reads / (bandwidth * output_mbu)) * 1e3
        flops = body * tokens + logits * rows + per_pair * (decode_kv + pairs)
        if masked:
            visited = tokens * (kv + c + p) - kv - p * c - p * (p + 1) / 2
            flops = flops + masked_cost * full * _greater(visited, 0)
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

    def step(n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> Any:
        return combine(*parts(n, kv, p, c, e))

    return parts, combine, step


def step_parts(constants: Mapping[str, Any], n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> tuple[Any, Any, Any]:
    """(memory_ms, compute_ms, overhead_ms) of one engine step (see :func:`step_formula`)."""
    return step_formula(constants)[0](n, kv, p, c, e)


def combine(constants: Mapping[str, Any], memory_ms: Any, compute_ms: Any, overhead_ms: Any) -> Any:
    """Step time in ms from its parts (see :func:`step_formula`)."""
    return step_formula(constants)[1](memory_ms, compute_ms, overhead_ms)


def step_time(constants: Mapping[str, Any], n: Any, kv: Any, p: Any, c: Any, e: Any = 1) -> Any:
    """Step time in ms of :func:`step_parts` combined by :func:`combine`."""
    return step_formula(constants)[2](n, kv, p, c, e)


def ttft_time(constants: Mapping[str, Any], prompt: Any, cached: Any) -> Any:
    """Time to first token in ms: one prefill step of the uncached prompt (at least one token, as
    engines compute on a full cache hit) plus the request overhead; validated inputs."""
    new = _greater(prompt - cached, 1)
    return step_time(constants, 0, 0, new, prompt - new) + constants["request_overhead_ms"]

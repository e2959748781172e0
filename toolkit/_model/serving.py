"""The serving cost model: how long one engine iteration takes, prefill TTFT, and the batching curve.

One engine iteration (a "step") decodes one token for each of ``n`` running sequences holding ``K``
KV tokens in total, and may prefill ``P`` new prompt tokens whose attention also spans ``C`` earlier
(cached) tokens. Per GPU, with tensor parallel ``tp``::

    memory_ms  = (weights read + KV read + KV written) / (bandwidth x MBU)
    compute_ms = FLOPs / (TFLOPS x MFU)
    step_ms    = max(memory_ms, compute_ms) + step_overhead_ms + all-reduce

* Weights read: all of them once per step (dense). An MoE reads its shared weights and the experts
  the step's tokens route to; with ``t`` tokens each picking ``k`` of ``E`` experts independently and
  uniformly, the expected number of distinct experts touched is ``E (1 - (1 - k/E)^t)``: k at batch 1,
  approaching E as the batch grows (real routers are not uniform; this is the simplification).
* KV read: every running sequence's KV (window layers capped at ``window`` tokens per sequence),
  plus the prefill's ``C`` context tokens; KV written: one token per decoded sequence and per prompt
  token.
* FLOPs: 2 per active non-embedding parameter per token (the embedding lookup is no matmul), plus
  2 x vocab x hidden for the logits of each decoded token (a prefill computes logits for its last
  token only, which we neglect), plus attention: each (query, key) pair costs 4 x heads x head_dim
  FLOPs per layer (QK^T and AV, a multiply-add each). A decode token attends to its sequence's
  context; prompt token i of a prefill attends to C + i keys, so the prefill has
  ``P*C + P(P+1)/2`` pairs (causal), window layers ``sum_i min(C + i, window)``.
* Tensor parallel splits weights, KV heads, FLOPs; MBU is multiplied by ``tp_mbu_factor`` per
  doubling of ``tp``, and each of the 2 all-reduces per layer costs ``allreduce_latency_us`` plus a
  ring transfer of ``2 (tp-1)/tp x tokens x hidden x 2 bytes`` over ``interconnect_gb_s``.
* Weight-only formats (int4, GGUF K-quants) dequantize into fp16 GEMMs; ``fp8`` weights use the GPU's
  FP8 rate where it has one.

``ttft_ms`` is one prefill step of the uncached prompt plus ``request_overhead_ms``: compute-bound
for long prompts, never faster than reading the weights once. The decode step of a batch of ``b``
sequences at context T is ``step_ms(b, b*T)`` and its TPOT.

Efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``, ``tp_mbu_factor``,
``allreduce_latency_us``) default to ``data/efficiency.csv``; a ``calibration`` (dict, Series or
one-row DataFrame; NaN entries and unknown keys are ignored) overrides them, explicit keyword
arguments override both.

Why our TTFT differs from chimeraforge 0.6.0's (``2 x params x tokens / (TFLOPS x 0.4)``; 7B, 512
tokens: H100 18.1 / RTX 4090 108.5 / T4 275.7 ms against our 24.0 / 91.6 / 216.7 ms for Llama-2-7B):
we count non-embedding parameters only (a 7B Llama has 0.26B of embeddings that do no prefill FLOPs),
add the causal attention FLOPs, use MFU 0.5 rather than 0.4, floor the time at one read of the
weights (which decides short prompts), and add a 0.5 ms step and a 10 ms per-request overhead. On a
fast GPU the fixed overheads dominate a 14 ms prefill and we are slower; on slow GPUs the higher MFU
dominates and we are faster. With their assumptions our function reproduces their figures
(tests/test_serving.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from toolkit._args import check_array, check_int, check_number
from toolkit._data import load_csv
from toolkit._model.catalog import resolve_backend, resolve_gpu, resolve_kv_dtype, resolve_model, resolve_quant
from toolkit._model.memory import (
    _budget,
    _check_tensor_parallel,
    _kv_budget_tokens,
    _kv_layer_bytes,
    _layer_split,
    _max_seqs,
    efficiency_value,
)

__all__ = ["CostModel", "batching_curve", "cost_model", "efficiency_defaults", "ttft_ms"]

# The one list of efficiencies a calibration may replace, with their allowed ranges (low, high, low
# inclusive). The planner, the fit, calibrate() and the report all read this dict.
TUNABLE_EFFICIENCIES: dict[str, tuple[float, float | None, bool]] = {
    "mbu": (0.0, 1.0, False),
    "mfu": (0.0, 1.0, False),
    "step_overhead_ms": (0.0, None, True),
    "request_overhead_ms": (0.0, None, True),
    "tp_mbu_factor": (0.0, 1.0, False),
    "allreduce_latency_us": (0.0, None, True),
}


_SCALARS = (int, float, np.integer, np.floating)

# Validation ceilings, far beyond any real model or engine: they keep token x batch products inside
# int64 and float precision, so an absurd input is a ValueError rather than an overflow.
MAX_TOKENS = 10**9
MAX_BATCH = 10**6


def efficiency_defaults() -> pd.DataFrame:
    """The default efficiencies and constants of the serving model, with their sources.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        Indexed by ``parameter`` (``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``,
        ``tp_mbu_factor``, ``allreduce_latency_us``, ``reserved_gb``, ``activation_bytes_per_value``,
        ``kv_block_tokens``, ``gpu_memory_utilization``, ``max_num_batched_tokens``) with columns
        ``value``, ``unit`` and ``source``. ``efficiency_defaults()["value"]`` is a valid calibration.
    """
    return load_csv("efficiency.csv").set_index("parameter")


def _calibration_mapping(calibration: object) -> Mapping[str, Any]:
    if calibration is None:
        return {}
    if isinstance(calibration, pd.DataFrame):
        if len(calibration) != 1:
            raise ValueError(f"calibration as a DataFrame must have one row, got {len(calibration)}")
        return calibration.iloc[0].to_dict()
    if isinstance(calibration, (pd.Series, Mapping)):
        return dict(calibration)
    raise ValueError(f"calibration must be a dict, Series or one-row DataFrame, got {type(calibration).__name__}")


def _efficiencies(calibration: object, explicit: dict[str, float | None]) -> dict[str, float]:
    values: dict[str, object] = {name: efficiency_value(name) for name in TUNABLE_EFFICIENCIES}
    for name, value in _calibration_mapping(calibration).items():
        if name in TUNABLE_EFFICIENCIES and value is not None and not (isinstance(value, float) and math.isnan(value)):
            values[name] = value
    values.update({name: value for name, value in explicit.items() if value is not None})
    out = {}
    for name, (low, high, low_inclusive) in TUNABLE_EFFICIENCIES.items():
        out[name] = check_number(name, values[name], low=low, high=high, low_inclusive=low_inclusive)
    return out


def _nonneg(name: str, value: object) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers (>= 0), got {value!r}") from None
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite numbers (>= 0), got {value!r}")
    return arr


@dataclass(frozen=True)
class CostModel:
    """The serving cost model of one model on one GPU type, with every spec looked up once.

    Build it with :func:`cost_model`. All byte and FLOP figures are per GPU. Methods are vectorised
    with numpy broadcasting; see the module docstring for the formulas.

    Attributes
    ----------
    model, gpu, quant, kv_dtype : dict
        The resolved specs. ``backend`` is a dict or None.
    tensor_parallel : int
        GPUs per replica.
    mbu, mfu : float
        Memory-bandwidth utilisation (after the tensor-parallel factor) and FLOPs utilisation.
    step_overhead_ms, request_overhead_ms, allreduce_latency_us : float
        Fixed costs per engine step, per request, per all-reduce.
    bandwidth_gb_s, tflops, interconnect_gb_s : float
        GPU memory bandwidth, the tensor rate used (fp16 or fp8), per-GPU interconnect.
    weights_bytes, shared_weights_bytes, expert_bytes : float
        Weights per GPU; of which shared (non-expert); one expert's weights over all layers.
    kv_bytes_per_token, kv_layer_bytes : float
        KV bytes per token per GPU (every layer), and per layer.
    active_params : float
        Active parameters (MoE: per token), count.
    body_flops_per_token, logits_flops_per_token, attention_flops_per_pair : float
        Per GPU: 2 x non-embedding active parameters; 2 x vocab x hidden; 4 x heads x head_dim.
    kv_budget_bytes : float
        KV budget per GPU with the activation reserve of ``max_num_batched_tokens``.
    kv_budget_tokens : int
        Tokens that budget holds (whole blocks of ``kv_block_tokens``).
    max_batch : float
        The backend's cap on decoded sequences (inf when none).
    """

    model: dict
    gpu: dict
    quant: dict
    kv_dtype: dict
    backend: dict | None
    tensor_parallel: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    mbu: float
    mfu: float
    step_overhead_ms: float
    request_overhead_ms: float
    allreduce_latency_us: float
    bandwidth_gb_s: float
    tflops: float
    interconnect_gb_s: float
    weights_bytes: float
    shared_weights_bytes: float
    expert_bytes: float
    kv_bytes_per_token: float
    kv_layer_bytes: float
    active_params: float
    body_flops_per_token: float
    logits_flops_per_token: float
    attention_flops_per_pair: float
    kv_budget_bytes: float
    kv_budget_tokens: int
    kv_block_tokens: int
    max_batch: float

    def _terms(self, n, kv, p, c):
        """(memory_ms, compute_ms, overhead_ms) for validated floats or arrays (the one formula)."""
        c = c * (p > 0)
        full, windowed, window = _layer_split(self.model)
        tokens = n + p

        decode_kv = full * kv  # per-layer token reads (and attention pairs) of the decoding sequences
        context_kv = full * c
        pairs = full * (p * c + p * (p + 1) / 2)
        if windowed:
            decode_kv = decode_kv + windowed * np.minimum(kv, n * window)
            context_kv = context_kv + windowed * np.minimum(c, window)
            uncapped = np.minimum(np.maximum(window - c, 0), p)  # prompt tokens whose keys fit in the window
            pairs = pairs + windowed * (uncapped * c + uncapped * (uncapped + 1) / 2 + (p - uncapped) * window)

        experts = self.model["experts"]
        weights = self.weights_bytes
        if experts:
            touched = experts * (1 - (1 - self.model["experts_per_token"] / experts) ** tokens)
            weights = self.shared_weights_bytes + self.expert_bytes * touched
        read = weights + self.kv_layer_bytes * (decode_kv + context_kv + self.model["layers"] * tokens)
        memory_ms = read / (self.bandwidth_gb_s * 1e9 * self.mbu) * 1e3

        flops = (
            self.body_flops_per_token * tokens
            + self.logits_flops_per_token * n
            + self.attention_flops_per_pair * (decode_kv + pairs)
        )
        compute_ms = flops / (self.tflops * 1e12 * self.mfu) * 1e3

        overhead_ms = self.step_overhead_ms + 0 * tokens
        tp = self.tensor_parallel
        if tp > 1:
            message = tokens * self.model["hidden_size"] * efficiency_value("activation_bytes_per_value")
            ring_ms = 2 * (tp - 1) / tp * message / (self.interconnect_gb_s * 1e9) * 1e3
            overhead_ms = overhead_ms + 2 * self.model["layers"] * (self.allreduce_latency_us / 1e3 + ring_ms)
        return memory_ms, compute_ms, overhead_ms

    def step_terms(
        self, decode_seqs: object, kv_tokens: object, prefill_tokens: object = 0, prefill_context_tokens: object = 0
    ) -> dict[str, np.ndarray]:
        """The parts of one engine step, in ms (broadcast over the inputs).

        Parameters
        ----------
        decode_seqs : int or array-like
            Sequences decoding one token this step (>= 0).
        kv_tokens : int or array-like
            KV tokens those sequences hold in total (>= 0).
        prefill_tokens : int or array-like
            New prompt tokens prefilled this step (>= 0).
        prefill_context_tokens : int or array-like
            Earlier tokens the prefilled tokens attend to (>= 0).

        Returns
        -------
        dict of numpy.ndarray
            ``memory_ms``, ``compute_ms``, ``overhead_ms`` (step overhead plus all-reduce), ``step_ms``.
        """
        n = _nonneg("decode_seqs", decode_seqs)
        kv = _nonneg("kv_tokens", kv_tokens)
        p = _nonneg("prefill_tokens", prefill_tokens)
        c = _nonneg("prefill_context_tokens", prefill_context_tokens)
        memory_ms, compute_ms, overhead_ms = self._terms(n, kv, p, c)
        step = np.maximum(memory_ms, compute_ms) + overhead_ms
        shape = np.broadcast_shapes(n.shape, kv.shape, p.shape, c.shape)
        return {
            "memory_ms": np.broadcast_to(memory_ms, shape),
            "compute_ms": np.broadcast_to(compute_ms, shape),
            "overhead_ms": np.broadcast_to(overhead_ms, shape),
            "step_ms": np.broadcast_to(step, shape),
        }

    def step_ms(
        self, decode_seqs: object, kv_tokens: object, prefill_tokens: object = 0, prefill_context_tokens: object = 0
    ) -> float | np.ndarray:
        """Duration of one engine iteration in ms: max(memory, compute) + step overhead (+ all-reduce).

        Parameters
        ----------
        decode_seqs : int or array-like
            Sequences decoding one token this step (>= 0).
        kv_tokens : int or array-like
            KV tokens those sequences hold in total (>= 0).
        prefill_tokens : int or array-like
            New prompt tokens prefilled this step (>= 0).
        prefill_context_tokens : int or array-like
            Earlier (cached) tokens the prefilled tokens attend to (>= 0).

        Returns
        -------
        float or numpy.ndarray
            Step time in ms; a float when every input is a scalar.
        """
        args = (decode_seqs, kv_tokens, prefill_tokens, prefill_context_tokens)
        if all(isinstance(a, _SCALARS) and not isinstance(a, bool) and 0 <= a < math.inf for a in args):
            # scalar fast path for simulators stepping one iteration at a time; same formula
            memory_ms, compute_ms, overhead_ms = self._terms(*(float(a) for a in args))
            return float(max(memory_ms, compute_ms) + overhead_ms)
        step = self.step_terms(*args)["step_ms"]
        return float(step) if step.ndim == 0 else np.array(step)

    def ttft_ms(self, prompt_tokens: object, cached_tokens: object = 0) -> float | np.ndarray:
        """Time to first token in ms: prefill of the uncached part of the prompt plus the request overhead.

        Parameters
        ----------
        prompt_tokens : int or array-like
            Prompt length in tokens (>= 1).
        cached_tokens : int or array-like
            Leading prompt tokens already in the prefix cache (0 <= cached <= prompt). At least one
            token is always computed, as engines do on a full cache hit.

        Returns
        -------
        float or numpy.ndarray
            TTFT in ms; a float when both inputs are scalars.
        """
        prompt = _nonneg("prompt_tokens", prompt_tokens)
        cached = _nonneg("cached_tokens", cached_tokens)
        if np.any(prompt < 1):
            raise ValueError(f"prompt_tokens must be >= 1, got {prompt_tokens!r}")
        if np.any(cached > prompt):
            raise ValueError("cached_tokens must be <= prompt_tokens")
        new = np.maximum(prompt - cached, 1)
        ttft = self.step_ms(0, 0, new, prompt - new) + self.request_overhead_ms
        return ttft

    def max_concurrent_seqs(self, context_tokens: object) -> int | np.ndarray:
        """KV-bound number of sequences of ``context_tokens`` tokens the KV budget holds (whole blocks).

        Parameters
        ----------
        context_tokens : int or array-like
            Tokens each sequence holds (>= 1).

        Returns
        -------
        int or numpy.ndarray
            Sequences (0 when not even one fits); not capped by the backend's ``max_batch``.
        """
        tokens = check_array("context_tokens", context_tokens, low=1)
        budget = {"kv_budget": self.kv_budget_bytes, "kv_layer_bytes": self.kv_layer_bytes}
        seqs = _max_seqs(self.model, budget, tokens, self.kv_block_tokens)
        return int(seqs[0]) if np.ndim(context_tokens) == 0 else seqs


def cost_model(
    model: object,
    gpu: object,
    quant: object,
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    calibration: object = None,
    mbu: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    request_overhead_ms: float | None = None,
    *,
    backend: object = None,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int | None = None,
    reserved_gb: float | None = None,
    tp_mbu_factor: float | None = None,
    allreduce_latency_us: float | None = None,
) -> CostModel:
    """Build the :class:`CostModel` of ``model`` served on ``gpu`` in weight format ``quant``.

    Parameters
    ----------
    model, gpu, quant : str or spec
        Catalog names (loosely written) or spec dicts / Series / one-row DataFrames.
    tensor_parallel : int
        GPUs per replica (must divide the attention heads).
    kv_dtype : str or spec
        KV-cache format.
    calibration : dict, Series or one-row DataFrame, optional
        Any of ``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``, ``tp_mbu_factor``,
        ``allreduce_latency_us`` replacing the defaults of ``data/efficiency.csv``.
    mbu, mfu : float, optional
        Decode memory-bandwidth and FLOPs utilisation at one GPU, in (0, 1].
    step_overhead_ms, request_overhead_ms : float, optional
        Fixed cost per engine step and per request (ms, >= 0).
    backend : str or spec, optional
        Serving backend: its ``reserved_gb`` and ``max_batch`` apply.
    gpu_memory_utilization : float, optional
        Fraction of GPU memory the engine may use (default 0.9).
    max_num_batched_tokens : int, optional
        Tokens of the largest forward pass, sizing the activation reserve of the KV budget
        (default 8192 from ``data/efficiency.csv``).
    reserved_gb : float, optional
        Runtime memory outside weights, KV and activations (GB).
    tp_mbu_factor : float, optional
        MBU multiplier per doubling of tensor parallel, in (0, 1].
    allreduce_latency_us : float, optional
        Latency of one all-reduce (us).

    Returns
    -------
    CostModel
        Frozen; all specs resolved and all per-GPU constants computed.
    """
    spec_model = resolve_model(model)
    spec_gpu = resolve_gpu(gpu)
    spec_quant = resolve_quant(quant)
    spec_kv = resolve_kv_dtype(kv_dtype)
    spec_backend = None if backend is None else resolve_backend(backend)
    tp = _check_tensor_parallel(spec_model, tensor_parallel)
    eff = _efficiencies(
        calibration,
        {
            "mbu": mbu,
            "mfu": mfu,
            "step_overhead_ms": step_overhead_ms,
            "request_overhead_ms": request_overhead_ms,
            "tp_mbu_factor": tp_mbu_factor,
            "allreduce_latency_us": allreduce_latency_us,
        },
    )
    util = check_number(
        "gpu_memory_utilization",
        efficiency_value("gpu_memory_utilization") if gpu_memory_utilization is None else gpu_memory_utilization,
        low=0,
        high=1,
        low_inclusive=False,
    )
    act_tokens = check_int(
        "max_num_batched_tokens",
        int(efficiency_value("max_num_batched_tokens")) if max_num_batched_tokens is None else max_num_batched_tokens,
        low=1,
    )
    if reserved_gb is None:
        reserved_gb = spec_backend["reserved_gb"] if spec_backend else efficiency_value("reserved_gb")
    reserved = check_number("reserved_gb", reserved_gb, low=0)
    interconnect = spec_gpu["interconnect_gb_s"]
    if tp > 1 and not interconnect > 0:
        raise ValueError("gpu['interconnect_gb_s'] must be > 0 for tensor_parallel > 1")
    fp8 = spec_gpu["fp8_tflops"]
    tflops = fp8 if spec_quant["compute"] == "fp8" and fp8 > 0 else spec_gpu["fp16_tflops"]

    m = spec_model
    embed = m["vocab_size"] * m["hidden_size"]
    body = m["active_params_b"] * 1e9 - embed * (1 if m["tied_embeddings"] else 2)
    if body <= 0:
        raise ValueError("model['active_params_b'] must exceed the embedding parameters (vocab x hidden)")
    bytes_per_weight = spec_quant["bits_per_weight"] / 8
    weights = m["params_b"] * 1e9 * bytes_per_weight / tp
    # one expert's gate, up and down projections over all layers
    expert = 3 * m["hidden_size"] * m["intermediate_size"] * m["layers"] * bytes_per_weight / tp
    if not m["experts"]:
        expert = 0.0
    budget = _budget(
        m,
        spec_gpu,
        spec_quant,
        spec_kv,
        tensor_parallel=tp,
        gpu_memory_utilization=util,
        reserved_gb=reserved,
        activation_tokens=act_tokens,
    )
    block = int(efficiency_value("kv_block_tokens"))
    max_batch = spec_backend["max_batch"] if spec_backend else math.nan
    return CostModel(
        model=m,
        gpu=spec_gpu,
        quant=spec_quant,
        kv_dtype=spec_kv,
        backend=spec_backend,
        tensor_parallel=tp,
        gpu_memory_utilization=util,
        max_num_batched_tokens=act_tokens,
        mbu=eff["mbu"] * eff["tp_mbu_factor"] ** math.log2(tp),
        mfu=eff["mfu"],
        step_overhead_ms=eff["step_overhead_ms"],
        request_overhead_ms=eff["request_overhead_ms"],
        allreduce_latency_us=eff["allreduce_latency_us"],
        bandwidth_gb_s=spec_gpu["bandwidth_gb_s"],
        tflops=tflops,
        interconnect_gb_s=interconnect,
        weights_bytes=weights,
        shared_weights_bytes=weights - expert * m["experts"],
        expert_bytes=expert,
        kv_bytes_per_token=_kv_layer_bytes(m, spec_kv, tp) * m["layers"],
        kv_layer_bytes=_kv_layer_bytes(m, spec_kv, tp),
        active_params=m["active_params_b"] * 1e9,
        body_flops_per_token=2 * body / tp,
        logits_flops_per_token=2 * embed / tp,
        attention_flops_per_pair=4 * m["attention_heads"] / tp * m["head_dim"],
        kv_budget_bytes=budget["kv_budget"],
        kv_budget_tokens=_kv_budget_tokens(m, budget, block),
        kv_block_tokens=block,
        max_batch=math.inf if math.isnan(max_batch) else max_batch,
    )


def ttft_ms(
    model: object,
    gpu: object,
    quant: object,
    prompt_tokens: object,
    tensor_parallel: int = 1,
    mfu: float | None = None,
    mbu: float | None = None,
    request_overhead_ms: float | None = None,
    step_overhead_ms: float | None = None,
    kv_dtype: object = "fp16",
    cached_tokens: object = 0,
    calibration: object = None,
) -> float | np.ndarray:
    """Time to first token: prefill compute over TFLOPS x MFU (never faster than one read of the
    weights at bandwidth x MBU) plus a per-step and a per-request overhead.

    Parameters
    ----------
    model, gpu, quant : str or spec
        Catalog names or spec dicts.
    prompt_tokens : int or array-like
        Prompt length(s) in tokens (>= 1); the result is vectorised over it.
    tensor_parallel : int
        GPUs per replica.
    mfu, mbu : float, optional
        FLOPs and memory-bandwidth utilisation, in (0, 1]; defaults from ``data/efficiency.csv``.
    request_overhead_ms, step_overhead_ms : float, optional
        Fixed costs per request and per step (ms).
    kv_dtype : str or spec
        KV-cache format (the prefill writes and re-reads KV).
    cached_tokens : int or array-like
        Prompt tokens already in the prefix cache (not recomputed; at least one token is).
    calibration : dict, Series or one-row DataFrame, optional
        Efficiency overrides (explicit keyword arguments win).

    Returns
    -------
    float or numpy.ndarray
        TTFT in ms, shaped like ``prompt_tokens``.
    """
    cm = cost_model(
        model,
        gpu,
        quant,
        tensor_parallel=tensor_parallel,
        kv_dtype=kv_dtype,
        calibration=calibration,
        mbu=mbu,
        mfu=mfu,
        step_overhead_ms=step_overhead_ms,
        request_overhead_ms=request_overhead_ms,
    )
    return cm.ttft_ms(prompt_tokens, cached_tokens)


def _default_batches(max_seqs: int) -> np.ndarray:
    batches = {2**i for i in range(10)}
    if max_seqs >= 1:
        batches.add(max_seqs)
    return np.array(sorted(batches))


def batching_curve(
    model: object,
    gpu: object,
    quant: object,
    context_tokens: int,
    batch_sizes: object = None,
    tensor_parallel: int = 1,
    mbu: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    kv_dtype: object = "fp16",
    calibration: object = None,
    backend: object = None,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int | None = None,
) -> pd.DataFrame:
    """The continuous-batching curve: decode step time and throughput against the number of running sequences.

    Each row is a steady decode step of ``batch`` sequences each holding ``context_tokens`` KV tokens.
    Rows above the KV-bound maximum are still computed but flagged ``feasible=False``.

    Parameters
    ----------
    model, gpu, quant : str or spec
        Catalog names or spec dicts.
    context_tokens : int
        KV tokens each running sequence holds (1 to 10**9).
    batch_sizes : array-like of int, optional
        Batches to evaluate (1 to 10**6); default powers of two 1..512 plus the KV-bound maximum.
    tensor_parallel : int
        GPUs per replica.
    mbu, mfu : float, optional
        Memory-bandwidth and FLOPs utilisation, in (0, 1].
    step_overhead_ms : float, optional
        Fixed cost per engine step (ms).
    kv_dtype : str or spec
        KV-cache format.
    calibration : dict, Series or one-row DataFrame, optional
        Efficiency overrides (explicit keyword arguments win).
    backend : str or spec, optional
        Serving backend (runtime reservation); its ``max_batch`` also bounds ``feasible``.
    gpu_memory_utilization : float, optional
        Fraction of GPU memory the engine may use.
    max_num_batched_tokens : int, optional
        Tokens of the largest forward pass (activation reserve).

    Returns
    -------
    pandas.DataFrame
        One row per batch: ``model``, ``gpu``, ``quant``, ``kv_dtype``, ``tensor_parallel``,
        ``context_tokens``, ``batch``, ``step_ms``, ``tpot_ms`` (ms per output token per sequence),
        ``memory_ms``, ``compute_ms``, ``overhead_ms`` (the step's parts), ``aggregate_tok_s``
        (output tokens/s over all sequences), ``per_seq_tok_s``, ``bound`` (``memory``, ``compute`` or
        ``overhead``: the largest part), ``feasible``, ``max_concurrent_seqs`` (KV-bound).
    """
    cm = cost_model(
        model,
        gpu,
        quant,
        tensor_parallel=tensor_parallel,
        kv_dtype=kv_dtype,
        calibration=calibration,
        mbu=mbu,
        mfu=mfu,
        step_overhead_ms=step_overhead_ms,
        backend=backend,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    context = check_int("context_tokens", context_tokens, low=1, high=MAX_TOKENS)
    max_seqs = cm.max_concurrent_seqs(context)
    if batch_sizes is None:
        batch = _default_batches(max_seqs)
    else:
        batch = check_array("batch_sizes", batch_sizes, low=1, high=MAX_BATCH)
        if not np.all(batch == np.round(batch)):
            raise ValueError(f"batch_sizes must be integers (>= 1 and <= {MAX_BATCH:g}), got {batch_sizes!r}")
        batch = batch.astype(int)
    terms = cm.step_terms(batch, batch * context)
    step = terms["step_ms"]
    parts = np.stack([terms["memory_ms"], terms["compute_ms"], terms["overhead_ms"]])
    bound = np.array(["memory", "compute", "overhead"])[np.argmax(parts, axis=0)]
    return pd.DataFrame(
        {
            "model": cm.model["name"],
            "gpu": cm.gpu["name"],
            "quant": cm.quant["name"],
            "kv_dtype": cm.kv_dtype["name"],
            "tensor_parallel": cm.tensor_parallel,
            "context_tokens": context,
            "batch": batch,
            "step_ms": step,
            "tpot_ms": step,
            "memory_ms": terms["memory_ms"],
            "compute_ms": terms["compute_ms"],
            "overhead_ms": terms["overhead_ms"],
            "aggregate_tok_s": batch * 1e3 / step,
            "per_seq_tok_s": 1e3 / step,
            "bound": bound,
            "feasible": (batch <= max_seqs) & (batch <= cm.max_batch),
            "max_concurrent_seqs": max_seqs,
        }
    )

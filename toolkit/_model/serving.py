"""The serving cost model: how long one engine iteration takes, prefill TTFT, and the batching curve.

One engine iteration (a "step") decodes one token for each of ``n`` running sequences holding ``K``
KV tokens in total, and may prefill ``P`` new prompt tokens whose attention also spans ``C`` earlier
(cached) tokens. Per GPU, with tensor parallel ``tp``::

    memory_ms  = (weights read + KV read + KV written) / (bandwidth x MBU)
    compute_ms = FLOPs / (TFLOPS x MFU)
    step_ms    = max(memory_ms, compute_ms) + serial_share x min(memory_ms, compute_ms)
                 + step_overhead_ms + seq_overhead_us x n + all-reduce

* Weights read: all of them once per step (dense), except the output matrix (vocab x hidden, the
  embedding when tied) in a step that computes no logits: a prompt chunk that ends no prompt, with
  no sequence decoding (engines compute logits only for the rows they sample from). An untied
  model's input embedding counts as read too, though a lookup reads only its tokens' rows (a few
  percent of a 7-8B model): MBU as its sources publish it divides every parameter's bytes by the
  step time, so ``mbu`` keeps their meaning. An MoE reads its shared weights and the experts the
  step's tokens route to; with ``t`` tokens each picking ``k`` of ``E`` experts independently and
  uniformly, ``E (1 - (1 - k/E)^t)`` distinct experts are touched (real routers are not uniform).
* KV read: every running sequence's KV (window layers capped at ``window`` tokens per sequence),
  plus the prefill's ``C`` context tokens; KV written: one token per decoded and per prompt token.
* FLOPs: 2 per active non-embedding parameter per token (the embedding lookup is no matmul), plus
  2 x vocab x hidden for each row of logits (one per decoded token and one per prompt whose last
  token the step prefills: ``last_chunks``, 1 by default), plus attention: each (query, key) pair
  costs 4 x heads x head_dim FLOPs per layer (QK^T and AV, a multiply-add each). A decode token
  attends to its sequence's context; prompt token i of a prefill attends to C + i keys, so the
  prefill has ``P*C + P(P+1)/2`` pairs (causal), window layers ``sum_i min(C + i, window)``.
* Tensor parallel splits weights, KV heads, FLOPs; MBU is multiplied per doubling of ``tp`` by
  ``tp_mbu_factor`` on NVLink-class GPUs (``interconnect_gb_s`` >= ``nvlink_min_gb_s``) and by
  ``tp_mbu_factor_pcie`` on PCIe-only cards (efficiency.csv), and each of the 2 all-reduces per layer costs ``allreduce_latency_us`` plus a
  ring transfer of ``2 (tp-1)/tp x tokens x hidden x 2 bytes`` at ``allreduce_bw_efficiency_nvlink``
  of ``interconnect_gb_s`` (NVLink: NCCL's protocol overhead) or ``allreduce_bw_efficiency_pcie`` of
  it (PCIe: NCCL's all-reduce bus bandwidth stays well under the link's peak there).
* ``seq_overhead_us`` per decoding sequence: per-request work of every iteration (sampling, stops).
* ``attention_score_bytes`` per attention pair and head (0 by default): an engine without a fused
  attention kernel writes and re-reads the scores; that traffic, at ``mbu``, follows the roofline.
* ``masked_pair_share`` (0 by default): attention over a unified KV buffer (llama.cpp ``--kv-unified``)
  visits ``(n + P)(K + C + P)`` pairs per full layer; a masked pair costs that share of an attended one.
* ``logit_remainder_reads`` (0 by default): extra reads of the output matrix by a step with more than
  four rows of logits, not a multiple of four (llama.cpp's CPU kernels run rows in blocks of four);
  ``logit_batched_reads`` (1): its reads by a step with two or more, when its kernel is not the body's.
* ``dequant_gemm_tokens`` (0, never, by default): a step of more than that many tokens first converts
  weight-only-format matrices to a 16-bit copy (llama.cpp's CUDA backend, late 2023 to mid 2024),
  paid after the roofline at ``mbu``; its GEMMs then read the copy in place of the packed weights.
* Weight-only formats (int4, GGUF K-quants) dequantize into fp16 GEMMs; ``fp8`` weights use the GPU's
  FP8 rate where it has one. A format's ``weight_read_efficiency`` (quantizations.csv; 1 unless set)
  divides its weights' share of the memory read: GGUF block formats are unpacked by dequantizing
  mat-vec kernels that stream below the bandwidth a 16-bit read reaches.

``ttft_ms`` is one prefill step of the uncached prompt plus ``request_overhead_ms``. The decode step
of a batch of ``b`` sequences at context T is ``step_ms(b, b*T)`` and its TPOT.

Efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``, ``tp_mbu_factor``,
``allreduce_latency_us``, ``serial_share``, ...) default to ``data/efficiency.csv``, then to a named
backend's rows of ``data/engine_efficiency.csv`` (its release's too, given ``engine_version``); a
``calibration`` (dict, Series or one-row DataFrame; NaN entries and unknown keys are ignored)
overrides them, explicit keyword arguments override all.

How and why its TTFT differs from chimeraforge 0.6.0's: docs/methodology/serving-model.md.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit._args import check_int, check_number
from toolkit._model.constants import cost_constants
from toolkit._model.cost import CostModel
from toolkit._model.efficiency import _efficiencies, engine_efficiencies
from toolkit._model.memory import _check_tensor_parallel, efficiency_value
from toolkit._model.resolve import resolve_backend, resolve_gpu, resolve_kv_dtype, resolve_model, resolve_quant
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["cost_model", "ttft_ms"]


@positional_deprecated
def cost_model(
    model: object,
    gpu: object,
    quant: object,
    *,
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    calibration: object = None,
    mbu: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    request_overhead_ms: float | None = None,
    backend: object = None,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int | None = None,
    reserved_gb: float | None = None,
    tp_mbu_factor: float | None = None,
    allreduce_latency_us: float | None = None,
    serial_share: float | None = None,
    batched_mbu_factor: float | None = None,
    seq_overhead_us: float | None = None,
    attention_score_bytes: float | None = None,
    dequant_gemm_tokens: float | None = None,
    masked_pair_share: float | None = None,
    logit_remainder_reads: float | None = None,
    logit_batched_reads: float | None = None,
    engine_version: str | None = None,
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
        ``allreduce_latency_us``, ``serial_share``, ``batched_mbu_factor``, ``seq_overhead_us``,
        ``attention_score_bytes``, ``dequant_gemm_tokens`` replacing the defaults of
        ``data/efficiency.csv``.
    mbu, mfu : float, optional
        Decode memory-bandwidth and FLOPs utilisation at one GPU, in (0, 1].
    step_overhead_ms, request_overhead_ms : float, optional
        Fixed cost per engine step and per request (ms, >= 0).
    backend : str or spec, optional
        Serving backend: its ``reserved_gb``, ``max_batch``, ``fp16_accumulate`` (16-bit GEMMs
        at the GPU's FP16-accumulate rate) and ``kv_free_fraction`` (a KV cache sized as a share of
        the memory free after loading, in place of ``gpu_memory_utilization``) apply.
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
    serial_share : float, optional
        Share of the smaller of a step's memory and compute times added to the larger, in [0, 1]: 0
        is the roofline (loads and math overlapped), 1 a CPU core doing one after the other; the
        default 0.3 is fitted to an H200, whose kernels are each memory- or compute-bound alone.
    batched_mbu_factor : float, optional
        ``mbu`` multiplier of a matrix multiplied by two or more rows (the body's by the step's tokens,
        the output matrix by its rows of logits), in (0, 1]: below 1 for an engine whose one-row
        product has its own faster kernel (llama.cpp's CPU backend).
    seq_overhead_us : float, optional
        Fixed cost of each decoding sequence per step (us, >= 0): sampling, stop checks and the
        scheduler's per-request work, which grow with the batch.
    attention_score_bytes : float, optional
        Bytes of attention-score traffic per causal (query, key) pair and head (>= 0) for an engine that
        materialises the scores (0: a fused kernel keeps them on chip); paid after the roofline at ``mbu``.
    dequant_gemm_tokens : float, optional
        Steps of more than this many tokens convert weight-only-format weights (GGUF blocks, int4) to
        a 16-bit copy before 16-bit GEMMs (>= 0; 0: never): the conversion's traffic (packed read,
        copy written) is paid after the step's roofline at ``mbu``, and the GEMMs read the copy.
    masked_pair_share : float, optional
        Cost of an attention pair visited but masked out (another sequence's cell in a unified KV
        buffer, or a later token of the row's own) as a share of an attended pair's, in [0, 1].
    logit_remainder_reads, logit_batched_reads : float, optional
        Extra reads of the output matrix, at the batched rate, by a step with more than four rows of
        logits, not a multiple of four (>= 0; 0: none); its reads by a step with two or more (> 0).
    engine_version : str, optional
        The backend's release, as its source writes it: its rows of ``data/engine_efficiency.csv``
        apply on top of the backend's all-release rows. Needs ``backend``.

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
    if engine_version is not None and (spec_backend is None or not isinstance(engine_version, str)):
        raise ValueError(f"engine_version must be a string given with a backend, got {engine_version!r}")
    eff = _efficiencies(
        calibration,
        {
            "mbu": mbu,
            "mfu": mfu,
            "step_overhead_ms": step_overhead_ms,
            "request_overhead_ms": request_overhead_ms,
            "tp_mbu_factor": tp_mbu_factor,
            "allreduce_latency_us": allreduce_latency_us,
            "serial_share": serial_share,
            "batched_mbu_factor": batched_mbu_factor,
            "seq_overhead_us": seq_overhead_us,
            "attention_score_bytes": attention_score_bytes,
            "dequant_gemm_tokens": dequant_gemm_tokens,
            "masked_pair_share": masked_pair_share,
            "logit_remainder_reads": logit_remainder_reads,
            "logit_batched_reads": logit_batched_reads,
        },
        engine_efficiencies(spec_backend["name"] if spec_backend else None, engine_version),
    )
    util, act_tokens, reserved = _memory_settings(
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        reserved_gb=reserved_gb,
        backend=spec_backend,
    )
    if tp > 1 and not spec_gpu["interconnect_gb_s"] > 0:
        raise ValueError("gpu['interconnect_gb_s'] must be > 0 for tensor_parallel > 1")
    specs = {"model": spec_model, "gpu": spec_gpu, "quant": spec_quant, "kv_dtype": spec_kv}
    constants = cost_constants(
        specs,
        tp,
        eff,
        gpu_memory_utilization=util,
        activation_tokens=act_tokens,
        reserved_gb=reserved,
        fp16_accumulate=bool(spec_backend and spec_backend["fp16_accumulate"]),
        kv_free_fraction=spec_backend["kv_free_fraction"] if spec_backend else math.nan,
    )
    max_batch = spec_backend["max_batch"] if spec_backend else math.nan
    return CostModel(
        model=spec_model,
        gpu=spec_gpu,
        quant=spec_quant,
        kv_dtype=spec_kv,
        backend=spec_backend,
        tensor_parallel=tp,
        gpu_memory_utilization=util,
        max_num_batched_tokens=act_tokens,
        max_batch=math.inf if math.isnan(max_batch) else max_batch,
        **{
            name: value.item() if isinstance(value, np.generic | np.ndarray) else value
            for name, value in constants.items()
        },
    )


def _memory_settings(
    *,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int | None = None,
    reserved_gb: float | None = None,
    backend: object = None,
) -> tuple[float, int, float]:
    """(memory utilisation, activation tokens, runtime reserve GB): given, the backend's or the defaults."""
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
        reserved_gb = backend["reserved_gb"] if backend else efficiency_value("reserved_gb")
    return util, act_tokens, check_number("reserved_gb", reserved_gb, low=0)


@positional_deprecated
def ttft_ms(
    model: object,
    gpu: object,
    quant: object,
    prompt_tokens: object,
    *,
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
        Prompt length(s) in tokens (1 to the model's ``max_context``); the result is vectorised over it.
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

"""The one cost model of an engine iteration.

One engine iteration (a "step") decodes one token for each of ``n`` running sequences holding ``K``
KV tokens in total, and may prefill ``P`` new prompt tokens whose attention also spans ``C`` earlier
(cached) tokens. The formulas are in :class:`CostModel`'s docstring and in the module docstring of
:mod:`toolkit._model.serving`, which builds a CostModel from catalog specs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toolkit._args import check_array
from toolkit._model.efficiency import _SCALARS, _nonneg
from toolkit._model.memory import _max_seqs
from toolkit._model.resolve import window_message, within_window
from toolkit._model.terms import combine, step_parts, step_time, ttft_time
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["CostModel"]


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """The serving cost model of one model on one GPU type, with every spec looked up once.

    Build it with :func:`cost_model`. All byte and FLOP figures are per GPU. Methods are vectorised
    with numpy broadcasting; the formulas are those of :mod:`toolkit._model.terms`, documented in the
    module docstring of :mod:`toolkit._model.serving`.

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
    serial_share : float
        Share of the smaller of a step's memory and compute times added to the larger (0: roofline).
    batched_mbu_factor : float
        ``mbu`` multiplier of a weight matrix multiplied by two or more rows: the body's by the
        step's tokens, the output matrix by its rows of logits (1: one MBU for every step).
    seq_overhead_us : float
        Fixed cost per decoding sequence per step (us), on top of ``step_overhead_ms``.
    attention_score_bytes : float
        Memory traffic per (query, key) pair and head of attention scores materialised outside a
        fused kernel (0: fused), added after the step's roofline.
    masked_pair_share : float
        Cost of a (query, key) pair an attention kernel visits but masks out (a cell of another
        sequence, or a later token of its own, in a unified KV buffer) as a share of an attended
        pair's FLOPs (0: attention per sequence).
    logit_remainder_reads : float
        Extra reads of the output matrix, at the batched rate, by a step whose rows of logits are more
        than four and not a multiple of four (0: none).
    logit_batched_reads : float
        Reads of the output matrix, at the batched rate, by a step with two or more rows of logits (1:
        one read, as the body's matrices).
    dequant_gemm_tokens : float
        A step of more than this many tokens converts weight-only formats to a 16-bit copy before its
        GEMMs (0: never).
    dequant_weights_bytes, dequant_copy_bytes : float
        Per GPU, the weight matrices (all but the embeddings) of a weight-only format (0 for 16-bit
        and fp8 weights), packed and as that 16-bit copy.
    bandwidth_gb_s, tflops, interconnect_gb_s : float
        GPU memory bandwidth, the tensor rate used (fp16 or fp8), per-GPU interconnect.
    allreduce_gb_s : float
        Bus bandwidth a tensor-parallel all-reduce reaches: ``allreduce_bw_efficiency_nvlink`` of
        ``interconnect_gb_s`` over NVLink-class links, ``allreduce_bw_efficiency_pcie`` of it over
        PCIe (efficiency.csv).
    weights_bytes, shared_weights_bytes, expert_bytes : float
        Weights per GPU; of which shared (non-expert); one expert's weights over all layers.
    weight_read_efficiency : float
        Share of ``mbu`` the weights are read at (the format's; 1 for plain 16- and 8-bit weights).
    kv_bytes_per_token, kv_layer_bytes : float
        KV bytes per token per GPU (every layer), and per layer.
    active_params : float
        Active parameters (MoE: per token), count.
    body_flops_per_token, logits_flops_per_token, attention_flops_per_pair : float
        Per GPU: 2 x non-embedding active parameters; 2 x vocab x hidden; 4 x heads x head_dim.
    output_weights_bytes : float
        Per GPU, the output matrix (vocab x hidden, the embedding when tied): read only by a step
        that computes logits.
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
    serial_share: float
    batched_mbu_factor: float
    seq_overhead_us: float
    attention_score_bytes: float
    dequant_gemm_tokens: float
    masked_pair_share: float
    logit_remainder_reads: float
    logit_batched_reads: float
    dequant_weights_bytes: float
    dequant_copy_bytes: float
    bandwidth_gb_s: float
    tflops: float
    interconnect_gb_s: float
    allreduce_gb_s: float
    weights_bytes: float
    shared_weights_bytes: float
    expert_bytes: float
    weight_read_efficiency: float
    kv_bytes_per_token: float
    kv_layer_bytes: float
    active_params: float
    body_flops_per_token: float
    logits_flops_per_token: float
    output_weights_bytes: float
    attention_flops_per_pair: float
    kv_budget_bytes: float
    kv_budget_tokens: int
    kv_block_tokens: int
    max_batch: float

    def step_terms(
        self,
        decode_seqs: object,
        kv_tokens: object,
        prefill_tokens: object = 0,
        prefill_context_tokens: object = 0,
        last_chunks: object = 1,
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
        last_chunks : int or array-like
            Prompts whose last token is among the prefilled ones (>= 0; counted up to
            ``prefill_tokens``): each computes a row of logits, as each decoding sequence does. 1, the
            default, is a prefill that ends one prompt; 0 a chunk that ends none, which (with no
            decoding sequences) reads no output matrix.

        Returns
        -------
        dict of numpy.ndarray
            ``memory_ms``, ``compute_ms``, ``overhead_ms`` (step overhead plus all-reduce), ``step_ms``
            (max(memory, compute) + ``serial_share`` x min(memory, compute) + overhead).
        """
        n = _nonneg("decode_seqs", decode_seqs)
        kv = _nonneg("kv_tokens", kv_tokens)
        p = _nonneg("prefill_tokens", prefill_tokens)
        c = _nonneg("prefill_context_tokens", prefill_context_tokens)
        e = _nonneg("last_chunks", last_chunks)
        memory_ms, compute_ms, overhead_ms = step_parts(vars(self), n, kv, p, c, e)
        step = combine(vars(self), memory_ms, compute_ms, overhead_ms)
        shape = np.broadcast_shapes(n.shape, kv.shape, p.shape, c.shape, e.shape)
        return {
            "memory_ms": np.broadcast_to(memory_ms, shape),
            "compute_ms": np.broadcast_to(compute_ms, shape),
            "overhead_ms": np.broadcast_to(overhead_ms, shape),
            "step_ms": np.broadcast_to(step, shape),
        }

    def step_ms(
        self,
        decode_seqs: object,
        kv_tokens: object,
        prefill_tokens: object = 0,
        prefill_context_tokens: object = 0,
        last_chunks: object = 1,
    ) -> float | np.ndarray:
        """Duration of one engine iteration in ms: the roofline of memory and compute plus the step overhead.

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
        last_chunks : int or array-like
            Prompts whose last token is among the prefilled ones (>= 0), as in :meth:`step_terms`.

        Returns
        -------
        float or numpy.ndarray
            Step time in ms; a float when every input is a scalar.
        """
        args = (decode_seqs, kv_tokens, prefill_tokens, prefill_context_tokens, last_chunks)
        if all(isinstance(a, _SCALARS) and not isinstance(a, bool) and 0 <= a < math.inf for a in args):
            # scalar fast path for simulators stepping one iteration at a time; same formula
            return float(step_time(vars(self), *(float(a) for a in args)))
        step = self.step_terms(*args)["step_ms"]
        return float(step) if step.ndim == 0 else np.array(step)

    def ttft_ms(self, prompt_tokens: object, cached_tokens: object = 0) -> float | np.ndarray:
        """Time to first token in ms: prefill of the uncached part of the prompt plus the request overhead.

        Parameters
        ----------
        prompt_tokens : int or array-like
            Prompt length in tokens (1 to the model's ``max_context``).
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
        self.check_window("prompt_tokens", prompt_tokens)
        ttft = ttft_time(vars(self), prompt, cached)
        return float(ttft) if ttft.ndim == 0 else ttft

    def check_window(self, name: str, tokens: object) -> None:
        """Raise ``ValueError`` naming ``name`` when any of ``tokens`` exceeds the model's context window
        (``max_context``; no check where the model does not state one)."""
        window = self.model["max_context"]
        fits = np.asarray(within_window(window, tokens))
        if not fits.all():
            longest = np.asarray(tokens, dtype=float)[~fits].max()
            raise ValueError(f"{window_message(self.model, name)}, got {longest:.0f}")

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


# The fields were positional before they were keyword-only: the old spelling works, with a
# DeprecationWarning, for one release.
CostModel.__init__ = positional_deprecated(CostModel.__init__)  # type: ignore[method-assign]

"""The continuous-batching curve: decode throughput and TPOT against batch size, from the one cost model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit._args import check_array, check_int
from toolkit._model.efficiency import MAX_BATCH, MAX_TOKENS
from toolkit._model.serving import cost_model
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["batching_curve"]


def _default_batches(max_seqs: int) -> np.ndarray:
    batches = {2**i for i in range(10)}
    if max_seqs >= 1:
        batches.add(max_seqs)
    return np.array(sorted(batches))


@positional_deprecated
def batching_curve(
    model: object,
    gpu: object,
    quant: object,
    context_tokens: int,
    *,
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
        KV tokens each running sequence holds (1 to the model's ``max_context``).
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
    cm.check_window("context_tokens", context)
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

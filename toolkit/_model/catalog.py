"""Catalogs of GPUs, models, weight formats, KV-cache formats and serving backends.

Each catalog is a CSV under ``data/`` with a ``source`` per row. The public functions return them as
DataFrames; the private ``resolve_*`` functions turn whatever a user passes (a catalog name written
loosely, a Hugging Face id, or their own spec as a dict / Series / one-row DataFrame) into one plain
dict, validated, so the serving model never sees a half-specified GPU or model.

Name matching ignores case, spaces, hyphens, underscores, dots and slashes ("H100 SXM" == "h100-sxm";
"llama3.1-8b", "Llama-3.1-8B" and "meta-llama/Llama-3.1-8B" are one model). A name matching no entry
exactly but contained in exactly one entry's name is accepted ("4090"); contained in several it is
ambiguous and raises. Unknown names raise ``ValueError`` naming the argument and the nearest entries.
"""

from __future__ import annotations

import pandas as pd

from toolkit._data import load_csv

__all__ = ["backends", "engine_scheduling", "gpus", "kv_dtypes", "models", "quantizations"]


def gpus() -> pd.DataFrame:
    """Return the GPU catalog.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        One row per GPU: ``name``, ``aliases`` (other spellings, ``;``-separated), ``memory_gb``
        (capacity, 1e9 bytes), ``bandwidth_gb_s`` (peak memory bandwidth), ``fp16_tflops`` (dense
        FP16/BF16 tensor rate, FP32 accumulate), ``fp8_tflops`` (dense, NaN where none),
        ``fp16_acc16_tflops`` (dense FP16 with FP16 accumulate where it differs, else NaN),
        ``price_usd_hour`` (typical on-demand), ``interconnect_gb_s`` (per-GPU, one direction),
        ``source``.
    """
    return load_csv("gpus.csv")


def models() -> pd.DataFrame:
    """Return the model catalog (architectures from each model's Hugging Face ``config.json``).

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        One row per model: ``name``, ``hf_id``, ``params_b`` and ``active_params_b`` (billions),
        ``layers``, ``hidden_size``, ``attention_heads``, ``kv_heads``, ``head_dim``,
        ``intermediate_size``, ``vocab_size``, ``tied_embeddings``, ``max_context`` (tokens),
        ``sliding_window`` (tokens, NaN when none), ``sliding_window_layers`` (layers using it),
        ``experts`` and ``experts_per_token`` (0 for dense models), ``source``. A model missing here
        can be read from its own ``config.json`` with :func:`model_from_hf_config`.
    """
    return load_csv("models.csv")


def quantizations() -> pd.DataFrame:
    """Return the weight-format catalog.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        ``name``, ``bits_per_weight`` (effective, including block scales), ``compute`` (``fp16`` or
        ``fp8``: the tensor rate its GEMMs run at), ``source``.
    """
    return load_csv("quantizations.csv")


def kv_dtypes() -> pd.DataFrame:
    """Return the KV-cache format catalog.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        ``name``, ``bits_per_element`` (including block scales), ``source``.
    """
    return load_csv("kv_dtypes.csv")


def backends() -> pd.DataFrame:
    """Return the serving-backend catalog.

    Parameters
    ----------
    None

    Returns
    -------
    pandas.DataFrame
        ``name``, ``continuous_batching`` (bool), ``max_batch`` (default cap on concurrently decoded
        sequences, NaN = only the KV cache limits it), ``reserved_gb`` (runtime memory outside
        weights, KV and activations, 1e9 bytes), ``fp16_accumulate``, ``kv_free_fraction`` (share of
        the memory free after loading that the KV cache takes, NaN = what ``gpu_memory_utilization``
        leaves), ``source``.
    """
    return load_csv("backends.csv")


def engine_scheduling(engine: str | None = None) -> pd.DataFrame:
    """Return how each serving engine orders prompt prefill against running decodes, per release.

    Parameters
    ----------
    engine : str, optional
        A backend name of :func:`backends`; default every engine.

    Returns
    -------
    pandas.DataFrame
        ``engine``, ``versions``, ``mode``, ``prefill_order`` (``prefill_first``, ``decode_first`` or
        ``mixed``), ``chunked_prefill`` (``on``, ``off`` or ``flag``), ``token_budget_parameter`` and
        its default ``token_budget_tokens``, ``running_cap_parameter`` and ``running_cap`` (NaN where
        the engine derives it), ``kv_pressure`` (its admission or preemption rule when the KV cache
        fills), ``status`` (``read`` in the cited code, or ``to check``) and ``source``.

    Raises
    ------
    ValueError
        If ``engine`` is not a backend name.
    """
    table = load_csv("engine_scheduling.csv")
    if engine is None:
        return table
    names = set(backends()["name"])
    if engine not in names:
        raise ValueError(f"engine must be one of {sorted(names)}, got {engine!r}")
    return table[table["engine"] == engine].reset_index(drop=True)

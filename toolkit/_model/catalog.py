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

import difflib
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pandas as pd

from toolkit._data import load_csv

__all__ = ["backends", "gpus", "kv_dtypes", "models", "quantizations"]

# field -> (kind, positive-required); "str" fields need a non-empty string
_GPU_FIELDS = {
    "name": "str",
    "memory_gb": "pos",
    "bandwidth_gb_s": "pos",
    "fp16_tflops": "pos",
}
_GPU_OPTIONAL = {"fp8_tflops": math.nan, "price_usd_hour": math.nan, "interconnect_gb_s": math.nan}
_MODEL_FIELDS = {
    "name": "str",
    "params_b": "pos",
    "layers": "posint",
    "hidden_size": "posint",
    "attention_heads": "posint",
    "kv_heads": "posint",
    "head_dim": "posint",
    "intermediate_size": "posint",
    "vocab_size": "posint",
}
_MODEL_OPTIONAL = {
    "active_params_b": None,  # defaults to params_b
    "tied_embeddings": False,
    "max_context": math.nan,
    "sliding_window": math.nan,
    "sliding_window_layers": 0,
    "experts": 0,
    "experts_per_token": 0,
}
_QUANT_FIELDS = {"name": "str", "bits_per_weight": "pos"}
_KV_FIELDS = {"name": "str", "bits_per_element": "pos"}
_BACKEND_FIELDS = {"name": "str", "reserved_gb": "nonneg"}


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
        ``experts`` and ``experts_per_token`` (0 for dense models), ``source``.
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
        weights, KV and activations, 1e9 bytes), ``source``.
    """
    return load_csv("backends.csv")


def _norm(text: str) -> str:
    return re.sub(r"[\s\-_./]+", "", str(text)).lower()


def _keys(row: pd.Series) -> list[str]:
    keys = [row["name"]]
    if "hf_id" in row and isinstance(row["hf_id"], str):
        keys += [row["hf_id"], row["hf_id"].split("/")[-1]]
    if "aliases" in row and isinstance(row["aliases"], str):
        keys += row["aliases"].split(";")
    return [_norm(k) for k in keys]


def _lookup(argument: str, name: str, table: pd.DataFrame) -> dict[str, Any]:
    query = _norm(name)
    if not query:
        raise ValueError(f"{argument} must be a non-empty name, got {name!r}")
    keys = {i: _keys(row) for i, row in table.iterrows()}
    exact = [i for i, ks in keys.items() if query in ks]
    if not exact:
        exact = [i for i, ks in keys.items() if any(query in k for k in ks)]
    if len(exact) == 1:
        return _clean(table.loc[exact[0]].to_dict())
    names = list(table["name"])
    if len(exact) > 1:
        options = ", ".join(repr(table.loc[i, "name"]) for i in exact)
        raise ValueError(f"{argument} {name!r} is ambiguous: it matches {options}")
    by_norm = {_norm(n): n for n in names}
    near = difflib.get_close_matches(query, list(by_norm), n=4, cutoff=0.4)
    hint = ", ".join(repr(by_norm[n]) for n in near) or ", ".join(map(repr, names))
    raise ValueError(f"unknown {argument} {name!r}; nearest: {hint}")


@lru_cache(maxsize=512)
def _cached_lookup(argument: str, name: str, csv: str) -> tuple[tuple[str, Any], ...]:
    return tuple(_lookup(argument, name, load_csv(csv)).items())


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """Turn numpy scalars into Python ones so the dict compares and prints plainly."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        out[key] = value
    return out


def _as_dict(argument: str, spec: object) -> dict[str, Any] | None:
    if isinstance(spec, pd.DataFrame):
        if len(spec) != 1:
            raise ValueError(f"{argument} as a DataFrame must have exactly one row, got {len(spec)}")
        return _clean(spec.iloc[0].to_dict())
    if isinstance(spec, pd.Series):
        return _clean(spec.to_dict())
    if isinstance(spec, Mapping):
        return _clean(dict(spec))
    return None


def _check_fields(argument: str, spec: dict[str, Any], fields: dict[str, str]) -> None:
    for field, kind in fields.items():
        if field not in spec:
            raise ValueError(f"{argument} spec is missing the field {field!r} (required: {', '.join(fields)})")
        value = spec[field]
        if kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{argument}[{field!r}] must be a non-empty string, got {value!r}")
            continue
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if kind == "posint":
            ok = ok and float(value).is_integer() and value >= 1
            rng = "an integer >= 1"
        elif kind == "nonneg":
            ok = ok and value >= 0
            rng = "a finite number >= 0"
        else:
            ok = ok and value > 0
            rng = "a finite number > 0"
        if not ok:
            raise ValueError(f"{argument}[{field!r}] must be {rng}, got {value!r}")


def _resolve(argument: str, spec: object, csv: str, fields: dict[str, str]) -> dict[str, Any]:
    as_dict = _as_dict(argument, spec)
    if as_dict is None:
        if not isinstance(spec, str):
            raise ValueError(f"{argument} must be a catalog name or a dict/Series spec, got {spec!r}")
        as_dict = dict(_cached_lookup(argument, spec, csv))
    _check_fields(argument, as_dict, fields)
    return as_dict


def _optional_number(argument: str, spec: dict[str, Any], field: str, default: Any, *, low: float) -> None:
    value = spec.get(field, default)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        spec[field] = default
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
        raise ValueError(f"{argument}[{field!r}] must be a finite number >= {low:g} or blank, got {value!r}")
    spec[field] = value


def resolve_gpu(gpu: object) -> dict[str, Any]:
    """Return one GPU as a dict (``name``, ``memory_gb``, ``bandwidth_gb_s``, ``fp16_tflops``, ...).

    ``gpu`` is a catalog name or a spec with at least ``name``, ``memory_gb``, ``bandwidth_gb_s`` and
    ``fp16_tflops``; ``fp8_tflops``, ``price_usd_hour`` and ``interconnect_gb_s`` default to NaN.
    """
    spec = _resolve("gpu", gpu, "gpus.csv", _GPU_FIELDS)
    for field, default in _GPU_OPTIONAL.items():
        _optional_number("gpu", spec, field, default, low=0.0)
    return spec


def resolve_model(model: object) -> dict[str, Any]:
    """Return one model as a dict of its architecture (see :func:`models` for the fields).

    A spec needs ``name``, ``params_b``, ``layers``, ``hidden_size``, ``attention_heads``,
    ``kv_heads``, ``head_dim``, ``intermediate_size`` and ``vocab_size``; the MoE and sliding-window
    fields default to a dense, full-attention model.
    """
    spec = _resolve("model", model, "models.csv", _MODEL_FIELDS)
    for field, default in _MODEL_OPTIONAL.items():
        if field == "tied_embeddings":
            value = spec.get(field, default)
            if isinstance(value, str):
                value = value.strip().lower() in ("true", "1", "yes")
            spec[field] = bool(value) if value == value else False
            continue
        _optional_number("model", spec, field, spec["params_b"] if default is None else default, low=0.0)
    for field in (
        "layers",
        "hidden_size",
        "attention_heads",
        "kv_heads",
        "head_dim",
        "intermediate_size",
        "vocab_size",
        "sliding_window_layers",
        "experts",
        "experts_per_token",
    ):
        spec[field] = int(spec[field])
    if spec["active_params_b"] <= 0 or spec["active_params_b"] > spec["params_b"]:
        raise ValueError(f"model['active_params_b'] must be in (0, params_b], got {spec['active_params_b']!r}")
    if spec["kv_heads"] > spec["attention_heads"] or spec["attention_heads"] % spec["kv_heads"]:
        raise ValueError("model['kv_heads'] must divide model['attention_heads']")
    if spec["sliding_window_layers"] > spec["layers"]:
        raise ValueError("model['sliding_window_layers'] must be <= model['layers']")
    if spec["sliding_window_layers"] and not spec["sliding_window"] >= 1:
        raise ValueError("model['sliding_window'] must be >= 1 when sliding_window_layers > 0")
    if spec["experts"] and not 1 <= spec["experts_per_token"] <= spec["experts"]:
        raise ValueError("model['experts_per_token'] must be in [1, experts] for an MoE model")
    return spec


def resolve_quant(quant: object) -> dict[str, Any]:
    """Return one weight format as a dict (``name``, ``bits_per_weight``, ``compute``)."""
    spec = _resolve("quant", quant, "quantizations.csv", _QUANT_FIELDS)
    compute = spec.get("compute", "fp16")
    if compute not in ("fp16", "fp8"):
        raise ValueError(f"quant['compute'] must be 'fp16' or 'fp8', got {compute!r}")
    spec["compute"] = compute
    return spec


def resolve_kv_dtype(kv_dtype: object) -> dict[str, Any]:
    """Return one KV-cache format as a dict (``name``, ``bits_per_element``)."""
    return _resolve("kv_dtype", kv_dtype, "kv_dtypes.csv", _KV_FIELDS)


def resolve_backend(backend: object) -> dict[str, Any]:
    """Return one serving backend as a dict (``name``, ``continuous_batching``, ``max_batch``, ``reserved_gb``)."""
    spec = _resolve("backend", backend, "backends.csv", _BACKEND_FIELDS)
    spec["continuous_batching"] = bool(spec.get("continuous_batching", True))
    _optional_number("backend", spec, "max_batch", math.nan, low=1.0)
    return spec

"""Resolving a name or a spec into a checked catalog row: fuzzy name lookup, required and optional fields."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from toolkit._args import is_pandas
from toolkit._data import load_rows

__all__: list[str] = []


# field -> (kind, positive-required); "str" fields need a non-empty string
_GPU_FIELDS = {
    "name": "str",
    "memory_gb": "pos",
    "bandwidth_gb_s": "pos",
    "fp16_tflops": "pos",
}


_GPU_OPTIONAL = {
    "fp8_tflops": math.nan,
    "fp16_acc16_tflops": math.nan,
    "price_usd_hour": math.nan,
    "interconnect_gb_s": math.nan,
}


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


def within_window(max_context: object, tokens: object) -> bool | np.ndarray:
    """Whether ``tokens`` fit a model's context window ``max_context`` (always, where the window is NaN:
    not stated); vectorised over both."""
    window = np.asarray(max_context, dtype=float)
    fits = np.isnan(window) | (np.asarray(tokens, dtype=float) <= window)
    return bool(fits) if fits.ndim == 0 else fits


def window_message(model: Mapping[str, Any], name: str) -> str:
    """The opening of the error for ``name`` beyond ``model``'s context window (``max_context``)."""
    return f"{name} must be <= {model['max_context']:.0f} ({model['name']}'s context window, max_context)"


_QUANT_FIELDS = {"name": "str", "bits_per_weight": "pos"}


_KV_FIELDS = {"name": "str", "bits_per_element": "pos"}


_BACKEND_FIELDS = {"name": "str", "reserved_gb": "nonneg"}


def _norm(text: str) -> str:
    return re.sub(r"[\s\-_./]+", "", str(text)).lower()


def _keys(row: Mapping[str, Any]) -> list[str]:
    keys = [row["name"]]
    if "hf_id" in row and isinstance(row["hf_id"], str):
        keys += [row["hf_id"], row["hf_id"].split("/")[-1]]
    if "aliases" in row and isinstance(row["aliases"], str):
        keys += row["aliases"].split(";")
    return [_norm(k) for k in keys]


@lru_cache(maxsize=16)
def _table_keys(csv: str) -> dict[Any, list[str]]:
    """Per row of a catalog CSV, the normalised names it answers to."""
    return {i: _keys(row) for i, row in enumerate(load_rows(csv))}


def _lookup(argument: str, name: str, csv: str) -> dict[str, Any]:
    query = _norm(name)
    if not query:
        raise ValueError(f"{argument} must be a non-empty name, got {name!r}")
    table = load_rows(csv)
    keys = _table_keys(csv)
    exact = [i for i, ks in keys.items() if query in ks]
    if not exact:
        exact = [i for i, ks in keys.items() if any(query in k for k in ks)]
    if len(exact) == 1:
        return _clean(table[exact[0]])
    names = [row["name"] for row in table]
    if len(exact) > 1:
        options = ", ".join(repr(table[i]["name"]) for i in exact)
        raise ValueError(f"{argument} {name!r} is ambiguous: it matches {options}")
    by_norm = {_norm(n): n for n in names}
    near = difflib.get_close_matches(query, list(by_norm), n=4, cutoff=0.4)
    if near:
        raise ValueError(f"unknown {argument} {name!r}; nearest: {', '.join(repr(by_norm[n]) for n in near)}")
    raise ValueError(f"unknown {argument} {name!r}; known: {', '.join(map(repr, names))}")


@lru_cache(maxsize=512)
def _cached_lookup(argument: str, name: str, csv: str) -> tuple[tuple[str, Any], ...]:
    return tuple(_lookup(argument, name, csv).items())


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """Turn numpy scalars into Python ones so the dict compares and prints plainly."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        out[key] = value
    return out


def _as_dict(argument: str, spec: object) -> dict[str, Any] | None:
    if is_pandas(spec, "DataFrame"):
        if len(spec) != 1:
            raise ValueError(f"{argument} as a DataFrame must have exactly one row, got {len(spec)}")
        return _clean(spec.iloc[0].to_dict())
    if is_pandas(spec, "Series"):
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
    ``fp16_tflops``; ``fp8_tflops``, ``fp16_acc16_tflops``, ``price_usd_hour`` and
    ``interconnect_gb_s`` default to NaN.
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
    """Return one weight format as a dict (``name``, ``bits_per_weight``, ``compute``,
    ``weight_read_efficiency``: the share of MBU its weights are read at, default 1)."""
    spec = _resolve("quant", quant, "quantizations.csv", _QUANT_FIELDS)
    compute = spec.get("compute", "fp16")
    if compute not in ("fp16", "fp8"):
        raise ValueError(f"quant['compute'] must be 'fp16' or 'fp8', got {compute!r}")
    spec["compute"] = compute
    _optional_number("quant", spec, "weight_read_efficiency", 1.0, low=0.0)
    if not 0 < spec["weight_read_efficiency"] <= 1:
        raise ValueError(
            f"quant['weight_read_efficiency'] must be in (0, 1] or blank, got {spec['weight_read_efficiency']!r}"
        )
    return spec


def resolve_kv_dtype(kv_dtype: object) -> dict[str, Any]:
    """Return one KV-cache format as a dict (``name``, ``bits_per_element``)."""
    return _resolve("kv_dtype", kv_dtype, "kv_dtypes.csv", _KV_FIELDS)


def resolve_backend(backend: object) -> dict[str, Any]:
    """Return one serving backend as a dict (``name``, ``continuous_batching``, ``max_batch``,
    ``reserved_gb``, ``fp16_accumulate``: whether its 16-bit GEMMs accumulate in fp16, default False;
    ``kv_free_fraction``: the share of the memory free after loading its KV cache takes, NaN for none)."""
    spec = _resolve("backend", backend, "backends.csv", _BACKEND_FIELDS)
    spec["continuous_batching"] = bool(spec.get("continuous_batching", True))
    accumulate = spec.get("fp16_accumulate", False)
    if not isinstance(accumulate, (bool, np.bool_)):
        raise ValueError(f"backend['fp16_accumulate'] must be True or False, got {accumulate!r}")
    spec["fp16_accumulate"] = bool(accumulate)
    _optional_number("backend", spec, "max_batch", math.nan, low=1.0)
    _optional_number("backend", spec, "kv_free_fraction", math.nan, low=0.0)
    _optional_number("backend", spec, "prompt_cache_mib", math.nan, low=0.0)
    if spec["kv_free_fraction"] > 1:
        raise ValueError(f"backend['kv_free_fraction'] must be in [0, 1] or blank, got {spec['kv_free_fraction']!r}")
    return spec

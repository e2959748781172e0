"""The tunable efficiencies of the serving model: their one list, defaults, calibration overrides and input limits."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit._args import check_number, is_pandas
from toolkit._data import load_csv, load_rows
from toolkit._model.memory import (
    efficiency_value,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["efficiency_defaults"]


# The one list of efficiencies a calibration may replace, with their allowed ranges (low, high, low
# inclusive). The planner, the fit, calibrate() and the report all read this dict.
TUNABLE_EFFICIENCIES: dict[str, tuple[float, float | None, bool]] = {
    "mbu": (0.0, 1.0, False),
    "mfu": (0.0, 1.0, False),
    "step_overhead_ms": (0.0, None, True),
    "request_overhead_ms": (0.0, None, True),
    "tp_mbu_factor": (0.0, 1.0, False),
    "allreduce_latency_us": (0.0, None, True),
    "serial_share": (0.0, 1.0, True),
    "batched_mbu_factor": (0.0, 1.0, False),
    "seq_overhead_us": (0.0, None, True),
    "attention_score_bytes": (0.0, None, True),
    "dequant_gemm_tokens": (0.0, None, True),
    "masked_pair_share": (0.0, 1.0, True),
    "logit_remainder_reads": (0.0, None, True),
    "logit_batched_reads": (0.0, None, False),
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
        ``tp_mbu_factor``, ``allreduce_latency_us``, ``serial_share``, ``batched_mbu_factor``,
        ``seq_overhead_us``, ``attention_score_bytes``, ``dequant_gemm_tokens``, ``masked_pair_share``, ``logit_remainder_reads``, ``logit_batched_reads``, ``reserved_gb``, ``activation_bytes_per_value``,
        ``kv_block_tokens``, ``gpu_memory_utilization``, ``max_num_batched_tokens``) with columns
        ``value``, ``unit`` and ``source``. ``efficiency_defaults()["value"]`` is a valid calibration.
    """
    return load_csv("efficiency.csv").set_index("parameter")


def _calibration_mapping(calibration: object) -> Mapping[str, Any]:
    if calibration is None:
        return {}
    if is_pandas(calibration, "DataFrame"):
        if len(calibration) != 1:
            raise ValueError(f"calibration as a DataFrame must have one row, got {len(calibration)}")
        return calibration.iloc[0].to_dict()
    if isinstance(calibration, Mapping) or is_pandas(calibration, "Series"):
        return dict(calibration)
    raise ValueError(f"calibration must be a dict, Series or one-row DataFrame, got {type(calibration).__name__}")


def engine_efficiencies(backend: str | None, engine_version: str | None = None) -> dict[str, float]:
    """The efficiency defaults ``data/engine_efficiency.csv`` gives one engine: its rows for every
    release, then (winning) those listing ``engine_version``.

    Parameters
    ----------
    backend : str or None
        A backend name of ``data/backends.csv``; None gives no defaults.
    engine_version : str, optional
        The engine's release as its source writes it; None applies the all-release rows only.

    Returns
    -------
    dict
        Efficiency name -> value, for the tunable efficiencies the table sets for that engine.
    """
    if backend is None:
        return {}
    rows = [row for row in load_rows("engine_efficiency.csv") if row["engine"] == backend]
    blank = [isinstance(row["versions"], float) and math.isnan(row["versions"]) for row in rows]
    out = {str(row["parameter"]): float(row["value"]) for row, every in zip(rows, blank) if every}
    if engine_version is not None:
        for row, every in zip(rows, blank):
            if not every and str(engine_version) in str(row["versions"]).split(";"):
                out[str(row["parameter"])] = float(row["value"])
    return out


def _efficiencies(
    calibration: object, explicit: dict[str, float | None], engine: Mapping[str, float] | None = None
) -> dict[str, float]:
    """The checked tunable efficiencies: efficiency.csv, then an engine's defaults
    (:func:`engine_efficiencies`), then the calibration, then explicit values."""
    values: dict[str, object] = {name: efficiency_value(name) for name in TUNABLE_EFFICIENCIES}
    values.update(engine or {})
    for name, value in _calibration_mapping(calibration).items():
        if name in TUNABLE_EFFICIENCIES and value is not None and not (isinstance(value, float) and math.isnan(value)):
            values[name] = value
    values.update({name: value for name, value in explicit.items() if value is not None})
    out = {}
    for name, (low, high, low_inclusive) in TUNABLE_EFFICIENCIES.items():
        out[name] = check_number(name, values[name], low=low, high=high, low_inclusive=low_inclusive)
    return out


def _nonneg(name: str, value: object) -> np.ndarray:
    raw = np.asarray(value)
    # numpy would read "0" as 0.0: text is not a count
    text = raw.dtype.kind in "USV" or (raw.dtype.kind == "O" and any(isinstance(v, str | bytes) for v in raw.flat))
    try:
        if text:
            raise ValueError
        arr = raw.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers (>= 0), got {value!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        raise ValueError(f"{name} must be finite numbers (>= 0), got {arr[bad].flat[0].item()!r}")
    return arr

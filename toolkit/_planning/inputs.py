"""The planner's inputs: catalog constants, backend support, quality scores, latency quantiles and candidate specs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np

from toolkit._args import check_int, is_pandas
from toolkit._data import load_rows
from toolkit._model.resolve import resolve_model, resolve_quant
from toolkit._planning.gamma import gamma_quantile
from toolkit._vocab.metrics import LATENCY_METRICS

__all__: list[str] = []


_CHECKS = ("capacity", *(f"slo_{metric}" for metric in LATENCY_METRICS))
# every binding constraint a plan can name; the checks first, so a check's position is its code
_CONSTRAINTS = (*_CHECKS, "budget", "kv_memory", "max_batch")


# frontier plans a trace workload is replayed on in the simulator (each replays the whole trace)
SIMULATED_PLANS = 8


_CONFIG_COLUMNS = {
    "model": object,
    "gpu": object,
    "quant": object,
    "tensor_parallel": int,
    "interconnect_gb_s": float,
    "quality": float,
}


@lru_cache(maxsize=1)
def _constants() -> dict[str, float]:
    return {str(row["parameter"]): float(row["value"]) for row in load_rows("planner.csv")}


@lru_cache(maxsize=1)
def _support() -> dict[str, tuple[frozenset[str], bool]]:
    return {
        str(row["backend"]): (
            frozenset(str(row["weight_formats"]).split(";")),
            str(row["tensor_parallel"]).lower() == "true",
        )
        for row in load_rows("backend_support.csv")
    }


@lru_cache(maxsize=1)
def _quality_parts() -> tuple[dict[str, float], dict[str, float]]:
    table = load_rows("quality.csv")
    base = {resolve_model(row["model"])["name"]: float(row["value"]) for row in table if row["kind"] == "base"}
    recovery = {resolve_quant(row["quant"])["name"]: float(row["value"]) for row in table if row["kind"] == "recovery"}
    return base, recovery


def quality_score(model_name: str, quant_name: str) -> float:
    """MMLU (%) of the 16-bit model x the format's measured recovery; NaN when either is unknown."""
    base, recovery = _quality_parts()
    return base.get(model_name, math.nan) * recovery.get(quant_name, math.nan)


def length_quantile(cs2: float, percentile: float) -> float:
    """The ``percentile`` of a request's length relative to its mean: a gamma distribution with mean 1
    and squared coefficient of variation ``cs2`` (1 for ``cs2 = 0``; ``-ln(1 - p)`` for ``cs2 = 1``,
    the exponential lengths of geometric outputs)."""
    # scipy.stats.gamma.ppf(percentile, 1 / cs2, scale=cs2)
    return 1.0 if cs2 == 0 else float(gamma_quantile(percentile, 1.0 / cs2) * cs2)


_THRESHOLDS: dict[float, np.ndarray] = {}  # per percentile, k = 1 .. the largest top asked so far


def _poisson_thresholds(percentile: float, top: int) -> np.ndarray:
    """Means at which the Poisson ``percentile`` steps up, for k = 1 .. at least ``top``: it is >= k
    exactly when P(X <= k - 1) = Q(k, mean) < percentile, i.e. when mean exceeds the
    (1 - percentile) quantile of a gamma distribution of shape k. Kept per percentile and extended
    when a larger ``top`` is asked (a plan asks several)."""
    known = _THRESHOLDS.get(percentile, np.empty(0))
    if known.size < top:
        extra = gamma_quantile(1.0 - percentile, np.arange(known.size + 1, top + 1, dtype=float))
        if len(_THRESHOLDS) >= 64:
            _THRESHOLDS.pop(next(iter(_THRESHOLDS)))
        known = _THRESHOLDS[percentile] = np.concatenate([known, extra])
        known.flags.writeable = False
    return known


def _poisson_quantile(percentile: float, mean: np.ndarray) -> np.ndarray:
    """Smallest k with P(X <= k) >= percentile for X ~ Poisson(mean), vectorised (= scipy's ppf)."""
    high = float(np.max(mean, initial=0.0))
    top = int(2 ** np.ceil(np.log2(high + 10 * np.sqrt(high) + 20)))  # far beyond the quantile
    return np.searchsorted(_poisson_thresholds(percentile, top), mean, side="left").astype(float)


def _specs(argument: str, value: object, catalog: str, resolve) -> list[dict[str, Any]]:
    """The resolved specs of ``value``; None: every row of the ``catalog`` CSV."""
    if value is None:  # every catalog row, validated once (no lookup by name)
        value = load_rows(catalog)
    elif is_pandas(value, "DataFrame"):  # e.g. a filtered catalog: one spec per row
        value = [row for _, row in value.iterrows()]
    elif isinstance(value, (str, dict)) or is_pandas(value, "Series"):
        value = [value]
    elif not isinstance(value, Iterable):
        raise ValueError(f"{argument} must be None, a name, a spec or a list of them, got {value!r}")
    specs = [resolve(v) for v in value]
    if not specs:
        raise ValueError(f"{argument} must name at least one entry")
    return specs


def _degrees(tensor_parallel: Iterable[int] | int) -> list[int]:
    if isinstance(tensor_parallel, (int, np.integer)):
        tensor_parallel = (tensor_parallel,)
    if isinstance(tensor_parallel, (str, bytes)) or not hasattr(tensor_parallel, "__iter__"):
        raise ValueError(f"tensor_parallel must be an integer or a list of them (1..64), got {tensor_parallel!r}")
    tps = sorted({check_int("tensor_parallel", tp, low=1, high=64) for tp in tensor_parallel})
    if not tps:
        raise ValueError("tensor_parallel must list at least one degree (1..64)")
    return tps

"""Confidence intervals for the difference of a pair of runs' metrics (b - a); :mod:`toolkit._interop.compare`
says when each is used."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__: list[str] = []

NAN = math.nan


def welch(repeats: list[pd.DataFrame], column: str, confidence: float) -> tuple[float, float, str]:
    """Welch's t interval of b - a over the runs' repeats of ``column``, with the method's name (NaN if
    a run has fewer than two repeats)."""
    values = [r[column].dropna().to_numpy(dtype=float) if column in r.columns else np.array([]) for r in repeats]
    if min(v.size for v in values) < 2:
        return NAN, NAN, "no interval: fewer than two repeats in a run and no per-request records"
    if all(np.ptp(v) == 0 for v in values):  # constant repeats: the interval is the difference itself
        d = float(values[1][0] - values[0][0])
        return d, d, "Welch t over repeats (the repeats do not vary)"
    ci = stats.ttest_ind(values[1], values[0], equal_var=False).confidence_interval(confidence_level=confidence)
    return float(ci.low), float(ci.high), "Welch t over repeats"


def bootstrap_difference(lanes, stem, p, confidence, n_resamples, rng) -> tuple[float, float]:
    """Percentile-bootstrap interval of b - a for the ``p``-th percentile of ``stem`` over the requests."""
    if stem == "itl":
        gaps = [[np.asarray(g, dtype=float) for g in x["itl_ms"] if isinstance(g, list)] for x in lanes]
        if min(sum(g.size for g in gs) for gs in gaps) < 2:
            return NAN, NAN

        def pooled(ib, ia):
            b = np.concatenate([gaps[1][i] for i in ib] or [np.array([NAN])])
            a = np.concatenate([gaps[0][i] for i in ia] or [np.array([NAN])])
            return np.percentile(b, p) - np.percentile(a, p)

        data = (np.arange(len(gaps[1])), np.arange(len(gaps[0])))
        res = stats.bootstrap(data, pooled, vectorized=False, n_resamples=n_resamples, confidence_level=confidence,
                              method="percentile", random_state=rng)  # fmt: skip
        return float(res.confidence_interval.low), float(res.confidence_interval.high)
    values = [x[f"{stem}_ms"].dropna().to_numpy(dtype=float) for x in lanes]
    if min(v.size for v in values) < 2:
        return NAN, NAN

    def diff(b, a, axis=-1):
        return np.percentile(b, p, axis=axis) - np.percentile(a, p, axis=axis)

    res = stats.bootstrap((values[1], values[0]), diff, vectorized=True, n_resamples=n_resamples,
                          confidence_level=confidence, method="percentile", random_state=rng)  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def agresti_caffo(ok: list[float], failed: list[float], confidence: float) -> tuple[float, float]:
    """The Agresti-Caffo interval of the difference of two success rates (b - a)."""
    if any(_nan(v) for v in (*ok, *failed)) or min(o + f for o, f in zip(ok, failed, strict=True)) <= 0:
        return NAN, NAN
    p = [(o + 1) / (o + f + 2) for o, f in zip(ok, failed, strict=True)]
    n = [o + f + 2 for o, f in zip(ok, failed, strict=True)]
    se = math.sqrt(p[0] * (1 - p[0]) / n[0] + p[1] * (1 - p[1]) / n[1])
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    d = p[1] - p[0]
    return d - z * se, d + z * se


def hit_rate_difference(la, lb, lanes, confidence, n_resamples, rng):
    """Both runs' prompt-cache hit rates and an interval for b - a (bootstrap over requests where
    both carry cached-token counts; else the level totals and no interval)."""
    cached = [x.dropna(subset=["cached_tokens", "prompt_tokens"]) if len(x) else x for x in lanes]
    if all(len(c) >= 2 and c["prompt_tokens"].sum() > 0 for c in cached):
        rates = [float(c["cached_tokens"].sum() / c["prompt_tokens"].sum()) for c in cached]
        pairs = [np.vstack([c["cached_tokens"].to_numpy(float), c["prompt_tokens"].to_numpy(float)]) for c in cached]

        def ratio(ib, ia):
            b, a = pairs[1][:, ib], pairs[0][:, ia]
            return b[0].sum() / b[1].sum() - a[0].sum() / a[1].sum()

        data = (np.arange(pairs[1].shape[1]), np.arange(pairs[0].shape[1]))
        res = stats.bootstrap(data, ratio, vectorized=False, n_resamples=n_resamples, confidence_level=confidence,
                              method="percentile", random_state=rng)  # fmt: skip
        ci = res.confidence_interval
        return rates[0], rates[1], float(ci.low), float(ci.high), "bootstrap over requests (cached / prompt tokens)"
    column = (
        "prefix_hit_rate"
        if not (_nan(la["prefix_hit_rate"]) or _nan(lb["prefix_hit_rate"]))
        else "provider_cached_rate"
    )
    return la[column], lb[column], NAN, NAN, f"no interval: {column} from the level totals only"


def _nan(value: Any) -> bool:
    try:
        return value is None or math.isnan(float(value))
    except (TypeError, ValueError):
        return True

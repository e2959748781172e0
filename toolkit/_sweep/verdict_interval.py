"""How far a level's batching elasticity can move from one run to the next: the verdict's interval.

The host's speed moves between the minutes at which two levels are measured (on this project's idle
2-core VM a decode step moved 6-13% from one half-minute to the next, 2026-12-04), and an elasticity
(:mod:`toolkit._sweep.levels`) is a ratio of two levels' lane times, so that drift moves it by
``ln(1 + drift) / ln(x_k / x_1)``: most at 2 in flight. With two or more repeats per level the drift
is measured: ``s`` is the pooled standard deviation of ``ln u`` over the repeats of every level (the
host's drift is the same whatever the level), and the level's elasticity (from the repeats' mean
``u``) carries the half-width ``t(0.975, df) * s * sqrt(1/n_k + 1/n_1) / ln(x_k / x_1)``, ``df`` the
pooled degrees of freedom. A verdict whose interval crosses a threshold reads ``inconclusive``: it
would flip from one run to the next.

The repeats measure that drift only if they are as far apart in time as the levels being compared:
repeats run back to back (seconds apart) agree to a percent or two while the levels they are
compared with ran minutes apart. A sweep's repeats are therefore passes over every level (every
level once, then every level again; :mod:`toolkit._sweep.plan`), and the report spreads its two
passes over the whole run (:func:`toolkit._sweep.result.combine_passes`), so that the spread of a
level's repeats is the between-pass variance, drift over minutes included. A speed change common to
a whole pass cancels from the elasticity and still widens ``s``; drift within a pass, between the
levels it compares, does not cancel and is of the same size over the same minutes, so the interval
errs on the wide side, as a verdict that must not flip between runs should.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

__all__: list[str] = []


def elasticity_ci95(runs: pd.DataFrame, levels: pd.DataFrame, keys: list[str], *, closed_loop: bool) -> np.ndarray:
    """Half-width of each level's elasticity 95% interval from the pooled spread of ``ln u`` over the
    repeats of all levels (module docstring); NaN for the first level and without repeats.

    ``runs`` are the level runs (one row per level and repeat, ``llm_ms_per_token``), ``levels``
    their aggregate in the same order of ``keys``, with ``in_flight``, ``lanes`` and
    ``achieved_concurrency``."""
    log_u = np.log(runs["llm_ms_per_token"].where(runs["llm_ms_per_token"] > 0))
    grouped = log_u.groupby([runs[k] for k in keys], sort=False, dropna=False)
    df = int((grouped.count() - 1).clip(lower=0).sum())
    out = np.full(len(levels), math.nan)
    if df < 1 or not len(levels):
        return out
    s = math.sqrt(float(grouped.var(ddof=1).mul(grouped.count() - 1).sum()) / df)
    n = grouped.count().to_numpy(dtype=float)  # same order as the levels (both sort=False)
    x = np.minimum(levels["in_flight"], levels["lanes"]) if closed_loop else levels["achieved_concurrency"]
    x = x.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = stats.t.ppf(0.975, df) * s * np.sqrt(1 / n + 1 / n[0]) / np.abs(np.log(x / x[0]))
    out[0] = math.nan
    return np.where(np.isfinite(out), out, math.nan)

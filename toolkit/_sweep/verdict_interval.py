"""How far a level's batching elasticity can move from one run to the next: the verdict's interval.

Within a run. Each repeat of a sweep is a pass over every level and has its own elasticity at each
level, against its own first level (:mod:`toolkit._sweep.levels`). ``s`` is the standard deviation of
those per-repeat elasticities pooled over every level but the first (each level about its own mean,
``df`` the pooled degrees of freedom); a level's elasticity, from the repeats' mean lane time (close
to the mean of its repeats' elasticities), has the standard error ``s / sqrt(n)`` over its ``n``
repeats. The spread is pooled in elasticity units because that is how it behaves: on an idle 2-core
VM one server's passes back to back can read 0.694 and 0.594 at 2 in flight and 0.739 and 0.702 at
8 while their first levels agree to 3%. What moves from pass to pass is
how well the server batches, not only the host's speed; a speed change common to a whole pass
cancels from each pass's elasticity. An earlier interval, the spread of ``ln u`` divided by
``ln(x_k / x_1)`` (a drift in the host's speed), came out a quarter as wide at 8 in flight, and 27%
of its intervals missed the mean of the other idle runs (docs/methodology/observations.md).

Between runs. Runs still differ by more than their own passes say: over the idle runs in
``verdict_runs.csv`` (package data; each run its own server, two passes), weighting each run by its
own standard error, Cochran's Q is 45, 22 and 17 at 2, 4 and 8 in flight on 8 degrees of freedom
each (about 8 if the runs agreed within their errors); two passes that happen to agree closely give
a run an interval that the next run misses. The between-run standard deviation ``tau`` is the
DerSimonian-Laird random-effects estimate over those runs (DerSimonian and Laird, "Meta-analysis in
clinical trials", Controlled Clinical Trials 7, 1986), one ``tau`` for every level, each level with
its own mean, with one degree of freedom per run but one: 0.018 (8 degrees of freedom). A level's 95% half-width combines both in
quadrature, ``t(0.975, nu) * sqrt(s**2 / n + tau**2)``, ``nu`` by Welch-Satterthwaite (GUM, JCGM
100:2008, G.4). It is an interval for the server's elasticity, not only this run's, and a verdict
whose interval crosses a threshold reads ``inconclusive`` rather than flip between runs. ``tau`` was
measured on one host and one server: a server whose runs agree better is judged conservatively.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pandas as pd
from scipy import stats

from toolkit._data import load_csv
from toolkit._stats import pooled_sd

__all__: list[str] = []

RECORDED_RUNS = "verdict_runs.csv"


def elasticity_ci95(runs: pd.DataFrame, levels: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Half-width of each level's elasticity 95% interval: the spread of its repeats' elasticities
    pooled over the levels, and the spread between runs (module docstring); NaN for the first level
    and without repeats.

    ``runs`` are the level runs (one row per level and repeat, with each repeat's ``elasticity``),
    ``levels`` their aggregate in the same order of ``keys``."""
    e = runs["elasticity"].astype(float)
    grouped = e.where(np.isfinite(e)).groupby([runs[k] for k in keys], sort=False, dropna=False)
    n = grouped.count().to_numpy(dtype=float)  # same order as the levels (both sort=False)
    s, df = pooled_sd(grouped)
    if df < 1:
        return np.full(len(levels), math.nan)
    tau, df_tau = between_runs_sd()
    with np.errstate(divide="ignore", invalid="ignore"):
        out = combined_ci95(s / np.sqrt(n), df, tau, df_tau)
    out[0] = math.nan
    return np.where(np.isfinite(out), out, math.nan)


def combined_ci95(se_within: np.ndarray, df: int, tau: float, df_tau: int) -> np.ndarray:
    """95% half-widths of a within-run standard error (``df`` degrees of freedom) and a between-run
    standard deviation ``tau`` (``df_tau``) combined in quadrature, with Welch-Satterthwaite degrees
    of freedom."""
    se_within = np.asarray(se_within, dtype=float)
    variance = se_within**2 + tau**2
    with np.errstate(divide="ignore", invalid="ignore"):
        nu = variance**2 / (se_within**4 / df + (tau**4 / df_tau if df_tau else 0.0))
        return np.where(variance == 0, 0.0, stats.t.ppf(0.975, nu) * np.sqrt(variance))


@cache
def between_runs_sd() -> tuple[float, int]:
    """The between-run standard deviation of an elasticity and its degrees of freedom (runs - 1),
    from the passes recorded in ``verdict_runs.csv`` (module docstring)."""
    rows = load_csv(RECORDED_RUNS)
    estimates, standard_errors, levels = [], [], []
    for _, run in rows.groupby("run", sort=False):
        s, _ = pooled_sd(run.groupby("in_flight")["elasticity"])
        for level, part in run.groupby("in_flight"):
            estimates.append(part["elasticity"].mean())
            standard_errors.append(s / math.sqrt(len(part)))
            levels.append(level)
    tau2 = dersimonian_laird_tau2(np.array(estimates), np.array(standard_errors), np.array(levels))
    return math.sqrt(tau2), int(rows["run"].nunique()) - 1


def dersimonian_laird_tau2(estimates: np.ndarray, standard_errors: np.ndarray, groups: np.ndarray) -> float:
    """DerSimonian-Laird between-study variance, one for all ``groups``, each group with its own mean:
    ``tau2 = max(0, (sum Q - sum(k - 1)) / sum C)`` over the groups (:func:`cochran_q`)."""
    q = c = dof = 0.0
    for group in np.unique(groups):
        in_group = groups == group
        q_group, c_group = cochran_q(estimates[in_group], standard_errors[in_group])
        q, c, dof = q + q_group, c + c_group, dof + in_group.sum() - 1
    return max(0.0, (q - dof) / c) if c > 0 else 0.0


def cochran_q(estimates: np.ndarray, standard_errors: np.ndarray) -> tuple[float, float]:
    """Cochran's Q of estimates about their inverse-variance weighted mean, and DerSimonian-Laird's
    ``C``: with ``w = 1 / se**2``, ``Q = sum(w (y - ybar_w)**2)``, ``C = sum(w) - sum(w**2) / sum(w)``.
    Q is about ``k - 1`` for ``k`` estimates that differ only by their standard errors."""
    w = 1 / np.asarray(standard_errors, dtype=float) ** 2
    y = np.asarray(estimates, dtype=float)
    q = float((w * (y - (w * y).sum() / w.sum()) ** 2).sum())
    return q, float(w.sum() - (w**2).sum() / w.sum())

"""Fit the serving model's efficiencies to TTFT and TPOT observations (:mod:`toolkit._calibration.observations`).

Bounded least squares of relative residuals, restarted from several corners because max(memory,
compute) has kinks; standard errors, correlations and the condition number come from the Jacobian.

The requests of one profile wave share its conditions (the host's state, the server's slots), so
they are not independent observations: the standard errors of a profile's fit are clustered by wave
(the sandwich estimator of Liang and Zeger, 1986, with clusters the waves), and the larger of that
and the plain estimate is reported. A run's between-wave spread, which is what moves a fit from one
run to the next, then shows in its intervals instead of shrinking with the requests per wave.

The host's speed also drifts on a scale longer than a wave: on an idle 2-core VM the prefill and
batch cells of one pass over the design (about 15 s) run fast or slow together (their per-pass times
correlate 0.5-0.9; docs/methodology/observations.md), so the waves of one pass are not independent either, and a fit's rates move with the pass's speed. A profile's passes (its
``repeat``) each get a speed factor, estimated from the wave residuals by a two-way analysis of
variance (cell by pass, the random-effects moment estimator); its variance, propagated through the
fit as a common shift of every residual of the pass, is added to the wave-clustered covariance. A
common speed factor moves the rates (``mbu``, ``mfu``) and the overheads; it cancels from ratios
such as ``batched_mbu_factor`` and ``serial_share``. None of the cheap host probes tried then (a
single-thread vector loop, a 64 MiB copy, small matrix products, timed before and after each pass)
tracked that factor (correlations 0.5 at most, removing under a tenth of the cells' variance), so
the drift is measured in the profile's own cells rather than corrected by a probe.

That estimate covers the drift over the time the passes span. Passes run back to back (about a
minute for three) miss the drift over several minutes, which moves consecutive report runs apart by
several of their intervals (``mbu`` 0.322 +- 0.014 against 0.360 +- 0.011); the report therefore
spreads its profile's passes over the whole run, between the sweep's passes
(:func:`toolkit._sweep.profile_cells.combine_passes`). A parameter that fits to a bound is held there
(:mod:`toolkit._calibration.calibrate`): its linearised interval would be cut off by the bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from toolkit._calibration.step_model import predict_ms
from toolkit._model.cost import CostModel
from toolkit._model.efficiency import TUNABLE_EFFICIENCIES

__all__: list[str] = []

# Every tunable efficiency of the cost model can be fitted; a sweep identifies these four by default.
PARAMETERS = tuple(TUNABLE_EFFICIENCIES)
DEFAULT_FIT = ("mbu", "mfu", "step_overhead_ms", "request_overhead_ms")
# A profile also varies the batch (how memory and compute add up; steps of one token against several:
# batched_mbu_factor; prompts, one row of logits, against batches, one a sequence: logit_batched_reads;
# a batch above four that is not a multiple of four: logit_remainder_reads); its mixed cells, prompts
# among decodes, the pairs a unified KV masks (masked_pair_share).
PROFILE_FIT = (*DEFAULT_FIT, "serial_share", "batched_mbu_factor", "logit_batched_reads", "logit_remainder_reads")
MIXED_FIT = (*PROFILE_FIT, "masked_pair_share")
# A fitted parameter whose standard error exceeds this share of its value is not identified by the
# data; calibrate() holds it at its default rather than let it trade against the others.
MAX_RELATIVE_SE = 0.25
# Fit bounds from the cost model's ranges: an open lower bound of 0 becomes a small positive floor
# (the serving model rejects a utilisation of 0); an open upper bound is infinite.
BOUNDS = {
    name: (low if low_inclusive else {"mbu": 1e-3, "mfu": 1e-4}.get(name, 1e-3), math.inf if high is None else high)
    for name, (low, high, low_inclusive) in TUNABLE_EFFICIENCIES.items()
}
# Starting utilisations besides the catalog defaults: max(memory, compute) has kinks, so the fit is
# restarted from each corner of a coarse grid and the best solution kept.
_START_FRACTIONS = (0.05, 0.5)


def fit(
    obs: pd.DataFrame,
    build: Callable[..., CostModel],
    defaults: Mapping[str, float],
    names: Sequence[str],
    bounds: Mapping[str, tuple[float, float]],
    prefill_breaks: Sequence[int] = (),
    prefill_starts: Sequence[int] = (),
    ubatch_tokens: int | None = None,
) -> dict[str, object]:
    """Bounded least squares of the relative residuals ``(predicted - measured) / measured``.

    ``build(**params)`` returns a CostModel; ``names`` are the parameters fitted, the others stay at
    ``defaults``. Returns the parameters, their standard errors (NaN where the data do not constrain
    a parameter; clustered by ``obs["wave"]`` where present, module docstring), the relative
    residuals and the RMS per kind.
    """
    measured = obs["measured_ms"].to_numpy()
    low = np.array([bounds[n][0] for n in names])
    high = np.array([bounds[n][1] for n in names])

    def params_of(x: np.ndarray) -> dict[str, float]:
        return {**defaults, **dict(zip(names, map(float, x)))}

    columns = {name: obs[name].to_numpy() for name in obs.columns}

    def residuals(x: np.ndarray) -> np.ndarray:
        return (
            predict_ms(build(**params_of(x)), columns, prefill_breaks, prefill_starts, ubatch_tokens) / measured - 1.0
        )

    best = None
    for x0 in _starts(defaults, names, low, high):
        result = least_squares(residuals, x0, bounds=(low, high), x_scale=np.maximum(np.abs(x0), 1e-3))
        if best is None or result.cost < best.cost:
            best = result
    params = params_of(best.x)
    resid = best.fun
    groups = obs["wave"].to_numpy() if "wave" in obs.columns else None
    passes = obs["repeat"].to_numpy() if "repeat" in obs.columns and groups is not None else None
    cells = (
        obs[["cell", "batch", "prompt_tokens_target", "kind"]].astype(str).agg("/".join, axis=1).to_numpy()
        if "cell" in obs.columns
        else None
    )
    se, corr, cond = _uncertainty(best.jac, resid, best.x, groups, passes, cells)
    sensitive = np.linalg.norm(best.jac, axis=0) > 1e-9
    return {
        "params": params,
        "se": dict(zip(names, se)),
        # the residuals move with the parameter (an exactly determined fit has no standard error
        # but is still identified)
        "constrained": dict(zip(names, map(bool, sensitive))),
        "max_abs_correlation": corr,
        "condition_number": cond,
        "residuals": resid,
        "rms": float(np.sqrt(np.mean(resid**2))),
        "rms_by_kind": {
            kind: float(np.sqrt(np.mean(resid[obs["kind"].to_numpy() == kind] ** 2)))
            for kind in ("ttft", "tpot")
            if (obs["kind"] == kind).any()
        },
    }


def _starts(defaults: Mapping[str, float], names: Sequence[str], low: np.ndarray, high: np.ndarray):
    first = np.array([defaults[n] for n in names])
    yield np.clip(first, low, high)
    fractions = [i for i, n in enumerate(names) if n in ("mbu", "mfu")]
    for corner in np.ndindex(*(len(_START_FRACTIONS),) * len(fractions)):
        x0 = first.copy()
        for i, k in zip(fractions, corner):
            x0[i] = _START_FRACTIONS[k]
        if not np.array_equal(x0, first):
            yield np.clip(x0, low, high)


def residuals_at(
    obs: pd.DataFrame,
    model: CostModel,
    prefill_breaks: Sequence[int] = (),
    prefill_starts: Sequence[int] = (),
    ubatch_tokens: int | None = None,
) -> dict[str, object]:
    """The fit's summary when nothing is fitted: relative residuals of ``model`` as it is."""
    predicted = predict_ms(model, obs, prefill_breaks, prefill_starts, ubatch_tokens)
    resid = predicted / obs["measured_ms"].to_numpy() - 1.0
    kinds = obs["kind"].to_numpy()
    return {
        "se": {},
        "max_abs_correlation": math.nan,
        "condition_number": math.nan,
        "residuals": resid,
        "rms": float(np.sqrt(np.mean(resid**2))),
        "rms_by_kind": {
            k: float(np.sqrt(np.mean(resid[kinds == k] ** 2))) for k in ("ttft", "tpot") if (kinds == k).any()
        },
    }


def _uncertainty(
    jac: np.ndarray,
    resid: np.ndarray,
    x: np.ndarray,
    groups: np.ndarray | None = None,
    passes: np.ndarray | None = None,
    cells: np.ndarray | None = None,
) -> tuple[np.ndarray, float, float]:
    """Linearised standard errors (NaN for a parameter the residuals do not depend on), the largest
    absolute correlation between two fitted parameters, and the condition number of the Jacobian
    scaled by the parameters (so that units do not count).

    With ``groups`` (one label per residual, more distinct labels than parameters) each standard
    error is the larger of the plain one and the one clustered by group, and the correlation is the
    clustered one; with ``passes`` and ``cells`` too the drift between passes is added
    (:func:`_drift`, module docstring)."""
    n, k = jac.shape
    se = np.full(k, np.nan)
    sensitive = np.linalg.norm(jac, axis=0) > 1e-9
    scaled = jac * np.where(x != 0, np.abs(x), 1.0)
    cond = float(np.linalg.cond(scaled)) if k else math.nan
    if n <= sensitive.sum() or not sensitive.any():
        return se, math.nan, cond
    j = jac[:, sensitive]
    sigma2 = float(resid @ resid) / (n - sensitive.sum())
    try:
        bread = np.linalg.inv(j.T @ j)
    except np.linalg.LinAlgError:
        return se, math.nan, math.inf
    cov = bread * sigma2
    variance = np.diag(cov)
    # a negative variance is the inverse of a numerically singular J'J (condition number about 1e9
    # and more), not a precise estimate: the parameter is not identified
    singular = np.diag(bread) < 0
    clustered = _clustered(bread, j, resid, groups)
    if clustered is not None:
        cov = clustered
        variance = np.maximum(variance, np.diag(clustered))
        drift = _drift(bread, j, resid, groups, passes, cells)
        if drift is not None:
            cov = cov + drift
            variance = variance + np.diag(drift)
    sd = np.where(singular, np.inf, np.sqrt(np.clip(variance, 0, None)))
    se[sensitive] = sd
    corr = math.nan
    own = np.sqrt(np.clip(np.diag(cov), 0, None))
    if sensitive.sum() > 1 and np.all(own > 0):
        c = cov / np.outer(own, own)
        corr = float(np.max(np.abs(c[~np.eye(len(own), dtype=bool)])))
    return se, corr, cond


def _clustered(bread: np.ndarray, j: np.ndarray, resid: np.ndarray, groups: np.ndarray | None) -> np.ndarray | None:
    """The cluster-robust covariance ``G/(G-1) B (sum_g s_g s_g') B`` with ``s_g`` the score
    ``J_g' r_g`` of group ``g`` and ``B = (J'J)^-1``; None without groups, or with no more groups
    than parameters (too few to estimate it)."""
    if groups is None:
        return None
    labels, index = np.unique(pd.Series(groups).fillna(-1).to_numpy(), return_inverse=True)
    g = len(labels)
    if g <= max(1, j.shape[1]):
        return None
    scores = np.zeros((g, j.shape[1]))
    np.add.at(scores, index, j * resid[:, None])
    return g / (g - 1) * bread @ (scores.T @ scores) @ bread


def _drift(
    bread: np.ndarray,
    j: np.ndarray,
    resid: np.ndarray,
    groups: np.ndarray,
    passes: np.ndarray | None,
    cells: np.ndarray | None,
) -> np.ndarray | None:
    """The covariance a speed factor per pass adds: ``sigma_p^2 B (sum_p u_p u_p') B`` with ``u_p``
    the sum of ``J``'s rows of pass ``p`` (a shift of all its residuals moves the fit by ``-B u_p``
    times the shift) and ``sigma_p^2`` the moment estimate ``(MS_pass - MS_error) / cells`` of the
    two-way table of wave-mean residuals (cell by pass), floored at 0. None without two passes and
    two cells, or with cells not measured in every pass."""
    if passes is None or cells is None:
        return None
    waves = pd.DataFrame({"wave": groups, "pass": passes, "cell": cells, "r": resid})
    table = waves.groupby(["wave", "pass", "cell"], dropna=False)["r"].mean().groupby(["cell", "pass"]).mean()
    table = table.unstack("pass")
    if table.shape[0] < 2 or table.shape[1] < 2 or table.isna().any().any():
        return None
    c, p = table.shape
    values = table.to_numpy()
    effects = values.mean(axis=0) - values.mean()
    error = values - values.mean(axis=1, keepdims=True) - effects[None, :]
    ms_pass = c * float(effects @ effects) / (p - 1)
    ms_error = float((error**2).sum()) / ((c - 1) * (p - 1))
    sigma2 = max(ms_pass - ms_error, 0.0) / c
    _, index = np.unique(pd.Series(passes).astype(str).to_numpy(), return_inverse=True)
    u = np.zeros((index.max() + 1, j.shape[1]))
    np.add.at(u, index, j)
    return sigma2 * bread @ (u.T @ u) @ bread

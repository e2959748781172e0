"""Cells the fit does not describe: residuals per cell, outlying cells flagged, a fit without them.

The observations of a calibration come in cells that share their conditions: a profile's design
points (a decode at one context, a batch of ``b``, a prefill of ``p`` tokens, each its TTFT or its
step time) or a sweep's levels. A cell whose every repeat lies far off the fit (a server path the
cost model lacks, a host that throttled all through it) is no noise the standard errors cover: its
repeats agree, so it is not marked noisy, and as ordinary least-squares observations it pulls every
parameter toward it.

Each cell's mean relative residual is set against the other cells': its standardized residual is
``z = (mean_c - median) / scale``, ``scale = sqrt((1.4826 MAD)**2 + se_c**2)`` at least ``SCALE_FLOOR``,
where the median and the median absolute deviation (scaled to a normal's standard deviation) are over
the cells' means, which one outlying cell can neither shift nor inflate, and ``se_c`` is the cell's own
standard error. A cell with ``|z| > OUTLIER_Z`` is flagged.

An outlier pulls the ordinary fit toward itself, and the cells it drags off then hide it, so cells are
screened on a robust fit: the worst flagged cell gets weight 0 (where Tukey's biweight puts a residual
beyond its cutoff: iteratively reweighted least squares with weights of 0 or 1) and the fit is
repeated, until no cell left is flagged, setting aside at most half the cells.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

__all__: list[str] = []

# A cell this many standard deviations from the others is flagged: beyond 5 a normal's two tails
# hold 6e-7, so among the tens of cells of a profile a false flag is rare.
OUTLIER_Z = 5.0
# The smallest spread of the cells' mean residuals assumed (relative): noise-free data would
# otherwise flag a cell 1e-9 off.
SCALE_FLOOR = 1e-3
# Below this many cells the median absolute deviation says nothing; the cells are not screened.
MIN_CELLS = 5
_MAD_TO_SD = 1.4826


def cell_labels(obs: pd.DataFrame) -> np.ndarray:
    """Each observation's cell: a profile's ``cell b=<batch> p=<prompt tokens> <kind>``, a sweep's
    ``<kind> in_flight=<limit>``."""
    kind = obs["kind"].astype(str)
    if "cell" in obs.columns:
        batch = obs["batch"].astype(float).map("{:g}".format)
        prompt = obs["prompt_tokens_target"].astype(float).map("{:g}".format)
        return (obs["cell"].astype(str) + " b=" + batch + " p=" + prompt + " " + kind).to_numpy()
    return (kind + " in_flight=" + obs["in_flight"].astype(float).map("{:g}".format)).to_numpy()


def cell_table(labels: np.ndarray, residuals: np.ndarray, set_aside: list[str]) -> pd.DataFrame:
    """One row per cell: ``cell``, ``observations``, ``residual_mean`` (relative: predicted / measured
    - 1), ``residual_se`` (its standard error; NaN for one observation), ``z`` (standardized residual,
    module docstring; the median and spread from the cells not set aside) and ``outlier``."""
    frame = pd.DataFrame({"cell": labels, "residual": residuals})
    table = frame.groupby("cell", sort=False)["residual"].agg(
        observations="size", residual_mean="mean", residual_se="sem"
    )
    table = table.reset_index()
    kept = table.loc[~table["cell"].isin(set_aside), "residual_mean"].to_numpy()
    centre = float(np.median(kept))
    mad = _MAD_TO_SD * float(np.median(np.abs(kept - centre)))
    scale = np.maximum(np.sqrt(mad**2 + table["residual_se"].fillna(0.0) ** 2), SCALE_FLOOR)
    table["z"] = (table["residual_mean"] - centre) / scale
    table["outlier"] = (table["z"].abs() > OUTLIER_Z) & (len(table) >= MIN_CELLS)
    return table


def screen(
    labels: np.ndarray,
    first: tuple[dict[str, object], dict[str, str]],
    fit_without: Callable[[np.ndarray], tuple[dict[str, object], dict[str, str]]],
    residuals_at: Callable[[dict[str, float]], np.ndarray],
) -> tuple[tuple[dict[str, object], dict[str, str]], pd.DataFrame]:
    """The robust fit and the cell table at it (module docstring).

    ``first`` is the ordinary fit (result and held parameters), ``fit_without(mask)`` fits the
    observations where ``mask`` is True, ``residuals_at(params)`` gives every observation's relative
    residual at ``params``. The table's ``weight`` is 0 for a cell set aside, else 1.
    """
    fitted, set_aside = first, []
    cells = len(set(labels))
    while True:
        table = cell_table(labels, residuals_at(fitted[0]["params"]), set_aside)
        candidates = table[table["outlier"] & ~table["cell"].isin(set_aside)]
        if candidates.empty or 2 * (len(set_aside) + 1) > cells:
            break
        set_aside.append(str(candidates.loc[candidates["z"].abs().idxmax(), "cell"]))
        fitted = fit_without(~np.isin(labels, set_aside))
    table["weight"] = np.where(table["cell"].isin(set_aside), 0.0, 1.0)
    return fitted, table

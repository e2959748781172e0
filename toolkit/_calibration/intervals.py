"""Predictive intervals: a calibration's uncertainty carried through the simulation.

A calibrated prediction is a single number, but the fitted parameters are known only to their
standard errors, and near saturation a small error in service time is a large error in waiting.
``simulate_intervals`` and ``predict_sweep_intervals`` draw ``draws`` parameter sets from the fit's
normal approximation (each fitted parameter, ``fitted`` in the row, from a normal with its value and
its ``*_fit_se``: the fit's own standard error, clustered by wave, with the drift between the
profile's passes added, :mod:`toolkit._calibration.fit`), clipped to the parameter's range, predict
each with common random numbers (the same seed: the same arrivals and lengths, so the draws differ
only by the parameters), and take each predicted figure's ``(1 - level) / 2`` and ``(1 + level) / 2``
quantiles over the draws, widened where needed to hold the point prediction (at the fitted values).

Two more sources are drawn with them, so that the interval describes the server and not only the fit.
A parameter ``calibrate`` held (``held``, ``held_reason``) is not known exactly: held at its default
because the data do not identify it, it is drawn from a normal about the default with a standard
deviation of ``MAX_RELATIVE_SE`` (25%) of it, the largest relative error a fitted parameter may have
and still count as identified (:mod:`toolkit._calibration.fit`), so a held one is no better known. One
held at a bound stays there in every draw: the fit pulled past the bound, so the data put the value at
the bound or beyond it, not inside the range, and moving it inward without refitting the others would
make every step faster (``serial_share`` below 1) or slower than the profile measured, an interval on
one side of the point. And
the host's speed drifts between runs by more than the spread between one profile's passes (which the
fit's standard errors carry): each draw scales every step by a common factor ``1 + HOST_DRIFT z``
(``mbu`` and ``mfu`` divided by it, the overheads multiplied), ``HOST_DRIFT`` = 8.7% being the
coefficient of variation of the profile's decode step between passes minutes apart on an idle 2-core
host, in the project's repeatability record (reports/bench/replay_repeat.json,
docs/methodology/trust.md), whose TTFT p50 varied 14% between replays.

The parameters are drawn independently: the calibration row keeps their standard errors, not their
covariance (``max_abs_correlation`` says how far apart that can be). Parameters that trade against
each other (a lower ``mbu`` with a higher ``step_overhead_ms`` fits the same steps) then spread the
predictions more than the fit allows inside the measured range: the intervals err wide. With the
default ``DRAWS`` = 20 (chosen for cost: each draw is one more simulation) the ends of a 90% interval
sit between the two smallest and the two largest draws, so they move with the seed: read the
interval as the size of the uncertainty and how it grows with load, not as a precise tail.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pandas as pd

from toolkit._args import check_int, check_number
from toolkit._calibration.fit import BOUNDS, MAX_RELATIVE_SE
from toolkit._calibration.predict import predict_sweep
from toolkit._model.memory import efficiency_value
from toolkit._queueing.simulator import simulate

__all__ = ["predict_sweep_intervals", "simulate_intervals"]

DRAWS = 20
LEVEL = 0.9
# the host's run-to-run drift in step time, relative (module docstring: reports/bench/replay_repeat.json)
HOST_DRIFT = 0.087
# a drawn efficiency is kept inside (0, 1]; an overhead at or above 0
_FRACTIONS = ("mbu", "mfu", "serial_share", "batched_mbu_factor", "tp_mbu_factor")
_SIMULATED = [f"{m}_{p}_s" for m in ("queue_wait", "ttft", "tpot", "e2e") for p in ("mean", "p50", "p95", "p99")]
_SWEPT = ["wall_s", "dec_tok_s", "ttft_p50_ms", "tpot_p50_ms"]


def _row(calibration: object) -> pd.Series:
    if isinstance(calibration, pd.DataFrame):
        if len(calibration) != 1:
            raise ValueError(f"calibration must be one row (the frame calibrate() returns), got {len(calibration)}")
        return calibration.iloc[0]
    if isinstance(calibration, pd.Series | dict):
        return pd.Series(calibration)
    raise ValueError("calibration must be the row calibrate() returns (a one-row DataFrame, Series or dict)")


def parameter_draws(calibration: object, *, draws: int, seed: int) -> Iterator[pd.Series]:
    """``draws`` copies of the calibration row with each fitted parameter drawn from a normal with its
    value and ``*_fit_se``, each one held at its default from its prior and every step scaled by a host drift
    (module docstring); the measured range is left out of the copies, so that only the point
    prediction reports extrapolation."""
    row = _row(calibration)
    names = [n for n in str(row.get("fitted", "")).split(",") if n]
    se = {n: float(row.get(f"{n}_fit_se", row.get(f"{n}_se", math.nan))) for n in names}
    names = [n for n in names if math.isfinite(se[n]) and se[n] > 0]
    if not names:
        raise ValueError("calibration has no fitted parameter with a standard error (fitted, *_fit_se): no interval")
    held = _held(row)
    base = row.drop([k for k in row.index if str(k).startswith("valid_")])
    rng = np.random.default_rng(seed)
    extra = np.random.default_rng([seed, 1])  # the held parameters and the drift: the fitted draws stay as they were
    for _ in range(draws):
        drawn = base.copy()
        for name, z in zip(names, rng.standard_normal(len(names)), strict=True):
            drawn[name] = float(row[name]) + z * se[name]
        for name, (centre, scale), z in zip(held, held.values(), extra.standard_normal(len(held)), strict=True):
            drawn[name] = centre + z * scale
        drift = max(1.0 + HOST_DRIFT * extra.standard_normal(), 0.5)
        for name in drawn.index.intersection(list(BOUNDS)):
            value = float(drawn[name])
            value = (
                value / drift if name in ("mbu", "mfu") else value * drift if name.endswith(("_ms", "_us")) else value
            )
            drawn[name] = min(max(value, 1e-4), 1.0) if name in _FRACTIONS else max(value, 0.0)
        yield drawn


def _held(row: pd.Series) -> dict[str, tuple[float, float]]:
    """The prior of each parameter held at its default (module docstring): a normal's centre and
    standard deviation; one held at a bound has none and stays there."""
    priors = {}
    for reason in filter(None, str(row.get("held_reason", "")).split("; ")):
        name = reason.split(" held at", 1)[0]
        if name not in BOUNDS or name not in row.index or "bound" in reason:
            continue
        priors[name] = (float(row[name]), MAX_RELATIVE_SE * abs(float(efficiency_value(name))))
    return priors


def _bounds(point: pd.DataFrame, drawn: list[pd.DataFrame], columns: list[str], level: float) -> pd.DataFrame:
    out = point.copy()
    for column in (c for c in columns if c in point.columns):
        values = np.array([d[column].to_numpy(dtype=float) for d in drawn])
        low, high = np.nanquantile(values, [(1 - level) / 2, (1 + level) / 2], axis=0)
        centre = point[column].to_numpy(dtype=float)
        out[f"{column}_low"] = np.fmin(low, centre)
        out[f"{column}_high"] = np.fmax(high, centre)
    return out.assign(interval_level=level, interval_draws=len(drawn))


def _checked(draws: int, level: float, seed: int) -> tuple[int, float]:
    check_int("seed", seed, low=0)
    draws = check_int("draws", draws, low=2, high=10_000)
    level = check_number("level", level, low=0, high=1, low_inclusive=False, high_inclusive=False)
    return draws, level


def simulate_intervals(
    model: object = None,
    gpu: object = None,
    quant: object = None,
    *,
    calibration: object,
    draws: int = DRAWS,
    level: float = LEVEL,
    seed: int = 0,
    **simulate_args: object,
) -> pd.DataFrame:
    """:func:`toolkit.simulate`'s summary with a predictive interval for each latency figure.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As for :func:`toolkit.simulate`.
    calibration : DataFrame, Series or dict
        The row of :func:`toolkit.calibrate` (its ``fitted`` parameters and their ``*_fit_se``).
    draws : int
        Parameter sets drawn (2 to 10,000; default 20, module docstring).
    level : float
        The interval's coverage, in (0, 1) (default 0.9).
    seed : int
        Seed of the parameter draws and of every simulation (common random numbers).
    **simulate_args
        Every other argument of :func:`toolkit.simulate` (``arrival_rate``, ``trace``, ...).

    Returns
    -------
    pandas.DataFrame
        The point prediction's ``summary`` (at the fitted values; ``extrapolated`` where its
        requests leave the calibration's measured range) with ``<figure>_low`` and ``<figure>_high``
        for each ``queue_wait``/``ttft``/``tpot``/``e2e`` mean, p50, p95 and p99 (s; the interval
        always holds the point), ``interval_level`` and ``interval_draws``.
    """
    draws, level = _checked(draws, level, seed)
    point = simulate(model, gpu, quant, calibration=calibration, seed=seed, **simulate_args).summary
    drawn = [
        simulate(model, gpu, quant, calibration=row, seed=seed, **simulate_args).summary
        for row in parameter_draws(calibration, draws=draws, seed=seed)
    ]
    return _bounds(point, drawn, _SIMULATED, level)


def predict_sweep_intervals(
    model: object,
    gpu: object,
    quant: object,
    *,
    calibration: object,
    draws: int = DRAWS,
    level: float = LEVEL,
    seed: int = 0,
    **sweep_args: object,
) -> pd.DataFrame:
    """:func:`toolkit.predict_sweep`'s levels with a predictive interval for each swept figure.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As for :func:`toolkit.predict_sweep`.
    calibration : DataFrame, Series or dict
        The row of :func:`toolkit.calibrate` (its ``fitted`` parameters and their ``*_fit_se``).
    draws : int
        Parameter sets drawn (2 to 10,000; default 20, module docstring).
    level : float
        The interval's coverage, in (0, 1) (default 0.9).
    seed : int
        Seed of the parameter draws (>= 0).
    **sweep_args
        :func:`toolkit.predict_sweep`'s other arguments (``prompt_tokens``, ``output_tokens``,
        ``lanes``, ``limits``, ...).

    Returns
    -------
    pandas.DataFrame
        :func:`toolkit.predict_sweep`'s levels plus ``<column>_low`` and ``<column>_high`` for
        ``wall_s``, ``dec_tok_s``, ``ttft_p50_ms`` and ``tpot_p50_ms`` (same units; the interval
        always holds the point), ``interval_level`` and ``interval_draws``.
    """
    draws, level = _checked(draws, level, seed)
    point = predict_sweep(model, gpu, quant, calibration=calibration, **sweep_args)
    drawn = [
        predict_sweep(model, gpu, quant, calibration=row, **sweep_args)
        for row in parameter_draws(calibration, draws=draws, seed=seed)
    ]
    return _bounds(point, drawn, _SWEPT, level)

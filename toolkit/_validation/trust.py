"""Can the serving model be trusted on this server? Calibrate on a profile, predict what was held out.

The loop, in order:

1. ``calibrate`` fits the efficiencies to a :func:`toolkit.profile` of the server (its designed
   cells, noisy ones left out); every parameter is identified or held (at a bound it fitted to, or at
   its default), with the reason.
2. The calibrated model predicts every level of a concurrency sweep of the same server (none of
   which the fit saw) with the simulator, each level with its own lanes' token counts.
3. It predicts a replay of a production-trace slice (:func:`toolkit.replay_trace`): the simulator is
   given the requests as the server saw them (send times, the server's prompt and output counts) and
   the percentiles of TTFT, TPOT and E2E and the achieved output throughput are compared. Given the
   profile passes measured right before and right after the replay, the replay is predicted by the
   model calibrated on those two: the server's speed moves by about 10% between minutes on this
   project's host, and at the replay's load a queue amplifies that about 2.5 times
   (:mod:`toolkit._validation.replay_drift`), so the passes that bracket the replay measure the
   server it ran on best. Calibrated on each of them alone, the model shows how far that speed
   moved across the replay.

A fit from a busy host is not presented (:mod:`toolkit._sweep.host_state`): the check returns the
reason instead of the numbers, so that nothing downstream can draw a conclusion from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from toolkit._calibration.calibrate import accuracy, calibrate
from toolkit._calibration.fit import predict_ms
from toolkit._calibration.intervals import LEVEL
from toolkit._calibration.observations import observations
from toolkit._model.serving import cost_model
from toolkit._validation.closed_loop import _predict, _Recorded
from toolkit._validation.replay_check import REPLAY_METRICS, _replay_comparison, replay_intervals
from toolkit._validation.replay_drift import bracket, cell_change, drift_clause

__all__: list[str] = []

# The accuracy the model must reach on held-out data to be called trustworthy for a server: median
# |error| over the sweep's output tokens/s and TPOT, and over the replay's p50 and p90 of TTFT, TPOT
# and E2E (issue 16).
TRUSTED_MEDIAN_ERROR = 0.15
FITTED = "fitted on the profile"


@dataclass(frozen=True)
class TrustCheck:
    """The outcome of :func:`trust_check`.

    Attributes
    ----------
    calibration : pandas.DataFrame or None
        The row of :func:`toolkit.calibrate` fitted on the profile (None when not presented).
    sweep_accuracy : pandas.DataFrame or None
        :func:`toolkit.accuracy` of every sweep level (all held out), with ``calibration``: ``none``
        (the default efficiencies) or ``fitted on the profile``.
    cell_fit : pandas.DataFrame or None
        How the calibrated model reproduces the profile it was fitted to (:func:`cell_fit`).
    replay_accuracy : pandas.DataFrame or None
        One row per metric and percentile: ``metric`` (``ttft_ms``, ``tpot_ms``, ``e2e_ms``,
        ``output_tok_s``), ``percentile`` (50, 90; NaN for the throughput), ``predicted``,
        ``measured``, ``rel_err``, and ``rel_err_low``/``rel_err_high``, its 95% interval over the
        replayed requests (NaN for the throughput); ``interval_low``/``interval_high``, the
        predictive interval of ``predicted`` over the fit's parameter draws (``LEVEL``, 90%), and
        ``inside``, whether ``measured`` lies in it (:func:`toolkit._validation.replay_check.replay_intervals`).
    sweep_median_error, replay_median_error : float
        Median |rel_err| over the sweep's ``dec_tok_s`` and ``tpot_ms``, and over the replay's
        latency percentiles.
    refused : str
        Why no fit is presented (a busy host), else empty.
    sentence : str
        Whether the model can be trusted for this server, and where it cannot.
    replay_median_error_ci95 : tuple of float
        The 95% interval of ``replay_median_error`` over the replayed requests
        (:mod:`toolkit._validation.replay_check`); NaN without a replay.
    replay_drift : pandas.DataFrame or None
        With the passes that bracket the replay: one row per calibration the replay was predicted
        by, ``calibrated_on`` (``pass before``, ``pass after``, ``both``: the one in
        ``replay_accuracy``), ``median_error`` (the median signed error over the latency
        percentiles: below 0, the model too fast) and ``median_abs_error``; else None.
    replay_cell_change : float
        With those passes: the median over the profile's cells of the pass after's time over the
        pass before's, minus 1 (above 0, the server slower after the replay); else NaN.
    """

    calibration: pd.DataFrame | None
    cell_fit: pd.DataFrame | None
    sweep_accuracy: pd.DataFrame | None
    replay_accuracy: pd.DataFrame | None
    sweep_median_error: float
    replay_median_error: float
    refused: str
    sentence: str
    replay_median_error_ci95: tuple[float, float]
    replay_drift: pd.DataFrame | None = None
    replay_cell_change: float = np.nan


def trust_check(
    profile: pd.DataFrame,
    sweep_lanes: pd.DataFrame,
    sweep_levels: pd.DataFrame,
    replay_requests: pd.DataFrame | None,
    *,
    model: object,
    gpu: object,
    quant: object,
    max_batch: int,
    max_num_batched_tokens: int = 2048,
    prefill_breaks: tuple[int, ...] = (),
    prefill_start_breaks: tuple[int, ...] = (),
    ubatch_tokens: int | None = None,
    replay_passes: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    refused: str = "",
    calibration: pd.DataFrame | None = None,
) -> TrustCheck:
    """Calibrate on ``profile``, predict the sweep and the replay, and judge the model (module docstring).

    ``max_num_batched_tokens``, ``ubatch_tokens``, ``prefill_breaks`` and ``prefill_start_breaks`` describe how the
    server schedules a step (as in :func:`toolkit.simulate`); the calibration, the sweep's and the
    replay's predictions use them, the sweep's all but ``prefill_start_breaks``
    (:func:`toolkit._calibration.predict.predict_sweep` simulates the uncached tokens of a lane's
    prompt without their position in it). ``replay_passes``, the profile passes (one pass of
    :func:`toolkit.profile` each) measured right before and right after the replay, calibrate the
    replay's prediction instead of ``profile`` and give ``replay_drift``. ``calibration``, the row
    :func:`toolkit.calibrate` already returned for ``profile`` with these arguments (the report's
    capacity search fits it first), spares fitting it again; None fits it here.
    """
    if refused:
        nothing = dict.fromkeys(("calibration", "cell_fit", "sweep_accuracy", "replay_accuracy"))
        return TrustCheck(
            **nothing,
            sweep_median_error=np.nan,
            replay_median_error=np.nan,
            refused=refused,
            sentence=refused,
            replay_median_error_ci95=(np.nan, np.nan),
        )
    starts = {"prefill_start_breaks": prefill_start_breaks}
    passes = {"prefill_breaks": prefill_breaks, "ubatch_tokens": ubatch_tokens, **starts}
    fitted = calibrate(profile, model, gpu, quant, **passes) if calibration is None else calibration
    cells = cell_fit(profile, fitted, model=model, gpu=gpu, quant=quant, **passes)
    run = _Recorded(sweep_lanes, sweep_levels)
    scheduling = {"max_num_batched_tokens": max_num_batched_tokens, "prefill_breaks": prefill_breaks}
    scheduling["ubatch_tokens"] = ubatch_tokens
    tables = []
    for label, calibration in (("none", None), (FITTED, fitted)):
        predicted = _predict(run, gpu, calibration, max_batch, model=model, quant=quant, scheduling=scheduling)
        table = accuracy(predicted, sweep_levels)
        tables.append(table.assign(calibration=label))
    sweep = pd.concat(tables, ignore_index=True)
    calibrated = sweep[sweep["calibration"].eq(FITTED)]
    sweep_err = float(calibrated.loc[calibrated["metric"].isin(["dec_tok_s", "tpot_ms"]), "rel_err"].abs().median())
    replay, replay_err, replay_ci, drift, change = None, np.nan, (np.nan, np.nan), None, np.nan
    if replay_requests is not None:
        fits = {"both": fitted}
        if replay_passes is not None:
            fits = {
                label: calibrate(frame, model, gpu, quant, **passes) for label, frame in bracket(replay_passes).items()
            }
        compared = {
            label: _replay_comparison(
                replay_requests,
                cost_model(model, gpu, quant, calibration=fit, max_num_batched_tokens=max_num_batched_tokens),
                max_batch=max_batch, intervals=label == "both", **scheduling, **starts,
            )
            for label, fit in fits.items()
        }  # fmt: skip
        errors = {
            label: table.loc[table["metric"].isin(REPLAY_METRICS), "rel_err"] for label, (table, _) in compared.items()
        }
        replay, replay_ci = compared["both"]
        replay = replay_intervals(
            replay, replay_requests, fits["both"],
            lambda row: cost_model(model, gpu, quant, calibration=row, max_num_batched_tokens=max_num_batched_tokens),
            max_batch=max_batch, **scheduling, **starts,
        )  # fmt: skip
        replay_err = float(errors["both"].abs().median())
        if replay_passes is not None:
            rows = [
                {"calibrated_on": k, "median_error": e.median(), "median_abs_error": e.abs().median()}
                for k, e in errors.items()
            ]
            drift, change = pd.DataFrame(rows), cell_change(*replay_passes)
    sentence = _sentence(fitted, cells, calibrated, sweep_err, replay, replay_err, replay_ci, drift)
    return TrustCheck(fitted, cells, sweep, replay, sweep_err, replay_err, "", sentence, replay_ci, drift, change)


def cell_fit(
    profile: pd.DataFrame,
    calibration: object,
    *,
    model: object,
    gpu: object,
    quant: object,
    prefill_breaks: tuple[int, ...] = (),
    prefill_start_breaks: tuple[int, ...] = (),
    ubatch_tokens: int | None = None,
) -> pd.DataFrame:
    """How a calibration reproduces the profile cells it was fitted to, one row per cell.

    A fit can only be as good as the model's shape: a cell that the calibrated model misses by more
    than the held-out tolerance shows where this server does not behave as the model says, whatever
    the parameters.

    Returns
    -------
    pandas.DataFrame
        ``cell``, ``batch``, ``prompt_tokens`` (the cell's target), ``measures`` (``ttft``,
        ``tpot``: the decode step, or ``gap``: a mixed cell's prefill step), ``measured_ms`` and
        ``fitted_ms`` (medians over the cell's requests, ms) and ``rel_err`` (fitted against
        measured); noisy cells and failed requests are left out, as in the fit.
    """
    obs = observations(profile)
    cm = cost_model(model, gpu, quant, calibration=calibration)
    obs = obs.assign(fitted_ms=predict_ms(cm, obs, prefill_breaks, prefill_start_breaks, ubatch_tokens))
    keys = ["cell", "batch", "prompt_tokens_target", "kind"]
    cells = obs.groupby(keys, sort=False)[["measured_ms", "fitted_ms"]].median().reset_index()
    cells = cells.rename(columns={"prompt_tokens_target": "prompt_tokens", "kind": "measures"})
    cells["rel_err"] = cells["fitted_ms"] / cells["measured_ms"] - 1.0
    return cells


def _sentence(fitted, cells, calibrated, sweep_err, replay, replay_err, replay_ci, drift=None) -> str:
    held = str(fitted["held"].iloc[0])
    errors = [sweep_err] + ([replay_err] if replay is not None else [])
    trusted = all(np.isfinite(e) and e <= TRUSTED_MEDIAN_ERROR for e in errors)
    worst = calibrated.loc[calibrated["rel_err"].abs().idxmax()]
    where = f"its largest miss is {worst['metric']} at {int(worst['in_flight'])} in flight ({worst['rel_err']:+.0%})"
    parts = [f"held-out sweep levels {sweep_err:.0%} median |error| (output tokens/s and TPOT)"]
    if replay is not None:
        miss = replay.loc[replay["rel_err"].abs().idxmax()]
        label = (
            miss["metric"] if not np.isfinite(miss["percentile"]) else f"p{int(miss['percentile'])} {miss['metric']}"
        )
        parts.append(
            f"trace replay {replay_err:.0%} (p50 and p90 of TTFT, TPOT, E2E; largest: {label} {miss['rel_err']:+.0%};"
            f" 95% interval over its requests {replay_ci[0]:.0%}-{replay_ci[1]:.0%}{_settled(replay_ci)}{drift_clause(drift)};"
            f" {_coverage(replay)})"
        )
    verdict = (
        f"The calibrated model can be trusted for this server to about {TRUSTED_MEDIAN_ERROR:.0%}"
        if trusted
        else f"The calibrated model cannot be trusted for this server to {TRUSTED_MEDIAN_ERROR:.0%}"
    )
    # "serial_share held at its upper bound 1", "step_overhead_ms held at its default 0.5", ...
    what = ", ".join(r.split(":")[0] for r in str(fitted["held_reason"].iloc[0]).split("; ") if r)
    held_text = f"; {what}" if held else "; every fitted parameter identified"
    return f"{verdict}: {', '.join(parts)}; {where}{held_text}.{_shape(cells)}"


def _coverage(replay: pd.DataFrame) -> str:
    """How many of the replay's measured latency percentiles lie inside their predictive intervals."""
    cases = replay[replay["metric"].isin(REPLAY_METRICS)]
    return f"the {LEVEL:.0%} predictive intervals hold {int(cases['inside'].sum())} of its {len(cases)} measured percentiles"


def _settled(interval: tuple[float, float]) -> str:
    """Empty when the replay's interval lies on one side of the bar, else a clause saying it does not."""
    low, high = interval
    if low <= TRUSTED_MEDIAN_ERROR < high:
        return f", across the {TRUSTED_MEDIAN_ERROR:.0%} bar: a longer replay would settle it"
    return ""


def _shape(cells: pd.DataFrame) -> str:
    """A sentence naming the profile cell the calibrated model misses most, when it misses it by more
    than the held-out tolerance; else empty."""
    if cells.empty or not (cells["rel_err"].abs() > TRUSTED_MEDIAN_ERROR).any():
        return ""
    worst = cells.loc[cells["rel_err"].abs().idxmax()]
    what = {"ttft": "time to first token", "gap": "step that prefilled a prompt among decodes"}.get(
        worst["measures"], "decode step"
    )
    return (
        f" Even on the profile it was fitted to, the model misses the {worst['cell']} cell at batch"
        f" {int(worst['batch'])}, {int(worst['prompt_tokens'])} prompt tokens ({what}: {worst['measured_ms']:.1f} ms"
        f" measured, {worst['fitted_ms']:.1f} ms fitted, {worst['rel_err']:+.0%}): there this server does not"
        " follow the model's shape, whatever its parameters."
    )

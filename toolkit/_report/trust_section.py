"""The report's predicted-against-measured section for a profiled server, in the order of the loop:
the profile, the fitted parameters and what was held, the held-out sweep and trace replay, the verdict."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._model.validity import peak_running, range_sentence, range_text
from toolkit._report import panels as _panels
from toolkit._report.blocks import _chart_html, _Section, _table_html
from toolkit._report.held_out import MODEL, QUANT
from toolkit._report.measure import LOCAL_SWEEP, _Run
from toolkit._sweep.levels import NOISY_TOLERANCE
from toolkit._sweep.llama_server import SCHEDULING
from toolkit._sweep.profile_cells import profile_cells
from toolkit._validation.refusal import busy_reason, unsteady_reason
from toolkit._validation.trust import TRUSTED_MEDIAN_ERROR, trust_check

__all__: list[str] = []


def _trust(run: _Run):
    """The trust check of a profiled local run (:func:`toolkit._validation.trust.trust_check`), else None."""
    if run.profile is None or run.host is None or run.lanes is None:
        return None
    requests = run.replay.requests if run.replay is not None else None
    return trust_check(
        run.profile,
        run.lanes,
        run.levels,
        requests,
        model=MODEL,
        gpu=run.host,
        quant=QUANT,
        max_batch=LOCAL_SWEEP["lanes"],
        **SCHEDULING,
        replay_passes=run.replay_passes,
        refused=busy_reason(run.profile, run.others) or unsteady_reason(run.profile),
        calibration=getattr(run.capacity, "calibration", None),
    )


def _parameters(calibration: pd.DataFrame) -> pd.DataFrame:
    row = calibration.iloc[0]
    held = set(filter(None, str(row["held"]).split(",")))
    fitted = set(filter(None, str(row["fitted"]).split(",")))
    reasons = dict(r.split(" held at", 1) for r in str(row["held_reason"]).split("; ") if " held at" in r)
    rows = []
    for name in [*sorted(fitted), *sorted(held)]:
        se = float(row.get(f"{name}_se", np.nan))
        value = float(row[name])
        rows.append(
            {
                "parameter": name,
                "value": value,
                "standard_error": se if name in fitted else np.nan,
                "fit_standard_error": float(row.get(f"{name}_fit_se", se)) if name in fitted else np.nan,
                "relative_se": se / abs(value) if name in fitted and value else np.nan,
                "status": "fitted" if name in fitted else "held at" + reasons.get(name, " its default"),
            }
        )
    return pd.DataFrame(rows)


def _extent(requests: pd.DataFrame | None, batch: float) -> dict[str, float]:
    """The largest prompt, context (prompt + output) and batch of measured requests, for
    :func:`toolkit._model.validity.range_sentence`; ``{}`` without requests."""
    if requests is None or requests.empty:
        return {}
    done = requests[requests["outcome"].eq("ok")] if "outcome" in requests.columns else requests
    return {
        "prompt_tokens": float(done["prompt_tokens"].max()),
        "context_tokens": float((done["prompt_tokens"] + done["output_tokens"]).max()),
        "batch": float(batch),
    }


def range_sentences(calibration: pd.DataFrame, run: _Run) -> tuple[str, str]:
    """The report's sentences on whether the held-out sweep and the held-out replay lie inside the
    range the calibration was measured over ('' for one inside it): the sweep's batch is its largest
    in-flight limit (at most its lanes), the replay's the most requests it had in flight at once (at
    most the server's slots)."""
    lanes = LOCAL_SWEEP["lanes"]
    sweep_batch = min(float(run.lanes["in_flight"].max()), lanes) if run.lanes is not None else 0.0
    sweep = range_sentence(calibration, "The held-out sweep", **_extent(run.lanes, sweep_batch))
    requests = getattr(run.replay, "requests", None)
    if requests is None or not {"sent_s", "end_s"} <= set(requests.columns):
        return sweep, ""
    batch = min(peak_running(requests["sent_s"], requests["end_s"]), lanes)
    return sweep, range_sentence(calibration, "The held-out replay", **_extent(requests, batch))


def _outlier_sentence(row: pd.Series) -> str:
    """A sentence naming the cells the fit flags as outliers, or '' when it flags none."""
    cells = str(row.get("outlier_cells") or "")
    if not cells:
        return ""
    kept = "left out of" if row.get("robust") else "kept in"
    return f" Cells far off the fit (over 5 standard deviations from the others), {kept} it: {html.escape(cells)}."


def _trust_section(check, run: _Run, out: Path) -> _Section:
    cells = profile_cells(run.profile)
    run.profile.to_csv(out / "profile.csv", index=False)
    cells.to_csv(out / "profile_cells.csv", index=False)
    noisy = int(cells["noisy"].sum())
    body = (
        "<p><b>1. The profile.</b> A designed experiment (toolkit.profile): single-stream decode at two"
        " context lengths (bandwidth and step overhead), decode at several batch sizes (the per-sequence"
        " term), prefill at three prompt lengths (prefill rate and request overhead), each cell repeated"
        " in passes over the design spread over the run (between the sweep's passes, and one right after the"
        " replay), so that the"
        f" intervals below hold the server's drift over minutes. {noisy} of {len(cells)} cells are noisy (their repeats' standard deviation exceeds {NOISY_TOLERANCE:.0%} of their median)"
        " and are left out of the fit.</p>" + _table_html(cells, "Profile cells", "profile_cells.csv", open_=True)
    )
    if check.refused:
        body += f"<p><b>No fit is presented.</b> {html.escape(check.refused)}</p>"
        return _Section("Predicted against measured", body)
    check.calibration.to_csv(out / "calibration.csv", index=False)
    params = _parameters(check.calibration)
    row = check.calibration.iloc[0]
    measured = range_text(check.calibration)
    sweep_range, replay_range = (html.escape(x) for x in range_sentences(check.calibration, run))
    body += (
        "<p><b>2. The fitted parameters</b>, with standard errors; a parameter that fits to a bound of"
        " its range is held at that bound, and one whose fit standard error exceeds 25% of its value,"
        " or that the data do not move, at its default; each says why. The standard errors of mbu and"
        " mfu include the uncertainty of the host's measured bandwidth and matrix rate, of which they"
        " are shares (the spread of its samples over the run); fit_standard_error is the fit's alone."
        f" Condition number {row['condition_number']:.3g}, largest correlation between two fitted"
        f" parameters {row['max_abs_correlation']:.2f}.{_outlier_sentence(row)}"
        + (
            f" The profile measured {html.escape(measured)}: a prediction above that range extrapolates and says so."
            if measured
            else ""
        )
        + "</p>"
        + _table_html(params, "Fitted and held parameters", "calibration.csv", open_=True)
    )
    check.cell_fit.to_csv(out / "profile_fit.csv", index=False)
    misses = int((check.cell_fit["rel_err"].abs() > TRUSTED_MEDIAN_ERROR).sum())
    body += (
        f"<p>The fitted model against the cells it was fitted to: {misses} of {len(check.cell_fit)} cells"
        f" missed by more than {TRUSTED_MEDIAN_ERROR:.0%}. A cell missed here is one where the server does"
        " not follow the model's shape, which no choice of parameters repairs.</p>"
        + _table_html(check.cell_fit, "The fit on its own cells", "profile_fit.csv")
    )
    check.sweep_accuracy.to_csv(out / "accuracy.csv", index=False)
    body += (
        "<p><b>3. Held-out sweep levels.</b> The calibrated model (the simulator, one request per lane with"
        " the lanes' own token counts) predicts every level of the sweep, none of which the fit saw;"
        f" grey: the default efficiencies. Median |error| over output tokens/s and TPOT:"
        f" {check.sweep_median_error:.0%}. {sweep_range}</p>"
        + _chart_html(_panels._accuracy_chart(check.sweep_accuracy), "accuracy", out)
        + _table_html(check.sweep_accuracy, "Every level and metric", "accuracy.csv")
    )
    if check.replay_accuracy is not None:
        check.replay_accuracy.to_csv(out / "replay_accuracy.csv", index=False)
        run.replay.requests.to_csv(out / "replay.csv", index=False)
        body += (
            "<p><b>4. Held-out production traffic.</b> A slice of a production trace replayed against"
            f" the server ({html.escape(run.conditions.get('held-out traffic', ''))}), and the same"
            " requests simulated with the calibrated model: median |error| over p50 and p90 of TTFT, TPOT"
            f" and E2E {check.replay_median_error:.0%}, {check.replay_median_error_ci95[0]:.0%}-"
            f"{check.replay_median_error_ci95[1]:.0%} with 95% confidence over the requests replayed (the same"
            " requests resampled for the prediction and the measurement; the interval does not hold a drift of"
            f" the server's speed during the replay). {replay_range}</p>"
            + _table_html(
                check.replay_accuracy, "Trace replay: predicted against measured", "replay_accuracy.csv", open_=True
            )
        )
    if check.replay_drift is not None:
        check.replay_drift.to_csv(out / "replay_drift.csv", index=False)
        errors = check.replay_drift.set_index("calibrated_on")["median_abs_error"]
        body += (
            "<p>The replay is predicted by the model calibrated on the two profile passes measured right before"
            " and right after it, the server it ran on: over minutes this server's speed moves by about 10%, and"
            " at the replay's load a queue amplifies that about 2.5 times in TTFT. From the pass before the replay"
            f" to the pass after it the profile's cells changed by {check.replay_cell_change:+.0%} (median); predicted from"
            f" the pass before alone the replay misses by {errors['pass before']:.0%}, from the pass after alone"
            f" by {errors['pass after']:.0%}. Where those two differ widely the replay cannot tell the model's"
            " error from the server's drift; where they agree, the server held its speed across the replay"
            " and the miss is the model's.</p>"
            + _table_html(check.replay_drift, "The replay by the profile pass it is predicted from", "replay_drift.csv")
        )
    body += f"<p><b>Verdict.</b> {html.escape(check.sentence)}</p>"
    return _Section("Predicted against measured", body)

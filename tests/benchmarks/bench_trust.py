"""Benchmark: can the calibrated serving model be trusted on the local llama-server? (issue 16)

Runs the report's local measurement twice in a row (toolkit.profile of the one-thread llama-server in
three passes alternating with the two passes of the 8-lane sweep at limits 1, 2, 4, 8, then a
held-out production-trace slice replayed), each with
its trust check (calibrate on the profile, predict every sweep level and the replay), then a profile
with a CPU-burning process beside the server. Writes reports/bench/trust.json:

- per run: the host's load, whether it was busy and why, the host's measured rates with their
  uncertainties, the fitted parameters with standard errors (with and without the host probe's
  uncertainty) and what was held, the median |error| on the held-out sweep (output tokens/s and TPOT) and on the
  replay (p50 and p90 of TTFT, TPOT, E2E), every level's verdict;
- repeatability: whether each parameter fitted in both runs lies inside the other run's 95% interval
  (value +- 1.96 standard errors); for one fitted in one run and held at a bound in the other,
  whether the fitted run's interval reaches that bound; and whether the verdicts agree;
- the busy run: whether the profile flagged the host as busy.

Issue 16's bar: 15% median |error| on both held-out sets, every parameter identified or held, the two
runs inside each other's intervals with the same verdicts, and the busy run flagged. Results from a
busy host are marked as such.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
TARGET = 0.15


def _number(value: object) -> object:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return None if math.isnan(number) else round(number, 6)


def _one_run() -> dict:
    from bench_verdict import pass_elasticities

    from toolkit._report.measure import _measure_local
    from toolkit._report.trust_section import _trust
    from toolkit._sweep.profile_cells import profile_cells
    from toolkit._validation.refusal import busy_reason, unsteady_reason

    load_before = os.getloadavg()[0]
    start = dt.datetime.now().isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as tmp:
        run = _measure_local(Path(tmp))
        per_pass = pass_elasticities(Path(tmp))
    check = _trust(run)
    out = {
        "started": start,
        "host_load_1m_before": load_before,
        # the host's rates, the best of three samples over the run (before the server starts, after the
        # profile, after the sweep): mbu and mfu are shares of these, so a run whose copy or GEMM
        # measured faster reports smaller efficiencies for the same server
        "host_bandwidth_gb_s": _number(run.host["bandwidth_gb_s"].iloc[0]),
        "host_fp16_tflops": _number(run.host["fp16_tflops"].iloc[0]),
        # their standard uncertainties: the spread of the samples outside a dip, never below the
        # recorded run-to-run spread of a best (best_of_hosts)
        "host_bandwidth_gb_s_se": _number(run.host["bandwidth_gb_s_se"].iloc[0]),
        "host_fp16_tflops_se": _number(run.host["fp16_tflops_se"].iloc[0]),
        "host_load_1m_after": os.getloadavg()[0],
        "others_cpu_share": {k: _number(v) for k, v in run.others.items()},
        # the replay's stretch, chosen so that the profile-calibrated model puts the server's
        # utilisation at the target (toolkit._report.held_out.HELD_OUT_UTILISATION)
        "replay_load": {k: _number(v) for k, v in run.replay_load.items()},
        "busy": busy_reason(run.profile, run.others),
        # a profile with every cell of one family noisy: the report presents no fit (not a busy host)
        "unsteady": unsteady_reason(run.profile),
        # the report's own opening line about the sweep (other processes' CPU, toolkit._sweep.host_state)
        "report_busy_warning": run.conditions.get("warning", ""),
        # each cell's median, the lowest and highest of its wave medians, and whether it was noisy
        "profile_cells": profile_cells(run.profile).map(_number).to_dict(orient="records"),
        "noisy_profile_cells": int(
            run.profile.drop_duplicates(["cell", "batch", "prompt_tokens_target"])["noisy"].sum()
        ),
        "verdicts": {str(int(k)): str(v) for k, v in zip(run.levels["in_flight"], run.levels["verdict"], strict=True)},
        "elasticity": {
            str(int(k)): _number(v) for k, v in zip(run.levels["in_flight"], run.levels["elasticity"], strict=True)
        },
        # each pass's own elasticities: the spread the verdict's interval is made of
        "elasticity_per_pass": per_pass,
        # half-width of each verdict's 95% interval from the repeats' pooled spread (verdict_interval)
        "elasticity_ci95": {
            str(int(k)): _number(v) for k, v in zip(run.levels["in_flight"], run.levels["elasticity_ci95"], strict=True)
        },
        "dec_tok_s": {
            str(int(k)): _number(v) for k, v in zip(run.levels["in_flight"], run.levels["dec_tok_s"], strict=True)
        },
    }
    if check is None or check.refused:
        out["refused"] = check.refused if check else "no trust check"
        return out
    row = check.calibration.iloc[0]
    names = [n for n in str(row["fitted"]).split(",") if n]
    out.update(
        {
            # se: the fit's standard error with the host probe's uncertainty added for mbu and mfu
            # (toolkit._calibration.reference); fit_se: the fit's alone
            "fitted": {
                n: {"value": _number(row[n]), "se": _number(row[f"{n}_se"]), "fit_se": _number(row[f"{n}_fit_se"])}
                for n in names
            },
            "held_values": {n: _number(row[n]) for n in str(row["held"]).split(",") if n},
            "held": str(row["held_reason"]),
            "condition_number": _number(row["condition_number"]),
            "sweep_median_abs_error": _number(check.sweep_median_error),
            "replay_median_abs_error": _number(check.replay_median_error),
            "replay_median_abs_error_ci95": [_number(v) for v in check.replay_median_error_ci95],
            # the replay predicted from the profile pass right before it, right after it, and both (the
            # one above), and how much longer the cells took after than before
            "replay_drift": check.replay_drift.map(_number).to_dict(orient="records")
            if check.replay_drift is not None
            else None,
            "replay_cell_change": _number(check.replay_cell_change),
            "profile_fit_max_abs_error": _number(check.cell_fit["rel_err"].abs().max()),
            "profile_fit": check.cell_fit.map(_number).to_dict(orient="records"),
            "sweep_accuracy": check.sweep_accuracy.map(_number).to_dict(orient="records"),
            "replay_accuracy": check.replay_accuracy.map(_number).to_dict(orient="records"),
            "sentence": check.sentence,
        }
    )
    return out


def _inside(a: dict, b: dict) -> dict:
    """For each parameter fitted in both runs: is each value inside the other's 95% interval?"""
    out = {}
    for name in sorted(set(a.get("fitted", {})) & set(b.get("fitted", {}))):
        va, sa = a["fitted"][name]["value"], a["fitted"][name]["se"] or 0.0
        vb, sb = b["fitted"][name]["value"], b["fitted"][name]["se"] or 0.0
        out[name] = bool(abs(va - vb) <= 1.96 * sa and abs(va - vb) <= 1.96 * sb)
    return out


def _reaches_bound(a: dict, b: dict) -> dict:
    """For each parameter fitted in one run and held at a bound in the other (``held ... bound``): does
    the fitted run's 95% interval reach the value the other run was held at?"""
    out = {}
    for fitted, held in ((a, b), (b, a)):
        for name in sorted(set(fitted.get("fitted", {})) & set(held.get("held_values", {}))):
            if f"{name} held at its lower bound" in held["held"] or f"{name} held at its upper bound" in held["held"]:
                value, se = fitted["fitted"][name]["value"], fitted["fitted"][name]["se"] or 0.0
                out[name] = bool(abs(value - held["held_values"][name]) <= 1.96 * se)
    return out


def _contradicting_verdicts(a: dict, b: dict) -> list[str]:
    """The levels where both runs decided (batching, mixed or queueing) and decided differently: a
    flip. ``inconclusive`` in one run is no decision, so it contradicts nothing; ``same_verdicts``
    counts it as a difference all the same."""
    decided = ("batching", "mixed", "queueing")
    return [
        level
        for level in sorted(set(a["verdicts"]) & set(b["verdicts"]), key=int)
        if a["verdicts"][level] in decided and b["verdicts"][level] in decided
        and a["verdicts"][level] != b["verdicts"][level]
    ]  # fmt: skip


def _busy_profile() -> dict:
    """A profile with one process burning a core beside the server: it must be flagged busy."""
    import toolkit as tk
    from toolkit._validation.refusal import busy_reason

    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tk.LlamaServer(parallel=8) as server:
            frame = tk.profile(server=server, repeats=1, progress=False)
    finally:
        burner.kill()
        burner.wait()
    waves = frame.drop_duplicates("wave")
    return {
        "waves": len(waves),
        "busy_waves": int(waves["busy"].sum()),
        "other_cpu_share_median": _number(waves["other_cpu_share"].median()),
        "flagged": bool(busy_reason(frame)),
        "reason": busy_reason(frame),
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    first, second = _one_run(), _one_run()
    busy = _busy_profile()
    both = [first, second]
    met = {
        "sweep_within_15pct": all((r.get("sweep_median_abs_error") or math.inf) <= TARGET for r in both),
        "replay_within_15pct": all((r.get("replay_median_abs_error") or math.inf) <= TARGET for r in both),
        "parameters_inside_each_others_ci": all(_inside(first, second).values())
        and bool(_inside(first, second))
        and all(_reaches_bound(first, second).values()),
        "same_verdicts": first["verdicts"] == second["verdicts"],
        "busy_run_flagged": busy["flagged"],
        "idle_runs_not_flagged": not any(r["busy"] or r["report_busy_warning"] for r in both),
    }
    fitted_once = sorted(set(first.get("fitted", {})) ^ set(second.get("fitted", {})))
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "target_median_abs_error": TARGET,
        "runs": both,
        "repeatability": {
            "inside_each_others_ci": _inside(first, second),
            # fitted in one run, held at a bound in the other: does the fitted run's interval reach it?
            "fitted_in_one_held_at_a_bound_in_the_other": _reaches_bound(first, second),
            # fitted in one run, held at its default in the other: not comparable, so not in the check above
            "fitted_in_one_run_only": fitted_once,
            "contradicting_verdicts": _contradicting_verdicts(first, second),
        },
        "busy_run": busy,
        "met": met,
        "host_busy": bool(first["busy"] or second["busy"]),
    }
    (OUT / "trust.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(
        json.dumps(
            {"met": met, "errors": [(r.get("sweep_median_abs_error"), r.get("replay_median_abs_error")) for r in both]},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

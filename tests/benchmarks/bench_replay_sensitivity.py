"""Benchmark: how far the held-out replay's verdict moves with the profile it is calibrated on (issue 16).

On one local llama-server (the report's settings: ``--parallel 8``, a unified KV cache) this runs the
report's loop with a second profile: profile A at the server's start, the report's sweep, profile B,
then the report's held-out trace slice replayed once. The same replay is then predicted twice, from
a calibration on A (as the report does) and on B (measured right before it), so that the difference
between the two predictions is the profile's doing alone, not the replay's.

A second server with per-slot KV streams (``kv_unified=False``, llama.cpp's own default with
``--parallel``) is profiled once, for the spread of its cells beside the unified server's.

Writes reports/bench/replay_sensitivity.json: each profile's cells (median, lowest and highest wave
median, ms), both calibrations, the replay's signed errors under each, the share of the CPU other
processes took in each phase, and the host's load. Results from a busy host are marked.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
PARAMETERS = ("mbu", "mfu", "serial_share", "batched_mbu_factor", "step_overhead_ms", "request_overhead_ms")


def _cells(frame) -> list[dict]:
    from toolkit._sweep.profile_cells import profile_cells

    cells = profile_cells(frame)[["cell", "batch", "prompt_tokens", "median_ms", "low_ms", "high_ms", "noisy"]]
    return [
        {k: (round(float(v), 2) if isinstance(v, float) else v) for k, v in row.items()}
        for row in cells.astype({"batch": int, "prompt_tokens": int, "noisy": bool}).to_dict(orient="records")
    ]


def _calibration(frame, host) -> tuple[object, dict]:
    import toolkit as tk
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep.llama_server import SCHEDULING

    row = tk.calibrate(
        frame, MODEL, host, QUANT, prefill_breaks=SCHEDULING["prefill_breaks"],
        prefill_start_breaks=SCHEDULING["prefill_start_breaks"],
    )  # fmt: skip
    first = row.iloc[0]
    summary = {n: {"value": round(float(first[n]), 4), "se": round(float(first[f"{n}_se"]), 4)} for n in PARAMETERS}
    return row, {"parameters": summary, "held": str(first["held"])}


def main() -> None:
    import toolkit as tk
    from toolkit._model.host import measure_host
    from toolkit._report.held_out import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME, held_out_time_scale
    from toolkit._report.measure import LOCAL_SWEEP, _measure
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep import host_state
    from toolkit._sweep.llama_server import SCHEDULING
    from toolkit._validation.refusal import bench_host_busy
    from toolkit._validation.replay_check import replay_accuracy

    load_before = os.getloadavg()[0]
    started = dt.datetime.now().isoformat(timespec="seconds")
    host = measure_host()  # one sample before the server starts (the report takes the best of three over its run)
    with tk.LlamaServer(parallel=LOCAL_SWEEP["lanes"]) as server:
        marks = [host_state.sample(server.pid)]
        a = tk.profile(server=server, progress=False)
        marks.append(host_state.sample(server.pid))
        with tempfile.TemporaryDirectory() as tmp:
            _measure(server.base_url, Path(tmp), LOCAL_SWEEP, "sweep")
        marks.append(host_state.sample(server.pid))
        b = tk.profile(server=server, progress=False)
        marks.append(host_state.sample(server.pid))
        # as the report stretches it, from the first profile
        scale, _ = held_out_time_scale(a, host, max_batch=LOCAL_SWEEP["lanes"])
        trace = tk.load_trace(HELD_OUT_TRACE_NAME, **HELD_OUT_TRACE, time_scale=scale)
        replay = tk.replay_trace(trace, server=server, progress=False).requests
        marks.append(host_state.sample(server.pid))
    with tk.LlamaServer(parallel=LOCAL_SWEEP["lanes"], kv_unified=False) as split_server:
        s0 = host_state.sample(split_server.pid)
        split = tk.profile(server=split_server, progress=False)
        s1 = host_state.sample(split_server.pid)
    phases = ("profile A", "sweep", "profile B", "replay")
    others = {
        p: round(float(host_state.conditions(x, y)["other_cpu_share"]), 4) for p, x, y in zip(phases, marks, marks[1:])
    }
    others["profile, per-slot streams"] = round(float(host_state.conditions(s0, s1)["other_cpu_share"]), 4)
    predictions = {}
    for name, frame in (("A (server start)", a), ("B (right before the replay)", b)):
        row, summary = _calibration(frame, host)
        cm = tk.cost_model(MODEL, host, QUANT, calibration=row)
        acc = replay_accuracy(replay, cm, max_batch=LOCAL_SWEEP["lanes"], **SCHEDULING)
        latency = acc[acc["metric"].ne("output_tok_s")]
        summary["replay_median_abs_error"] = round(float(latency["rel_err"].abs().median()), 3)
        summary["replay_rel_err"] = {
            f"{r.metric} p{r.percentile:.0f}": round(float(r.rel_err), 3) for r in latency.itertuples()
        }
        predictions[name] = summary
    busy_waves = {
        name: int(f.drop_duplicates("wave")["busy"].sum()) for name, f in (("A", a), ("B", b), ("split", split))
    }
    busy = any(bench_host_busy(load_before, f, others, os.cpu_count() or 1) for f in (a, b, split))
    result = {
        "date": started,
        "ended": dt.datetime.now().isoformat(timespec="seconds"),
        "host_bandwidth_gb_s": round(float(host["bandwidth_gb_s"].iloc[0]), 2),
        "host_fp16_tflops": round(float(host["fp16_tflops"].iloc[0]), 4),
        "profile_cells": {"A": _cells(a), "B": _cells(b), "per-slot streams": _cells(split)},
        "calibrated_on": predictions,
        "replay_requests": int(replay["outcome"].eq("ok").sum()),
        "others_cpu_share": others,
        "busy_profile_waves": busy_waves,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": bool(busy),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "replay_sensitivity.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("date", "calibrated_on", "others_cpu_share", "host_busy")}, indent=1))
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()

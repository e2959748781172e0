"""Benchmark: the cost model's step times against llama-server's own iterations in the held-out replay
(issue 16).

The replay check compares latency percentiles, where a queue multiplies a small error in service time.
This benchmark looks one level down. On one local llama-server (the report's settings) with its debug
log on (``SERVER_LOG_ARGS``), it alternates one-pass profiles with replays of the report's held-out
slice, each replay with its own prompt text. Each replay is predicted by the model calibrated on the
two passes around it, as the report does, and each of its engine iterations, read from the server's
log (``toolkit._sweep.server_log``), is set beside the model's step time for the same composition
(decoding sequences and their KV, prompt-chunk tokens and where they start). If the iterations add
up to what the model says while the percentiles miss, the miss is in the scheduling or the queue; if
the iterations themselves run slow, the server was slower during the replay than in its profile.

The debug log costs the server some CPU of its own (it formats a line per token), so these replays are
not the report's; compare within a run. Writes reports/bench/steps.json, every iteration beside its prediction to
reports/bench/steps_iterations.csv, and the log lines of the iteration furthest above its prediction
to reports/bench/steps_slowest_iteration.log, and the profile passes and replays measured to
reports/bench/steps_profile.csv and steps_replays.csv. Results from a busy host are marked.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
REPLAYS = 3
# the replay's iterations are also compared window by window, to tell a passing slowdown from a steady one
WINDOW_S = 20


def _kind(iterations: pd.DataFrame) -> pd.Series:
    """What an iteration holds: decodes only (by count), a prompt chunk alone (by size, and whether it
    ends its prompt: only then does it compute logits), or both."""
    decodes = iterations["decode_seqs"]
    prefill = iterations["prefill_tokens"]
    ends = np.where(iterations["last_chunks"] > 0, "ending a prompt", "ending none")
    size = np.where(prefill <= 4, "1-4 tokens", np.where(prefill < 64, "5-63 tokens", "64+ tokens"))
    alone = "prompt chunk alone, " + pd.Series(size, index=iterations.index) + ", " + ends
    mixed = "decodes + prompt chunk, " + pd.Series(ends, index=iterations.index)
    only = np.where(decodes <= 2, "decodes only, " + decodes.astype(str), "decodes only, 3+")
    return pd.Series(np.where(prefill == 0, only, np.where(decodes == 0, alone, mixed)), index=iterations.index)


def _against_model(iterations: pd.DataFrame, cm: object) -> tuple[dict, pd.DataFrame]:
    """Measured and predicted time of the iterations, in all, by kind and by ``WINDOW_S`` of the
    replay; and the iterations with their prediction and kind."""
    predicted = np.asarray(
        cm.step_ms(
            iterations["decode_seqs"].to_numpy(),
            iterations["kv_tokens"].to_numpy(),
            iterations["prefill_tokens"].to_numpy(),
            iterations["prefill_context_tokens"].to_numpy(),
            iterations["last_chunks"].to_numpy(),
        )
    )
    frame = iterations.assign(predicted_ms=predicted, kind=_kind(iterations))
    by_kind = {
        kind: {
            "iterations": len(group),
            "measured_s": round(float(group["step_ms"].sum()) / 1e3, 2),
            "predicted_s": round(float(group["predicted_ms"].sum()) / 1e3, 2),
            "ratio": round(float(group["step_ms"].sum() / group["predicted_ms"].sum()), 3),
            "median_ratio": round(float((group["step_ms"] / group["predicted_ms"]).median()), 3),
        }
        for kind, group in frame.groupby("kind")
    }
    window = ((frame["start_s"] - frame["start_s"].min()) // WINDOW_S).astype(int)
    by_window = [
        round(float(group["step_ms"].sum() / group["predicted_ms"].sum()), 3) for _, group in frame.groupby(window)
    ]
    summary = {
        "iterations": len(frame),
        "max_decode_seqs": int(frame["decode_seqs"].max()),
        "measured_s": round(float(frame["step_ms"].sum()) / 1e3, 2),
        "predicted_s": round(float(frame["predicted_ms"].sum()) / 1e3, 2),
        "ratio": round(float(frame["step_ms"].sum() / frame["predicted_ms"].sum()), 3),
        "by_kind": by_kind,
        f"ratio_by_{WINDOW_S}_s": by_window,
    }
    return summary, frame


def _log_excerpt(lines: list[str], start_s: float, step_ms: float, *, limit: int = 400) -> list[str]:
    """The log lines of one iteration, from its start to the next (at most ``limit``), for the record
    of what the server did while an iteration ran far beyond its prediction."""
    from toolkit._sweep.server_log import log_seconds

    end_s = start_s + step_ms / 1e3
    inside = [line for line in lines if (at := log_seconds(line)) is not None and start_s <= at <= end_s + 1e-3]
    return inside[:limit]


def main() -> None:
    import toolkit as tk
    from toolkit._model.host import measure_host
    from toolkit._report.held_out import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME, held_out_time_scale
    from toolkit._report.measure import LOCAL_SWEEP
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep import host_state
    from toolkit._sweep.llama_server import SCHEDULING
    from toolkit._sweep.profile_cells import combine_passes
    from toolkit._sweep.server_log import SERVER_LOG_ARGS, server_iterations
    from toolkit._validation.refusal import bench_host_busy
    from toolkit._validation.replay_check import replay_accuracy

    load_before = os.getloadavg()[0]
    started = dt.datetime.now().isoformat(timespec="seconds")
    host = measure_host()
    breaks = {k: SCHEDULING[k] for k in ("prefill_breaks", "prefill_start_breaks")}
    lanes = LOCAL_SWEEP["lanes"]
    passes, replays, others, spans = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "server.log"
        with tk.LlamaServer(parallel=lanes, extra_args=SERVER_LOG_ARGS, log_path=log_path) as server:
            passes.append(tk.profile(server=server, repeats=1, progress=False))
            scale, load = held_out_time_scale(passes[0], host, max_batch=lanes)
            trace = tk.load_trace(HELD_OUT_TRACE_NAME, **HELD_OUT_TRACE, time_scale=scale)
            for k in range(REPLAYS):
                before, start_byte = host_state.sample(server.pid), log_path.stat().st_size
                replays.append(tk.replay_trace(trace, server=server, progress=False, seed=1000 + k).requests)
                spans.append((start_byte, log_path.stat().st_size))
                others.append(float(host_state.conditions(before, host_state.sample(server.pid))["other_cpu_share"]))
                passes.append(tk.profile(server=server, repeats=1, progress=False))
        # the server is idle at both ends of a replay, so its stretch of the log holds whole iterations
        text = log_path.read_bytes()
        segments, logs = [], []
        for k, (a, b) in enumerate(spans):
            segment = Path(tmp) / f"replay{k}.log"
            segment.write_bytes(text[a:b])
            segments.append(server_iterations(segment))
            logs.append(text[a:b].decode(errors="replace").splitlines())

    rows, tables = [], []
    for k, (requests, iterations) in enumerate(zip(replays, segments)):
        fitted = tk.calibrate(combine_passes(passes[k : k + 2]), MODEL, host, QUANT, **breaks)
        cm = tk.cost_model(
            MODEL, host, QUANT, calibration=fitted, max_num_batched_tokens=SCHEDULING["max_num_batched_tokens"]
        )
        latency = replay_accuracy(requests, cm, max_batch=lanes, **SCHEDULING)
        latency = latency[latency["metric"].ne("output_tok_s")]
        steps, table = _against_model(iterations, cm)
        tables.append(table.assign(seed=1000 + k))
        rows.append(
            {
                "seed": 1000 + k,
                "requests_ok": int(requests["outcome"].eq("ok").sum()),
                "median_abs_error": round(float(latency["rel_err"].abs().median()), 3),
                "rel_err": {
                    f"{r.metric} p{r.percentile:.0f}": round(float(r.rel_err), 3) for r in latency.itertuples()
                },
                "steps": steps,
                "others_cpu_share": round(others[k], 4),
                "calibration": {n: round(float(fitted[n].iloc[0]), 4) for n in ("mbu", "mfu", "batched_mbu_factor")},
            }
        )
    shares = {f"replay {1000 + k}": share for k, share in enumerate(others)}
    busy = bench_host_busy(load_before, combine_passes(passes), shares, os.cpu_count() or 1)
    result = {
        "date": started,
        "ended": dt.datetime.now().isoformat(timespec="seconds"),
        "time_scale": scale,
        "predicted_utilisation": round(load, 3),
        "host_bandwidth_gb_s": round(float(host["bandwidth_gb_s"].iloc[0]), 2),
        "host_fp16_tflops": round(float(host["fp16_tflops"].iloc[0]), 4),
        "replays": rows,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": bool(busy),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "steps.json").write_text(json.dumps(result, indent=1) + "\n")
    every = pd.concat(tables, ignore_index=True)
    every.round(3).to_csv(OUT / "steps_iterations.csv", index=False)
    # the measurements themselves, for predicting the same replays with another model
    pd.concat([p.assign(profile_pass=k) for k, p in enumerate(passes)]).to_csv(OUT / "steps_profile.csv", index=False)
    pd.concat([r.assign(seed=1000 + k) for k, r in enumerate(replays)]).to_csv(OUT / "steps_replays.csv", index=False)
    slowest = every.loc[(every["step_ms"] / every["predicted_ms"]).idxmax()]
    excerpt = _log_excerpt(logs[int(slowest["seed"]) - 1000], slowest["start_s"], slowest["step_ms"])
    (OUT / "steps_slowest_iteration.log").write_text("\n".join(excerpt) + "\n")
    for r in rows:
        s = r["steps"]
        print(
            r["seed"],
            "replay median |error|",
            r["median_abs_error"],
            "iterations",
            s["iterations"],
            "measured/predicted",
            s["ratio"],
        )
        print("   by window:", s[f"ratio_by_{WINDOW_S}_s"])
        for kind, v in s["by_kind"].items():
            print(
                f"   {kind:34s} {v['iterations']:4d} {v['measured_s']:7.2f} s / {v['predicted_s']:7.2f} s = {v['ratio']:.3f}"
            )
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Benchmark: which side of the held-out replay check moves from minute to minute, the profile or the
replay (issue 16)?

On one local llama-server (the report's settings) this alternates four one-pass profiles with three
replays of the report's held-out slice, each replay with its own prompt text (``seed``) so that
none finds the previous one's prompts in the prefix cache. It then calibrates on all four passes,
as the report calibrates on its three, and predicts each replay.

For each profile pass it records the lone prefill cells (TTFT, ms) and the single-stream decode
step; for each replay, its latency percentiles, the model's signed errors, the prefill rate the
server itself timed (``server_prompt_ms`` per uncached prompt token, over requests that prefilled at
least ``LONG_PROMPT_TOKENS`` tokens, where the fixed cost of a request's steps matters least) and
its median TPOT. The coefficients of variation across passes and across replays say which side
drifts.

Writes reports/bench/replay_repeat.json. Results from a busy host are marked.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
REPLAYS = 3
LONG_PROMPT_TOKENS = 100


def _cv(values: list[float]) -> float:
    return round(float(np.std(values, ddof=1) / np.mean(values)), 4)


def main() -> None:
    import toolkit as tk
    from toolkit._model.host import measure_host
    from toolkit._report.held_out import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME, held_out_time_scale
    from toolkit._report.measure import LOCAL_SWEEP
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep import host_state
    from toolkit._sweep.llama_server import SCHEDULING
    from toolkit._sweep.profile_cells import combine_passes, profile_cells
    from toolkit._validation.refusal import bench_host_busy
    from toolkit._validation.replay_check import replay_accuracy

    load_before = os.getloadavg()[0]
    started = dt.datetime.now().isoformat(timespec="seconds")
    host = measure_host()
    passes, replays, others = [], [], []
    with tk.LlamaServer(parallel=LOCAL_SWEEP["lanes"]) as server:
        passes.append(tk.profile(server=server, repeats=1, progress=False))
        scale, _ = held_out_time_scale(passes[0], host, max_batch=LOCAL_SWEEP["lanes"])
        trace = tk.load_trace(HELD_OUT_TRACE_NAME, **HELD_OUT_TRACE, time_scale=scale)
        for k in range(REPLAYS):
            before = host_state.sample(server.pid)
            replays.append(tk.replay_trace(trace, server=server, progress=False, seed=1000 + k).requests)
            others.append(
                round(float(host_state.conditions(before, host_state.sample(server.pid))["other_cpu_share"]), 4)
            )
            passes.append(tk.profile(server=server, repeats=1, progress=False))
    profiled = combine_passes(passes)
    fitted = tk.calibrate(
        profiled, MODEL, host, QUANT, **{k: SCHEDULING[k] for k in ("prefill_breaks", "prefill_start_breaks")}
    )
    cm = tk.cost_model(
        MODEL, host, QUANT, calibration=fitted, max_num_batched_tokens=SCHEDULING["max_num_batched_tokens"]
    )

    pass_rows = []
    for frame in passes:
        cells = profile_cells(frame).set_index(["cell", "prompt_tokens", "batch"])["median_ms"]
        pass_rows.append(
            {
                "prefill_ms": {int(p): round(float(cells[("prefill", p, 1)]), 1) for p in (128, 384, 768)},
                "decode_step_ms": round(float(cells[("decode", 64, 1)]), 2),
                "busy_waves": int(frame.drop_duplicates("wave")["busy"].sum()),
            }
        )
    replay_rows = []
    for k, requests in enumerate(replays):
        acc = replay_accuracy(requests, cm, max_batch=LOCAL_SWEEP["lanes"], **SCHEDULING)
        latency = acc[acc["metric"].ne("output_tok_s")]
        ok = requests[requests["outcome"].eq("ok")]
        long = ok[ok["server_prompt_n"] >= LONG_PROMPT_TOKENS]
        replay_rows.append(
            {
                "seed": 1000 + k,
                "requests_ok": len(ok),
                "cached_tokens": int(ok["cached_tokens"].sum()),
                "measured": {
                    f"{r.metric} p{r.percentile:.0f}": round(float(r.measured), 1) for r in latency.itertuples()
                },
                "rel_err": {
                    f"{r.metric} p{r.percentile:.0f}": round(float(r.rel_err), 3) for r in latency.itertuples()
                },
                "median_abs_error": round(float(latency["rel_err"].abs().median()), 3),
                "server_prefill_ms_per_token": round(
                    float((long["server_prompt_ms"] / long["server_prompt_n"]).median()), 3
                ),
                "server_tpot_ms_p50": round(float(ok["server_tpot_ms"].median()), 2),
                "others_cpu_share": others[k],
            }
        )
    spread = {
        "profile prefill 384 tokens (ms)": _cv([p["prefill_ms"][384] for p in pass_rows]),
        "profile prefill 128 tokens (ms)": _cv([p["prefill_ms"][128] for p in pass_rows]),
        "profile decode step (ms)": _cv([p["decode_step_ms"] for p in pass_rows]),
        "replay server prefill rate (ms per token)": _cv([r["server_prefill_ms_per_token"] for r in replay_rows]),
        "replay server TPOT p50 (ms)": _cv([r["server_tpot_ms_p50"] for r in replay_rows]),
        "replay TTFT p50 (ms)": _cv([r["measured"]["ttft_ms p50"] for r in replay_rows]),
    }
    shares = {f"replay {1000 + k}": share for k, share in enumerate(others)}
    busy = bench_host_busy(load_before, profiled, shares, os.cpu_count() or 1)
    result = {
        "date": started,
        "ended": dt.datetime.now().isoformat(timespec="seconds"),
        "time_scale": scale,
        "host_bandwidth_gb_s": round(float(host["bandwidth_gb_s"].iloc[0]), 2),
        "host_fp16_tflops": round(float(host["fp16_tflops"].iloc[0]), 4),
        "calibration": {
            n: round(float(fitted[n].iloc[0]), 4) for n in ("mbu", "mfu", "serial_share", "batched_mbu_factor")
        },
        "held": str(fitted["held"].iloc[0]),
        "profile_passes": pass_rows,
        "replays": replay_rows,
        "coefficient_of_variation": spread,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": bool(busy),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "replay_repeat.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("date", "coefficient_of_variation", "host_busy")}, indent=1))
    for r in replay_rows:
        print(r["seed"], r["median_abs_error"], r["rel_err"])
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Benchmark: how the local llama-server's step time follows the batch, and how it drifts (issue 16).

The trust loop's held-out replay misses by more than the sweep does. This benchmark measures the two
things a cost model needs from the server with :func:`toolkit.profile` (its own client, repeats
interleaved so that the host's drift spreads over every cell), in a wider design than the report's:

- the decode step (each request's median gap between tokens) at 1 to 8 sequences together, prompts
  of 100 tokens, 40 output tokens each;
- a prefill alone (TTFT of one request, one output token) at 50, 200 and 500 prompt tokens.

Then, on the same server, the report's trust loop in part: the standard profile, the calibration,
and the report's held-out trace slice replayed four times (arrivals stretched x3, as the report
does, and x6, alternating), each against the same calibrated model, to show how far the replay's
own verdict moves between identical runs.

Writes reports/bench/server_shape.json: per batch size and prompt length the median, lowest and
highest over the repeats' wave medians (ms, as the report's profile table computes them); the step's
departure from the least-squares line through batches 2-8 (a cost model linear in the batch, with
its own step of one sequence, can follow no more than that line); the prefill's ms per prompt token;
each replay's median |error| (p50 and p90 of TTFT, TPOT, E2E) and signed errors; and the host's
load. Results from a busy host are marked.
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
REPEATS = 3
BATCHES = tuple(range(1, 9))
CONTEXT_TOKENS = (100, 1000)  # the batch cells decode after the first
PREFILL_TOKENS = (50, 200, 500)
DECODE_TOKENS = 40
REPLAY_TIME_SCALES = (3, 6, 3, 6)


def _summary(cell) -> dict:
    return {"median_ms": round(cell.median_ms, 1), "low_ms": round(cell.low_ms, 1), "high_ms": round(cell.high_ms, 1)}


def _shape(server) -> tuple[dict, dict]:
    """Decode step per batch size and prefill per prompt length, from a profile of this design."""
    import toolkit as tk
    from toolkit._sweep.profile_cells import profile_cells

    frame = tk.profile(
        server=server,
        repeats=REPEATS,
        context_tokens=CONTEXT_TOKENS,
        prompt_tokens=PREFILL_TOKENS,
        batch_sizes=BATCHES,
        output_tokens=DECODE_TOKENS,
        progress=False,
    )
    cells = profile_cells(frame)
    steps = cells[cells["cell"].ne("prefill") & cells["prompt_tokens"].eq(CONTEXT_TOKENS[0])].set_index("batch")
    batched = [k for k in BATCHES if k >= 2]
    slope, intercept = np.polyfit(batched, steps.loc[batched, "median_ms"], 1)
    decode = {}
    for k in BATCHES:
        row = steps.loc[k]
        line = float(intercept + slope * k) if k >= 2 else None
        decode[str(k)] = {
            **_summary(row),
            "line_ms": None if line is None else round(line, 1),
            "off_line": None if line is None else round(row.median_ms / line - 1, 3),
        }
    prefill = {
        str(int(row.prompt_tokens)): {**_summary(row), "ms_per_token": round(row.median_ms / row.prompt_tokens, 2)}
        for row in cells[cells["cell"].eq("prefill")].itertuples()
    }
    line = {"batches": "2-8", "intercept_ms": round(float(intercept), 1), "per_sequence_ms": round(float(slope), 1)}
    return {"decode_step": decode, "decode_line": line}, prefill


def _replays(server, host) -> list[dict]:
    import toolkit as tk
    from toolkit._report.held_out import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME
    from toolkit._report.trust_section import MODEL, QUANT
    from toolkit._sweep.llama_server import SCHEDULING
    from toolkit._validation.replay_check import replay_accuracy

    profiled = tk.profile(server=server, progress=False)
    calibration = tk.calibrate(
        profiled, MODEL, host, QUANT, prefill_breaks=SCHEDULING["prefill_breaks"],
        prefill_start_breaks=SCHEDULING["prefill_start_breaks"],
    )  # fmt: skip
    cm = tk.cost_model(MODEL, host, QUANT, calibration=calibration)
    out = []
    for time_scale in REPLAY_TIME_SCALES:
        trace = tk.load_trace(HELD_OUT_TRACE_NAME, **{**HELD_OUT_TRACE, "time_scale": time_scale})
        requests = tk.replay_trace(trace, server=server, progress=False).requests
        acc = replay_accuracy(requests, cm, max_batch=max(BATCHES), **SCHEDULING)
        acc = acc[acc["metric"].ne("output_tok_s")]
        out.append(
            {
                "time_scale": time_scale,
                "requests": len(trace),
                "median_abs_error": round(float(acc["rel_err"].abs().median()), 3),
                "rel_err": {f"{r.metric} p{r.percentile:.0f}": round(float(r.rel_err), 3) for r in acc.itertuples()},
            }
        )
    return out


def main() -> None:
    from toolkit._model.host import measure_host
    from toolkit._sweep.llama_server import LlamaServer, server_version

    load_before = os.getloadavg()[0]
    host = measure_host()  # one sample before the server starts (the report takes the best of three over its run)
    with LlamaServer(parallel=max(BATCHES)) as server:
        decode, prefill = _shape(server)
        replays = _replays(server, host)
        threads = server.threads
    load_after = os.getloadavg()[0]
    steps = decode["decode_step"].values()
    cores = os.cpu_count() or 1
    busy = load_before > cores / 2  # before the server starts: other work, not the server and client
    result = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "server": f"llama-server {server_version()}, --parallel {max(BATCHES)}, --threads {threads}",
        "repeats": REPEATS,
        **decode,
        "decode_step_max_off_line": round(max(abs(v["off_line"]) for v in steps if v["off_line"] is not None), 3),
        "decode_step_widest_repeat_spread": round(max(v["high_ms"] / v["low_ms"] - 1 for v in steps), 3),
        "prefill_alone": prefill,
        "replays": replays,
        "host_load_1m_before": load_before,
        "host_load_1m_after": load_after,
        "host_busy": busy,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "server_shape.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()

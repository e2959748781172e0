"""Benchmark: simulating a whole production hour (issue 15's target: under 10 s).

The Azure 2023 conversation trace (19,366 requests over 3,502 s) replayed by ``simulate(trace=)``
on the reference configuration, Llama-3.1-8B in fp16 on one H100 SXM, and the code trace beside it.
Best of three runs of process CPU time and wall clock, with the host's load average recorded.
Writes reports/bench/traces.json.

Then the prefix-cache capacity curve of the whole Mooncake conversation trace (issue 42's target:
under 1 s), ``reuse_curve`` at its default capacities, best of three, with the trace's load time
apart; writes reports/bench/prefix_reuse.json. ``--reuse`` runs this part alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import toolkit

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "bench"
RUNS = 3
TARGET_S = 10.0
REFERENCE = {"model": "Llama-3.1-8B", "gpu": "H100 SXM", "quant": "fp16"}
REUSE_TARGET_S = 1.0


def _best(trace) -> tuple[float, float, object]:
    best_cpu = best_wall = float("inf")
    for _ in range(RUNS):
        wall, cpu = time.perf_counter(), time.process_time()
        result = toolkit.simulate(REFERENCE["model"], REFERENCE["gpu"], REFERENCE["quant"], trace=trace)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, result


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    rows = {}
    for name in ("azure-conv-2023", "azure-code-2023"):
        trace = toolkit.load_trace(name)
        cpu_s, wall_s, result = _best(trace)
        summary = result.summary.iloc[0]
        rows[name] = {
            "requests": len(trace),
            "cpu_s": cpu_s,
            "wall_s": wall_s,
            "us_per_request": 1e6 * cpu_s / len(trace),
            "ttft_p99_s": float(summary["ttft_p99_s"]),
            "e2e_p99_s": float(summary["e2e_p99_s"]),
            "preemptions": int(summary["preemptions"]),
        }
    result = {
        "configuration": REFERENCE,
        "target_s": TARGET_S,
        "met": all(r["cpu_s"] < TARGET_S for r in rows.values()),
        "traces": rows,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "note": f"best of {RUNS} runs; CPU time of this process",
    }
    (OUT / "traces.json").write_text(json.dumps(result, indent=2))
    conv = rows["azure-conv-2023"]
    print(
        f"traces: the conversation hour ({conv['requests']} requests) in {conv['cpu_s']:.2f} s CPU "
        f"({conv['us_per_request']:.1f} us/request); target {TARGET_S:.0f} s: {'met' if result['met'] else 'MISSED'}"
    )


def reuse() -> None:
    from toolkit._workload.prefix import reuse_curve

    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    cpu = time.process_time()
    trace = toolkit.load_trace("mooncake-conversation")
    load_s = time.process_time() - cpu
    best_cpu = best_wall = float("inf")
    for _ in range(RUNS):
        wall, cpu = time.perf_counter(), time.process_time()
        curve = reuse_curve(trace)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    blocks = int(trace["prefix_blocks"].map(len).sum())
    result = {
        "trace": "mooncake-conversation",
        "requests": len(trace),
        "block_references": blocks,
        "capacities": len(curve),
        "cpu_s": best_cpu,
        "wall_s": best_wall,
        "load_trace_cpu_s": load_s,
        "unbounded_hit_rate": float(curve["hit_rate"].iloc[-1]),
        "target_s": REUSE_TARGET_S,
        "met": best_cpu < REUSE_TARGET_S,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "note": f"best of {RUNS} runs; CPU time of this process; the curve from the loaded trace",
    }
    (OUT / "prefix_reuse.json").write_text(json.dumps(result, indent=2))
    print(
        f"prefix reuse: the conversation trace's capacity curve ({blocks} block references) in {best_cpu:.3f} s "
        f"CPU; target {REUSE_TARGET_S:.0f} s: {'met' if result['met'] else 'MISSED'}"
    )


if __name__ == "__main__":
    if "--reuse" not in sys.argv[1:]:
        main()
    reuse()

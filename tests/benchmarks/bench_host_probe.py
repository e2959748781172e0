"""Benchmark: how much the host probe's best moves, the data behind ``best_of_hosts``'s uncertainty.

Takes ``SAMPLES`` ``measure_host()`` samples ``GAP_S`` apart on an idle host (about 3 minutes) and
writes reports/bench/host_probe.json: each sample's rates (GEMM GFLOP/s, copy GB/s), the uncertainty
``best_of_hosts`` gives all of them (the standard deviation of the samples outside a dip, or the
recorded run-to-run spread of a best where that is larger), and, for
each window of 3 consecutive samples (as many as the report takes), the window's best and the
uncertainty ``best_of_hosts`` gives it. The uncertainty is fit for purpose when a window's value is
about the spread of the windows' bests (the best of 3 varies less than one sample, so it may be
larger). Results from a busy host are marked as such.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
SAMPLES = 12
GAP_S = 15.0
WINDOW = 3


def main() -> None:
    from toolkit._model.host import best_of_hosts, measure_host
    from toolkit._sweep import host_state

    OUT.mkdir(parents=True, exist_ok=True)
    before = host_state.sample(None)
    started = dt.datetime.now().isoformat(timespec="seconds")
    rows = []
    for k in range(SAMPLES):
        rows.append(measure_host())
        if k < SAMPLES - 1:
            time.sleep(GAP_S)
    state = host_state.conditions(before, host_state.sample(None))
    gflops = [float(row["matmul_gflops"].iloc[0]) for row in rows]
    bandwidth = [float(row["bandwidth_gb_s"].iloc[0]) for row in rows]
    windows = []
    for start in range(0, SAMPLES - WINDOW + 1, WINDOW):
        best = best_of_hosts(rows[start : start + WINDOW]).iloc[0]
        windows.append(
            {
                "samples": f"{start + 1}-{start + WINDOW}",
                "gemm_best_gflops": round(float(best["matmul_gflops"]), 1),
                "gemm_relative_se": round(float(best["fp16_tflops_se"] / best["fp16_tflops"]), 4),
                "copy_best_gb_s": round(float(best["bandwidth_gb_s"]), 2),
                "copy_relative_se": round(float(best["bandwidth_gb_s_se"] / best["bandwidth_gb_s"]), 4),
            }
        )
    every = best_of_hosts(rows).iloc[0]
    gemm_bests = np.array([w["gemm_best_gflops"] for w in windows])
    copy_bests = np.array([w["copy_best_gb_s"] for w in windows])
    result = {
        "date": started,
        "cpu_count": os.cpu_count(),
        "samples": SAMPLES,
        "gap_s": GAP_S,
        # no server runs here, so busy is judged by the load average (toolkit._sweep.host_state)
        "load_1m": [round(state["load_1m_before"], 2), round(state["load_1m_after"], 2)],
        "host_busy": bool(state["busy"]),
        "gemm_gflops": [round(x, 1) for x in gflops],
        "copy_gb_s": [round(x, 2) for x in bandwidth],
        # best_of_hosts over all samples: the spread of the samples outside a dip, or the recorded floor
        "all_gemm_relative_se": round(float(every["fp16_tflops_se"] / every["fp16_tflops"]), 4),
        "all_copy_relative_se": round(float(every["bandwidth_gb_s_se"] / every["bandwidth_gb_s"]), 4),
        "windows": windows,
        # how much the best of a window moves from window to window (relative standard deviation)
        "window_best_gemm_relative_sd": round(float(gemm_bests.std(ddof=1) / gemm_bests.mean()), 4),
        "window_best_copy_relative_sd": round(float(copy_bests.std(ddof=1) / copy_bests.mean()), 4),
    }
    (OUT / "host_probe.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "windows"}, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: a 200-scenario simulate_grid on a LocalCluster of 2 worker processes against in-process.

The grid: Llama-3.1-8B fp16 on H100 SXM, lognormal prompts (mean 512, cv 1), geometric outputs (mean
128), 8,000 requests per scenario at 50 arrival rates (4 to 28.5 req/s) x 1 to 4 replicas: about a
fifth of a second of one core each. The cluster is started (and its workers warmed with a small grid)
before the timing, as a long-lived cluster would be; both paths must give the same frame. Target:
speedup (in-process wall / cluster wall) of at least 1.6 on this 2-core machine.

Per-task overhead: 200 tiny scenarios (10 requests each), one task each (``chunk_size=1``), on the
same cluster and in-process; the overhead per task is the worker time the cluster spends beyond the
in-process run, ``(cluster wall x workers - in-process wall) / tasks``. With the default chunk rule
(``ceil(200 / (4 x 2)) = 25`` scenarios per task, 8 tasks) that overhead is paid 8 times per grid.

Best of two runs of each (alternated). The host's load average before and after is recorded, and a
host already busy (1-minute load above half its CPUs before the run) is flagged: its figures then
understate the speedup. Writes reports/bench/grid.json.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
from dask.distributed import Client, LocalCluster

import toolkit

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "bench"
WORKERS = 2
RUNS = 2
TARGET_SPEEDUP = 1.6
BUSY_LOAD = 0.5 * (os.cpu_count() or 1)
BASE = {
    "model": "Llama-3.1-8B",
    "gpu": "H100 SXM",
    "quant": "fp16",
    "prompt_tokens": ("lognormal", 512, 1.0),
    "output_tokens": ("geometric", 128),
}
GRID = [
    {**BASE, "num_requests": 8000, "arrival_rate": 4.0 + 0.5 * i, "replicas": r}
    for i in range(50)
    for r in (1, 2, 3, 4)
]
TINY = [{**BASE, "num_requests": 10, "arrival_rate": 1.0 + 0.01 * i} for i in range(200)]


def _wall(scenarios: list[dict], **kwargs) -> tuple[float, pd.DataFrame]:
    start = time.perf_counter()
    table = toolkit.simulate_grid(scenarios, progress=False, **kwargs)
    return time.perf_counter() - start, table


def _best(scenarios: list[dict], client: Client, **kwargs) -> tuple[float, float, bool]:
    """(best in-process wall, best cluster wall, whether every run gave the same frame)."""
    here = there = float("inf")
    tables = []
    for _ in range(RUNS):
        wall, table = _wall(scenarios, **kwargs)
        here, tables = min(here, wall), [*tables, table]
        wall, table = _wall(scenarios, client=client, **kwargs)
        there, tables = min(there, wall), [*tables, table]
    same = all(t.equals(tables[0]) for t in tables[1:])
    return here, there, same


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    cluster = LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(cluster)
    startup_s = time.perf_counter() - start
    try:
        _wall(GRID[:8])  # imports and catalogs, here and on each worker
        _wall(GRID[:8], client=client, chunk_size=1)
        here_s, there_s, same = _best(GRID, client)
        tiny_here_s, tiny_there_s, tiny_same = _best(TINY, client, chunk_size=1)
    finally:
        client.close()
        cluster.close()
    overhead_s = (tiny_there_s * WORKERS - tiny_here_s) / len(TINY)
    per_task = -(-len(GRID) // (4 * WORKERS))  # the default chunk rule
    speedup = here_s / there_s
    result = {
        "scenarios": len(GRID),
        "workers": WORKERS,
        "in_process_s": here_s,
        "cluster_s": there_s,
        "speedup": speedup,
        "target_speedup": TARGET_SPEEDUP,
        "met": speedup >= TARGET_SPEEDUP,
        "identical_results": same,
        "tasks": -(-len(GRID) // per_task),
        "scenarios_per_task": per_task,
        "per_task_overhead_ms": overhead_s * 1e3,
        "per_task_overhead_note": (
            f"{len(TINY)} scenarios of 10 requests, chunk_size=1: (cluster wall x {WORKERS} workers - in-process wall) / tasks"
        ),
        "tiny_in_process_s": tiny_here_s,
        "tiny_cluster_s": tiny_there_s,
        "tiny_identical_results": tiny_same,
        "cluster_startup_s": startup_s,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": load_before > BUSY_LOAD,
        "cpus": os.cpu_count(),
        "note": f"best of {RUNS} runs each, wall clock; cluster started and warmed before timing",
    }
    (OUT / "grid.json").write_text(json.dumps(result, indent=2))
    busy = " (host busy: figures understate the speedup)" if result["host_busy"] else ""
    print(
        f"grid: {len(GRID)} scenarios in {here_s:.1f} s in-process, {there_s:.1f} s on {WORKERS} worker processes: "
        f"speedup {speedup:.2f}x (target {TARGET_SPEEDUP}: {'met' if result['met'] else 'MISSED'}), "
        f"per-task overhead {overhead_s * 1e3:.1f} ms{busy}"
    )


if __name__ == "__main__":
    main()

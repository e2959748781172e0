"""Benchmark: the continuous-batching simulator on 100,000 requests, one core.

Scenarios (each through the real cost model):

* ``chat``: Llama-3.1-8B fp16 on one H100 SXM, lognormal prompts (mean 512, cv 1) and geometric
  outputs (mean 256), Poisson arrivals at 20 req/s (about 60 sequences running);
* ``chat_4_replicas``: the same at 80 req/s over 4 replicas, least-loaded routing;
* ``kv_pressure``: Llama-3.1-8B on one L4 (about 4,000 KV tokens), 1,024-token prompts and
  geometric(512) outputs at 0.4 req/s (about 87% of what it sustains): the KV cache fills and requests are preempted;
* ``closed_loop``: 64 clients back to back, fixed 512 / 256 tokens on the H100.
* prefix caches (issue 42's target: at most 2x the CPU time per request of the same trace without
  ``prefix_blocks``), through vLLM's block cache: ``mooncake`` (the Mooncake conversation trace, 12,031
  requests in 512-token blocks, on 4 H100 replicas) and ``fine_blocks`` (the ``chat`` load whose prompts start
  with one of 100 system prompts, Zipf popularity, 1 to 8 blocks of 16 tokens, then blocks of their own: about
  40 blocks a request, the engine's own granularity).

Each is timed at 10k, 30k and 100k requests (best of two runs); the target is a couple of seconds
of one core for 100k. The target is judged on the process CPU time, which a machine shared with other
jobs inflates less than the wall clock (both are recorded). Writes reports/bench/simulator.json and
reports/bench/simulator.png (CPU time against requests) and prints a one-line summary.

Issue 13's targets: 1,000,000 requests under 8 us of CPU per request and under 300 MB of peak
memory (the whole process: interpreter, numpy and pandas, the request records and the result frame),
each run alone in a fresh process (``MILLION_SCENARIOS``). The host's load average is recorded and
the run marked ``host_busy`` when it exceeded half the CPUs: a busy host inflates CPU time too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from toolkit import load_trace, simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "bench"
SIZES = (10_000, 30_000, 100_000)
TARGET_S = 2.0
RUNS = 2
SCENARIOS = {
    "chat": dict(
        model="Llama-3.1-8B",
        gpu="H100 SXM",
        quant="fp16",
        prompt_tokens=("lognormal", 512, 1.0),
        output_tokens=("geometric", 256),
        arrival_rate=20.0,
    ),
    "chat_4_replicas": dict(
        model="Llama-3.1-8B",
        gpu="H100 SXM",
        quant="fp16",
        prompt_tokens=("lognormal", 512, 1.0),
        output_tokens=("geometric", 256),
        arrival_rate=80.0,
        replicas=4,
        routing="least_loaded",
    ),
    "kv_pressure": dict(
        model="Llama-3.1-8B",
        gpu="L4",
        quant="fp16",
        prompt_tokens=1024,
        output_tokens=("geometric", 512),
        arrival_rate=0.4,
    ),
    "closed_loop": dict(
        model="Llama-3.1-8B", gpu="H100 SXM", quant="fp16", prompt_tokens=512, output_tokens=256, concurrency=64
    ),
}

PREFIX_BLOCK = 16


def prefix_trace(n: int, seed: int = 0) -> pd.DataFrame:
    """The ``prefix_cache`` scenario's trace: ``n`` chat requests at 20 req/s, each prompt one of 100 system
    prompts (Zipf 1.1, 1 to 8 blocks) then blocks of its own (lognormal length, mean 512 tokens)."""
    rng = np.random.default_rng(seed)
    system = rng.integers(1, 9, 100)
    pick = np.minimum(rng.zipf(1.1, n), 100) - 1
    own = np.maximum(np.rint(rng.lognormal(np.log(512) - 0.35, np.sqrt(np.log(2)), n)), 1).astype(int)
    prompt = system[pick] * PREFIX_BLOCK + own
    next_id = 1000
    blocks = []
    for i in range(n):
        k = -(-int(own[i]) // PREFIX_BLOCK)
        blocks.append(tuple(range(pick[i] * 10, pick[i] * 10 + system[pick[i]])) + tuple(range(next_id, next_id + k)))
        next_id += k
    trace = pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.exponential(1 / 20.0, n)),
            "prompt_tokens": prompt,
            "output_tokens": rng.geometric(1 / 256, n),
            "prefix_blocks": blocks,
        }
    )
    trace.attrs["prefix_block_tokens"] = PREFIX_BLOCK
    return trace


PREFIX_MODEL = dict(model="Llama-3.1-8B", gpu="H100 SXM", quant="fp16")


def mooncake_trace() -> pd.DataFrame:
    """The Mooncake conversation trace (shipped with the package) with its ``prefix_blocks``."""
    return load_trace("mooncake-conversation")


def prefix_ratios(n: int) -> dict[str, dict[str, float]]:
    """Per prefix scenario, CPU seconds with and without the cache (best of ``RUNS``) and their ratio."""
    out = {}
    scenarios = {"fine_blocks": (prefix_trace(n), {}), "mooncake": (mooncake_trace(), {"replicas": 4})}
    for name, (trace, extra) in scenarios.items():
        times = {}
        for key, frame in (("cache_cpu_s", trace), ("no_cache_cpu_s", trace.drop(columns="prefix_blocks"))):
            best = float("inf")
            for _ in range(RUNS):
                cpu = time.process_time()
                simulate(trace=frame, **PREFIX_MODEL, **extra)
                best = min(best, time.process_time() - cpu)
            times[key] = best
        out[name] = {"requests": len(trace), **times, "ratio": times["cache_cpu_s"] / times["no_cache_cpu_s"]}
    return out


MILLION = 1_000_000
MILLION_SCENARIOS = ("chat", "chat_4_replicas", "closed_loop")
MILLION_TARGETS = {"us_per_request": 8.0, "peak_rss_mb": 300.0}
# one scenario in a fresh interpreter: CPU seconds of simulate() and the process's peak RSS
_FRESH = """
import json, resource, sys, time
sys.path.insert(0, {bench_dir!r})
from bench_simulator import SCENARIOS
from toolkit import simulate
kwargs = SCENARIOS[{name!r}]
simulate(num_requests=1000, **kwargs)  # imports and catalogs outside the timing
start = time.process_time()
simulate(num_requests={n}, **kwargs)
cpu = time.process_time() - start
print(json.dumps([cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""


def _million(name: str) -> dict[str, float]:
    code = _FRESH.format(bench_dir=str(Path(__file__).resolve().parent), name=name, n=MILLION)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    cpu, rss_mb = json.loads(out.stdout.strip().splitlines()[-1])
    return {"cpu_s": cpu, "us_per_request": cpu / MILLION * 1e6, "peak_rss_mb": rss_mb}


def _time(kwargs: dict, n: int) -> tuple[float, float, dict]:
    best_cpu, best_wall, summary = float("inf"), float("inf"), {}
    for _ in range(RUNS):
        cpu, wall = time.process_time(), time.perf_counter()
        result = simulate(num_requests=n, **kwargs)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
        summary = result.summary.iloc[0].to_dict()
    return best_cpu, best_wall, summary


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    million = {name: _million(name) for name in MILLION_SCENARIOS}
    load_million = os.getloadavg()[0]
    million_busy = max(load_before, load_million) > (os.cpu_count() or 1) / 2
    results = {}
    for name, kwargs in SCENARIOS.items():
        rows = []
        for n in SIZES:
            cpu, wall, summary = _time(kwargs, n)
            rows.append({"requests": n, "cpu_s": cpu, "wall_s": wall, "requests_per_cpu_s": n / cpu})
            if n == SIZES[-1]:
                results[name] = {
                    "config": {k: str(v) for k, v in kwargs.items()},
                    "timings": rows,
                    "summary_100k": {k: float(v) for k, v in summary.items()},
                }
    prefix = {"scenarios": prefix_ratios(SIZES[-1]), "target_ratio": 2.0}
    worst = max(r["timings"][-1]["cpu_s"] for r in results.values())
    load_after = os.getloadavg()[0]
    report = {
        "target_s_per_100k": TARGET_S,
        "worst_s_per_100k": worst,
        "meets_target": worst <= TARGET_S,
        "scenarios": results,
        "prefix_cache": prefix,
        "million": {
            "requests": MILLION,
            "scenarios": million,
            "targets": MILLION_TARGETS,
            "meets": {
                key: all(run[key] <= limit for run in million.values()) for key, limit in MILLION_TARGETS.items()
            },
            "host_load_1m_before": load_before,
            "host_load_1m_after": load_million,
            "host_busy": million_busy,
            "note": (
                "CPU time of simulate() and peak RSS of the whole process, each scenario alone in a fresh "
                "process; the same results as before for a fixed seed are checked by "
                "tests/test_simulator_golden.py"
                + ("; HOST BUSY (load above half the CPUs): the CPU times are upper bounds" if million_busy else "")
            ),
        },
        "host_load_1m_before": load_before,
        "host_load_1m_after": load_after,
        "host_cpus": os.cpu_count(),
        "host_busy": max(load_before, load_after) > (os.cpu_count() or 1) / 2,
    }
    (OUT / "simulator.json").write_text(json.dumps(report, indent=2))

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, res in results.items():
        ax.plot([r["requests"] for r in res["timings"]], [r["cpu_s"] for r in res["timings"]], marker="o", label=name)
    ax.axhline(TARGET_S, color="grey", linestyle="--", linewidth=1, label=f"target {TARGET_S:g} s / 100k")
    ax.set_xlabel("requests simulated")
    ax.set_ylabel("CPU time (s, one core)")
    ax.set_title("toolkit.simulate: event-driven continuous batching")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "simulator.png", dpi=120)
    plt.close(fig)

    parts = ", ".join(
        f"{name} {res['timings'][-1]['cpu_s']:.2f} s ({res['summary_100k']['preemptions']:.0f} preemptions)"
        for name, res in results.items()
    )
    print(f"simulator: 100k requests in CPU {parts}; target {TARGET_S:g} s: {'met' if worst <= TARGET_S else 'MISSED'}")
    ratios = ", ".join(f"{k} {v['ratio']:.2f}x" for k, v in prefix["scenarios"].items())
    print(f"simulator, prefix cache: {ratios} the CPU time without it (target 2x)")
    print(
        "simulator, 1M requests: "
        + ", ".join(f"{k} {v['us_per_request']:.1f} us/req, {v['peak_rss_mb']:.0f} MB" for k, v in million.items())
        + f"; targets {MILLION_TARGETS['us_per_request']:g} us/req, {MILLION_TARGETS['peak_rss_mb']:g} MB; "
        f"host load {max(load_before, load_after):.1f}"
    )


if __name__ == "__main__":
    main()

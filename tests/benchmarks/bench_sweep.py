"""Harness overhead: client CPU per streamed token, against a local server that streams instantly.

The server (tests/streaming_server.py) runs in its own process, so the CPU time measured here
(``time.process_time`` of this process: the event loop, SSE parsing, bookkeeping) is the harness's
alone. The largest token rate one core sustains is the inverse of the CPU time per token: a real
server streaming slower than that leaves the harness idle between chunks, so its timings are not
distorted by the client. Writes reports/bench/sweep.json and reports/bench/sweep.png.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import toolkit  # noqa: E402

OUT = ROOT / "reports" / "bench"
LANES = 32
TOKENS_PER_LANE = 512
LIMITS = (1, 8, 32)


def main() -> None:
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "streaming_server.py"), str(TOKENS_PER_LANE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(server.stdout.readline())
        prompts = [f"lane {i}" for i in range(LANES)]
        # warm-up: first-call costs (lazy imports, the thread pool) are not per-token overhead
        toolkit.run_sweep(f"http://127.0.0.1:{port}", "bench", prompts[:2], limits=(2,), progress=False)
        rows = []
        for limit in LIMITS:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            result = toolkit.run_sweep(
                f"http://127.0.0.1:{port}",
                "bench",
                prompts,
                limits=(limit,),
                max_tokens=TOKENS_PER_LANE,
                progress=False,
            )
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            tokens = float(result.levels["output_tokens"].sum())
            rows.append(
                {
                    "in_flight": limit,
                    "lanes": LANES,
                    "tokens": tokens,
                    "client_cpu_s": cpu,
                    "wall_s": wall,
                    "cpu_us_per_token": cpu / tokens * 1e6,
                    "one_core_tok_s": tokens / cpu,
                    "observed_tok_s": tokens / wall,
                }
            )
    finally:
        server.terminate()
        server.wait(10)
    top = rows[-1]
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {
        "what": "sweep harness client CPU per streamed token against an instant local server (own process)",
        "lanes": LANES,
        "tokens_per_lane": TOKENS_PER_LANE,
        "cpu_us_per_token_at_32": top["cpu_us_per_token"],
        "one_core_tok_s_at_32": top["one_core_tok_s"],
        "levels": rows,
    }
    (OUT / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar([str(r["in_flight"]) for r in rows], [r["cpu_us_per_token"] for r in rows], color="#00897B")
    ax.set_xlabel("lanes in flight")
    ax.set_ylabel("client CPU per token (µs)")
    ax.set_title(f"Sweep harness overhead ({LANES} lanes x {TOKENS_PER_LANE} tokens)", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT / "sweep.png", dpi=120)
    print(
        f"sweep harness: {top['cpu_us_per_token']:.1f} µs client CPU per token at 32 lanes "
        f"-> one core sustains {top['one_core_tok_s']:,.0f} tok/s"
    )


if __name__ == "__main__":
    main()

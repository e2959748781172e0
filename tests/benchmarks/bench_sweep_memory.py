"""Benchmark: a sweep's peak memory against a server that sends a 400 MB line or a gzip bomb.

Issue 12's target: peak RSS under 200 MB. Each case runs a two-lane sweep in a fresh child process
(the sweep's memory only; the hostile server runs in this process) against the loopback fault
server from the tests: one lane hostile, one normal. The child reports its own peak RSS
(``ru_maxrss``) and what became of each lane. A baseline case (two normal lanes) shows what the
imports alone cost. Writes reports/bench/sweep_memory.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fault_server import FaultServer  # noqa: E402

OUT = ROOT / "reports" / "bench"
TARGET_MB = 200.0
HOSTILE_BYTES = 400 << 20

CHILD = """
import json, resource, sys, warnings
import toolkit
warnings.simplefilter("ignore")
res = toolkit.run_sweep(sys.argv[1], "fault-model", json.loads(sys.argv[2]), limits=(2,), progress=False,
                        tag_levels=False, timeout_s=120)
lanes = res.lanes.set_index("lane").sort_index()
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "outcomes": lanes["outcome"].tolist(), "errors": [e[:120] for e in lanes["error"]]}))
"""


def _case(fault: str | None, **server) -> dict:
    prompts = ["normal lane", f"hostile lane [[fault:{fault}]]" if fault else "second normal lane"]
    with FaultServer(lifetime_s=600, **server) as srv:
        began = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", CHILD, srv.base_url, json.dumps(prompts)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=True,
        )
        wall_s = time.perf_counter() - began
    return {**json.loads(child.stdout.strip().splitlines()[-1]), "wall_s": wall_s}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    cases = {
        "baseline (two normal lanes)": _case(None),
        "400 MB SSE line without a newline": _case("huge_line", huge_bytes=HOSTILE_BYTES),
        "gzip bomb (400 MB of zeros)": _case("gzip_bomb", huge_bytes=HOSTILE_BYTES),
    }
    result = {
        "target_peak_rss_mb": TARGET_MB,
        "met": all(c["peak_rss_mb"] < TARGET_MB for c in cases.values()),
        "cases": cases,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "cores": os.cpu_count(),
    }
    result["host_busy"] = result["host_load_1m_before"] > 0.5 * (os.cpu_count() or 1)
    (OUT / "sweep_memory.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, case in cases.items():
        print(f"{name}: peak RSS {case['peak_rss_mb']:.0f} MB, lanes {case['outcomes']}, {case['wall_s']:.1f} s")
    print(f"target < {TARGET_MB:.0f} MB: {'met' if result['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()

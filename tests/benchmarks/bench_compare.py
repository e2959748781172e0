"""Benchmark: does ``compare_runs`` find a changed server flag, and only that (issue 45)?

Three sweeps of the local llama-server (Gemma-3-270M, one thread), each on a fresh server so that no
run finds another's prompts in the prompt cache, each with repeats so that the intervals see what
moves between repeats on a shared host: ``base`` (``--parallel 2``), ``repeat`` (the same
configuration again) and ``one_slot`` (``--parallel 1``). ``compare_runs(base, one_slot)`` should
name the changed flag and flag the time per output token (one slot decodes each request alone on the
thread, where two slots share its steps); ``compare_runs(base, repeat)`` should flag no more than
chance allows (5% of the level metrics at 95% confidence).

Writes reports/bench/compare.json and reports/bench/compare.html (the changed-flag comparison as the
``compare --html`` page). The host's load before and after and the other processes' CPU share during
each sweep are recorded; a busy host is marked.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"
PROMPTS = [f"Name one use of the number {i} in a single short sentence." for i in range(8)]
WARM_UP = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
REPEATS = 3
MEDIANS = ("ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms")


def _sweep(folder: Path, *, parallel: int) -> dict:
    import httpx

    import toolkit as tk
    from toolkit._sweep import host_state

    with tk.LlamaServer(parallel=parallel, threads=1, ctx_per_slot=512) as server:
        httpx.post(f"{server.base_url}/v1/chat/completions", json=WARM_UP, timeout=60).raise_for_status()
        before = host_state.sample(server.pid)
        tk.run_sweep(
            server.base_url,
            None,
            PROMPTS,
            limits=(2,),
            max_tokens=16,
            repeats=REPEATS,
            out_dir=folder,
            progress=False,
        )
        state = host_state.conditions(before, host_state.sample(server.pid))
    return {k: (round(float(v), 3) if not isinstance(v, bool) else v) for k, v in state.items()}


def _summary(comparison) -> dict:
    metrics = comparison.metrics.set_index("metric")
    flagged = metrics[metrics["beyond_noise"]]
    return {
        "conditions_that_differ": {r.condition: [r.a, r.b] for r in comparison.conditions.itertuples()},
        "level_metrics": len(metrics),
        "flagged": list(flagged.index),
        "medians": {
            m: {
                "a": round(float(metrics.loc[m, "a"]), 2),
                "b": round(float(metrics.loc[m, "b"]), 2),
                "diff": round(float(metrics.loc[m, "diff"]), 2),
                "ci": [round(float(metrics.loc[m, "ci_low"]), 2), round(float(metrics.loc[m, "ci_high"]), 2)],
                "beyond_noise": bool(metrics.loc[m, "beyond_noise"]),
                "method": str(metrics.loc[m, "method"]),
            }
            for m in (*MEDIANS, "dec_tok_s")
        },
    }


def main() -> None:
    import toolkit as tk
    from toolkit._report.compare_chart import _compare_page
    from toolkit._sweep.host_state import BUSY_LOAD_PER_CORE

    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    started = dt.datetime.now().isoformat(timespec="seconds")
    with TemporaryDirectory() as tmp:
        runs = {name: Path(tmp) / name for name in ("base", "repeat", "one_slot")}
        hosts = {name: _sweep(folder, parallel=1 if name == "one_slot" else 2) for name, folder in runs.items()}
        changed = tk.compare_runs(runs["base"], runs["one_slot"], seed=1)
        same = tk.compare_runs(runs["base"], runs["repeat"], seed=1)
        page = _compare_page(changed, name_a="--parallel 2 (base)", name_b="--parallel 1 (one_slot)")
    tpot = changed.metrics.set_index("metric").loc["tpot_p50_ms"]
    repeat = _summary(same)
    busy = load_before > BUSY_LOAD_PER_CORE * cores or any(h["busy"] for h in hosts.values())
    result = {
        "date": started,
        "ended": dt.datetime.now().isoformat(timespec="seconds"),
        "server": "llama-server, Gemma-3-270M, --threads 1, --ctx-size 512 per slot",
        "workload": {"prompts": len(PROMPTS), "max_tokens": 16, "in_flight": 2, "repeats": REPEATS},
        "changed_flag": _summary(changed),
        "same_configuration": repeat,
        "change_found": bool(
            "server_flags" in set(changed.conditions["condition"]) and tpot["beyond_noise"] and tpot["diff"] < 0
        ),
        "repeat_flags": len(repeat["flagged"]),
        "repeat_flags_expected_by_chance": round(0.05 * repeat["level_metrics"], 2),
        "repeat_medians_flagged": sum(v["beyond_noise"] for k, v in repeat["medians"].items() if k in MEDIANS),
        "host_per_sweep": hosts,
        "host_cores": cores,
        "host_load_1m_before": load_before,
        "host_load_1m_after": os.getloadavg()[0],
        "host_busy": bool(busy),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compare.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "compare.html").write_text(page, encoding="utf-8")
    keys = ("change_found", "repeat_flags", "repeat_flags_expected_by_chance", "repeat_medians_flagged", "host_busy")
    print(json.dumps({k: result[k] for k in keys}, indent=1))
    print("changed:", result["changed_flag"]["flagged"], "\nrepeat:", repeat["flagged"])
    if busy:
        print("host was busy: these figures are not representative", file=sys.stderr)


if __name__ == "__main__":
    main()

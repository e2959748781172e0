"""The toolkit's own sweep folder (``out_dir``: ``levels.csv``, ``runs.csv``, ``lanes.jsonl``, ``run.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit._files import read_user_text
from toolkit._interop.frames import make_run
from toolkit._sweep.files import LANES_FILE, LEVELS_FILE, RUN_FILE, RUNS_FILE
from toolkit._sweep.levels import AGGREGATE_COLUMNS, RUN_COLUMNS
from toolkit._sweep.records import LANE_COLUMNS
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "toolkit-sweep"
MAX_BYTES = 256 * 2**20


def looks_like(folder: Path) -> bool:
    """Whether ``folder`` holds a sweep's tables."""
    return folder.is_dir() and (folder / LEVELS_FILE).is_file()


def read(folder: Path) -> SweepResult:
    """The sweep in ``folder``: its levels and runs as written, its lane records when kept."""
    levels = _csv(folder / LEVELS_FILE, AGGREGATE_COLUMNS)
    runs = _csv(folder / RUNS_FILE, RUN_COLUMNS) if (folder / RUNS_FILE).is_file() else levels.assign(repeat=1)
    lanes = pd.DataFrame(columns=LANE_COLUMNS)
    if (folder / LANES_FILE).is_file():
        text = read_user_text("path", folder / LANES_FILE, max_bytes=MAX_BYTES)
        records = []
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line from a kill mid-write (files.py)
        lanes = pd.DataFrame(records).reindex(columns=LANE_COLUMNS)
        lanes["itl_ms"] = lanes["itl_ms"].map(lambda v: v if isinstance(v, list) else [])
    run: dict[str, Any] = {}
    if (folder / RUN_FILE).is_file():
        run = json.loads(read_user_text("path", folder / RUN_FILE, max_bytes=MAX_BYTES))
    params = run.get("params", {}) if isinstance(run, dict) else {}
    env = params.get("environment") or {}  # recorded since the sweep writes its environment
    conditions = {
        "model": params.get("model"),
        "tool": "toolkit sweep",
        "tool_version": run.get("toolkit_version"),
        "workload": {k: params.get(k) for k in ("lanes", "prompts_sha256", "max_tokens", "arrivals", "seed")},
        **(env if isinstance(env, dict) else {}),
    }
    version = f"toolkit {run.get('toolkit_version', '(no run.json)')}"
    result = make_run(lanes, levels, fmt=FORMAT, version=version, conditions=conditions, source=str(folder))
    merged = {**params, **result.params}
    return SweepResult(
        lanes=result.lanes, levels=result.levels, runs=runs, params=merged, stopped=run.get("status", "")
    )


def _csv(path: Path, columns: list[str]) -> pd.DataFrame:
    from io import StringIO

    frame = pd.read_csv(StringIO(read_user_text("path", path, max_bytes=MAX_BYTES)), comment="#")
    missing = [c for c in ("in_flight", "dec_tok_s") if c not in frame.columns]
    if missing:
        raise ValueError(f"path: {path} is not a sweep table (no {', '.join(missing)} column)")
    return frame.reindex(columns=[*columns, *(c for c in frame.columns if c not in columns)])

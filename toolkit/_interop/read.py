"""Read another benchmark tool's run (or the toolkit's own sweep folder) into the toolkit's frames."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit._files import read_user_text
from toolkit._interop import aiperf, guidellm, inference_perf, own, perf_analyzer, vllm
from toolkit._interop.frames import lanes_frame, levels_frame, make_run
from toolkit._sweep.result import SweepResult

__all__ = ["read_run"]

MAX_BYTES = 512 * 2**20
_AIPERF_FILES = ("profile_export_aiperf.json", "profile_export_genai_perf.json")


def read_run(path: str | os.PathLike) -> SweepResult:
    """Read a benchmark run made by another tool, or by the toolkit, into a :class:`~toolkit.SweepResult`.

    Recognised (by content, not by file name):

    - vLLM's ``vllm bench serve`` / ``benchmark_serving.py`` result JSON, with or without
      ``--save-detailed`` per-request lists;
    - a GuideLLM benchmarks report (JSON or YAML), one level per benchmark;
    - AIPerf's (or genai-perf's) ``profile_export_aiperf.json`` summary, its ``.csv``, and the per-request
      ``profile_export.jsonl`` (a folder holding them reads the JSONL with the summary's settings);
    - perf_analyzer's per-request ``profile_export.json``, which genai-perf reads (a folder holding it
      and ``profile_export_genai_perf.json`` gives genai-perf's level with these requests);
    - an inference-perf lifecycle report (``stage_<n>_lifecycle_metrics.json``);
    - the toolkit's own sweep folder (``levels.csv``, ``runs.csv``, ``lanes.jsonl``, ``run.json``);
    - a folder of result files of one of these formats (a ``vllm bench serve`` sweep writes one file per
      concurrency or rate): one run with their levels side by side, so that the batching verdicts compare them.

    Parameters
    ----------
    path : str or os.PathLike
        The result file, or a folder (the toolkit's ``out_dir``, AIPerf's artifact folder, or result files).

    Returns
    -------
    SweepResult
        ``lanes`` (one row per request where the file has them, else empty), ``levels`` and ``runs``
        with the sweep's columns and units (ms for latencies, tokens/s, s); a figure the file does not
        hold is NaN and the level's ``reason`` says why, never zero. Every frame's ``attrs`` (and
        ``params``) names the ``format``, the ``version`` understood, the ``source``, the run's
        ``conditions`` (engine, model, tool, workload, ...) and the ``reasons``; ``attrs["summary"]``
        keeps the tool's own totals where it printed them. The levels carry the sweep's ``speedup``,
        ``tok_s_gain``, ``elasticity`` and batching ``verdict`` relative to the first level.

    Raises
    ------
    ValueError
        A path that is missing, not a regular file or folder, too large, or not a format listed above.
    """
    try:
        target = Path(os.fspath(path))
    except TypeError:
        raise ValueError(f"path must be a file or folder path, got {type(path).__name__}") from None
    if target.is_dir():
        return _read_folder(target)
    text = read_user_text("path", target, max_bytes=MAX_BYTES)
    source = str(target)
    doc = _parse(text)
    if doc is not None:
        run = _read_doc(doc, source=source, folder=target.parent)
        if run is not None:
            return run
    if aiperf.looks_like_csv(text):
        return aiperf.read_summary(aiperf.csv_to_summary(text), source=source)
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("{") and aiperf.looks_like_record(_parse(first)):
        beside = _aiperf_summary(target.parent)
        return aiperf.read_records(aiperf.parse_jsonl(text, source=source), source=source, summary=beside)
    raise ValueError(
        f"path: {source} is not a run this toolkit reads (vLLM bench serve JSON, GuideLLM report, AIPerf or "
        "genai-perf export, perf_analyzer profile export, inference-perf lifecycle report, or a toolkit sweep folder)"
    )


def _read_doc(doc: Any, *, source: str, folder: Path) -> SweepResult | None:
    if vllm.looks_like(doc):
        return vllm.read(doc, source=source)
    if guidellm.looks_like(doc):
        return guidellm.read(doc, source=source)
    if aiperf.looks_like_summary(doc):
        return aiperf.read_summary(doc, source=source)
    if inference_perf.looks_like(doc):
        return inference_perf.read(doc, source=source)
    if perf_analyzer.looks_like(doc):
        return perf_analyzer.read(doc, source=source)
    return None


def _read_folder(folder: Path) -> SweepResult:
    if own.looks_like(folder):
        return own.read(folder)
    records = folder / "profile_export.jsonl"
    if records.is_file():
        text = read_user_text("path", records, max_bytes=MAX_BYTES)
        return aiperf.read_records(
            aiperf.parse_jsonl(text, source=str(records)), source=str(records), summary=_aiperf_summary(folder)
        )
    requests = folder / "profile_export.json"  # genai-perf's folder: its summary, perf_analyzer's requests
    summary = _aiperf_summary(folder)
    if summary is not None and requests.is_file():
        doc = _parse(read_user_text("path", requests, max_bytes=MAX_BYTES))
        if perf_analyzer.looks_like(doc):
            lanes = lanes_frame(perf_analyzer.read_lanes(doc)[0])
            return aiperf.read_summary(summary, source=str(folder), lanes=lanes)
    for name in _AIPERF_FILES:
        if (folder / name).is_file():
            return read_run(folder / name)
    files = sorted(f for f in folder.iterdir() if f.suffix in (".json", ".yaml", ".yml") and f.is_file())
    if not files:
        raise ValueError(
            f"path: {folder} is a folder without levels.csv (a toolkit sweep), AIPerf exports or result files"
        )
    return _combine([read_run(f) for f in files], source=str(folder))


def _combine(runs: list[SweepResult], *, source: str) -> SweepResult:
    """One run of a folder of result files (``vllm bench serve`` writes one file per concurrency or rate): their
    levels side by side, as a sweep's, with the conditions every file shares."""
    formats = {r.levels.attrs["format"] for r in runs}
    if len(formats) > 1:
        raise ValueError(f"path: {source} holds runs of several formats {sorted(formats)}; compare them instead")
    first = runs[0].levels.attrs
    conditions = {
        k: v for k, v in first["conditions"].items() if all(r.levels.attrs["conditions"].get(k) == v for r in runs)
    }
    lanes = [r.lanes for r in runs if len(r.lanes)]
    rows = [row for r in runs for row in r.levels.to_dict("records")]
    return make_run(
        pd.concat(lanes, ignore_index=True) if lanes else runs[0].lanes,
        levels_frame(rows),
        fmt=first["format"],
        version=first["version"],
        conditions=conditions,
        source=source,
        summary={"files": [r.levels.attrs["source"] for r in runs]},
    )


def _aiperf_summary(folder: Path) -> dict[str, Any] | None:
    for name in _AIPERF_FILES:
        if (folder / name).is_file():
            doc = _parse(read_user_text("path", folder / name, max_bytes=MAX_BYTES))
            if aiperf.looks_like_summary(doc):
                return doc
    return None


def _parse(text: str) -> Any:
    """JSON, else YAML (GuideLLM writes either), else None."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) or "\n" not in stripped or ":" not in stripped.split("\n", 1)[0]:
        return None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None

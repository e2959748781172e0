"""NVIDIA AIPerf's exports (and genai-perf's, the same layout): the summary JSON or CSV and the per-request JSONL.

``profile_export_aiperf.json`` (genai-perf: ``profile_export_genai_perf.json``) maps each metric to
``{"unit": ..., "avg": ..., "p50": ..., ...}`` next to ``input_config`` (the run's settings:
``phases[].concurrency``/``request_rate`` in AIPerf, ``loadgen`` in its early releases,
``perf_analyzer.stimulus`` in genai-perf 0.0.16, top-level ``concurrency``/``request_rate`` in older
genai-perf) and ``aiperf_version``/``schema_version`` (genai-perf names no version).
``profile_export.jsonl`` holds one request a line: ``metadata`` (``request_start_ns``,
``request_end_ns``, ``benchmark_phase``) and ``metrics`` (``{"value": ..., "unit": ...}``), or an
``error``. ``profile_export_aiperf.csv`` has one row per metric (``Metric,avg,min,max,...,p50,...``);
genai-perf's CSV adds a second table (``Metric,Value``) for the throughputs and the request count.
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pandas as pd

from toolkit._interop.frames import NAN, lanes_frame, level_from_lanes, levels_frame, make_run, number
from toolkit._sweep.levels import percentiles
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "aiperf"
_MS = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "ns": 1e-6, "us": 1e-3}
_LATENCIES = {  # our column stem -> the tool's metric
    "ttft": "time_to_first_token",
    "tpot": "inter_token_latency",
    "e2e": "request_latency",
}


def looks_like_summary(doc: Any) -> bool:
    """Whether ``doc`` is an AIPerf or genai-perf summary export."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("request_throughput"), dict)
        and "unit" in doc["request_throughput"]
        and ("input_config" in doc or "aiperf_version" in doc)
    )


def looks_like_record(doc: Any) -> bool:
    """Whether ``doc`` is one line of AIPerf's per-request export."""
    return isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and "request_start_ns" in doc["metadata"]


def _value(stat: Any, key: str = "avg") -> float:
    """One statistic of a summary metric in ms (or its own unit when it is no duration)."""
    if not isinstance(stat, dict):
        return NAN
    scale = _MS.get(str(stat.get("unit", "")), 1.0)
    return number(stat.get(key)) * scale


def _tool(doc: dict[str, Any]) -> tuple[str, str]:
    """(format, version understood): AIPerf names its version; genai-perf's exports name none, so the
    version says which layout was read."""
    if "aiperf_version" in doc:
        return FORMAT, f"aiperf {doc['aiperf_version']}, schema {doc.get('schema_version', '?')}"
    if isinstance(doc.get(_CSV_TOOL), tuple):
        return doc[_CSV_TOOL]
    if isinstance(doc.get("input_config"), dict):
        if isinstance(_stimulus(doc["input_config"]), dict):
            return "genai-perf", "genai-perf (no version field; input_config.perf_analyzer.stimulus, as 0.0.16 writes)"
        return "genai-perf", "genai-perf (no version field; flat input_config of its older releases)"
    return FORMAT, "aiperf (no version field)"


def _stimulus(config: dict[str, Any]) -> Any:
    analyzer = config.get("perf_analyzer")
    return analyzer.get("stimulus") if isinstance(analyzer, dict) else None


def _load(config: dict[str, Any]) -> tuple[float, float]:
    """(concurrency, request rate) from an ``input_config`` of any release."""
    phases = [
        p for p in config.get("phases") or [] if isinstance(p, dict) and p.get("kind", "profiling") == "profiling"
    ]
    stimulus = _stimulus(config)
    source = (
        phases[0]
        if phases
        else config.get("loadgen")
        if isinstance(config.get("loadgen"), dict)
        else stimulus
        if isinstance(stimulus, dict)
        else config
    )
    return number(source.get("concurrency")), number(source.get("request_rate"))


def _conditions(doc: dict[str, Any], tool: str, version: str) -> dict[str, Any]:
    config = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    models = config.get("models") or config.get("model_names")
    if isinstance(models, dict):
        models = [m.get("name") for m in models.get("items", []) if isinstance(m, dict)]
    endpoint = config.get("endpoint") if isinstance(config.get("endpoint"), dict) else {}
    return {
        "model": ", ".join(map(str, models)) if isinstance(models, list) else models,
        "tool": tool,
        "tool_version": version,
        "workload": {k: config[k] for k in ("phases", "loadgen", "input", "datasets") if k in config}
        | ({"endpoint": endpoint.get("type")} if endpoint.get("type") else {}),
    }


def read_summary(doc: dict[str, Any], *, source: str, lanes: pd.DataFrame | None = None) -> SweepResult:
    """The one-level run of a summary export; ``lanes`` are its requests where another file holds them
    (genai-perf's folder: perf_analyzer's ``profile_export.json``)."""
    tool, version = _tool(doc)
    concurrency, rate = _load(doc.get("input_config") or {})
    beside = "perf_analyzer's profile_export.json" if tool == "genai-perf" else "profile_export.jsonl"
    reasons = [] if lanes is not None else [f"per-request columns: a summary export; {beside} holds them"]
    count = _value(doc.get("request_count"))
    errors = _value(doc.get("error_request_count"))
    if math.isnan(errors):
        errors = 0.0 if doc.get("error_summary") == [] else NAN
    if math.isnan(errors):
        reasons.append(f"lanes_failed: the {tool} export counts no failed requests")
    wall = _value(doc.get("benchmark_duration")) / 1000  # reported in s
    row: dict[str, Any] = {
        "in_flight": concurrency,
        "rate_rps": rate,
        "lanes_ok": count,
        "lanes_failed": errors,
        "lanes": count + errors,
        "attempts": count + errors,
        "wall_s": wall,
        "output_tokens": _value(doc.get("total_output_tokens")),
        "prompt_tokens": _value(doc.get("total_isl")),
        "dec_tok_s": _value(doc.get("output_token_throughput")),
        "achieved_rps": _value(doc.get("request_throughput")),
        "input_tok_s": _value(doc.get("input_token_throughput")),
        "total_tok_s": _value(doc.get("total_token_throughput")),
    }
    # genai-perf has no totals: the mean length times the count, a whole number of tokens up to float rounding
    for total, mean in (("output_tokens", "output_sequence_length"), ("prompt_tokens", "input_sequence_length")):
        if math.isnan(row[total]) and not math.isnan(_value(doc.get(mean)) * count):
            row[total] = float(round(_value(doc.get(mean)) * count))
    if math.isnan(wall):  # genai-perf: its output token throughput is the output tokens over the duration
        row["wall_s"] = row["output_tokens"] / row["dec_tok_s"]
        reasons.append("wall_s: output tokens over output token throughput (the export has no duration)")
    for ours, theirs in _LATENCIES.items():
        for p in (50, 95, 99):
            row[f"{ours}_p{p}_ms"] = _value(doc.get(theirs), f"p{p}")
    itl = doc.get("inter_chunk_latency")
    for p in (50, 95, 99):  # the gaps between chunks, as the sweep's ITL is
        row[f"itl_p{p}_ms"] = _value(itl, f"p{p}")
    if not isinstance(itl, dict) and lanes is not None:  # the gaps between the requests' content events
        row.update({k: v for k, v in percentiles(lanes[lanes["outcome"] == "ok"]).items() if k.startswith("itl")})
    elif not isinstance(itl, dict):
        reasons.append("itl percentiles: the export has no inter_chunk_latency")
    cached = _value(doc.get("overall_usage_prompt_cache_read_pct"))
    row["provider_cached_rate"] = cached / 100
    reasons.append(f"prefix_hit_rate: {tool} records no server cache counters")
    row["reason"] = reasons
    levels = levels_frame([row])
    summary = {
        "request_count": count,
        "median_ttft_ms": row["ttft_p50_ms"],
        "total_output_tokens": row["output_tokens"],
    }
    return make_run(
        lanes_frame([]) if lanes is None else lanes, levels, fmt=tool, version=version,
        conditions=_conditions(doc, tool, version), source=source, summary=summary,
    )  # fmt: skip


def read_records(lines: list[dict[str, Any]], *, source: str, summary: dict[str, Any] | None) -> SweepResult:
    """The run of a per-request JSONL export: the profiling phase's requests, one level.

    ``summary`` is the ``profile_export_aiperf.json`` beside the file, when there is one: it gives the
    concurrency, the rate and the conditions, which the records do not carry.
    """
    summary = summary or {}
    tool, version = _tool(summary) if summary else (FORMAT, "aiperf per-request export")
    concurrency, rate = _load(summary.get("input_config") or {})
    profiled = [r for r in lines if r["metadata"].get("benchmark_phase", "profiling") == "profiling"]
    if not profiled:
        raise ValueError(f"{source}: no request of the profiling phase")
    t0 = min(r["metadata"]["request_start_ns"] for r in profiled)
    records = []
    for line in profiled:
        meta, metrics = line["metadata"], line.get("metrics") or {}
        rec: dict[str, Any] = {
            "in_flight": concurrency,
            "rate_rps": rate,
            "start_s": (number(meta.get("request_start_ns")) - t0) / 1e9,
            "end_s": (number(meta.get("request_end_ns")) - t0) / 1e9,
        }
        error = line.get("error")
        if error:
            text = error.get("message") or error.get("type") if isinstance(error, dict) else str(error)
            rec.update(outcome="error", error=str(text)[:300], status_code=number((error or {}).get("code")))
        else:
            gaps = metrics.get("inter_chunk_latency", {}).get("value")
            out = _metric(metrics, "usage_completion_tokens")
            rec.update(
                ttft_ms=_metric(metrics, "time_to_first_token"),
                e2e_ms=_metric(metrics, "request_latency"),
                output_tokens=out if not math.isnan(out) else _metric(metrics, "output_sequence_length"),
                prompt_tokens=_first(
                    _metric(metrics, "usage_prompt_tokens"), _metric(metrics, "input_sequence_length")
                ),
                cached_tokens=_metric(metrics, "usage_prompt_cache_read_tokens"),
                itl_ms=[float(g) for g in gaps] if isinstance(gaps, list) else [],
            )
        records.append(rec)
    lanes = lanes_frame(records)
    row = level_from_lanes(lanes, reasons=[], fmt=tool)
    with_cached = lanes.dropna(subset=["cached_tokens", "prompt_tokens"])
    if len(with_cached) and with_cached["prompt_tokens"].sum() > 0:
        row["provider_cached_rate"] = float(with_cached["cached_tokens"].sum() / with_cached["prompt_tokens"].sum())
    conditions = _conditions(summary, tool, version) if summary else {"tool": tool}
    return make_run(lanes, levels_frame([row]), fmt=tool, version=version, conditions=conditions, source=source)


def _metric(metrics: dict[str, Any], key: str) -> float:
    item = metrics.get(key)
    if not isinstance(item, dict):
        return NAN
    return number(item.get("value")) * (_MS.get(str(item.get("unit", "")), 1.0))


def _first(*values: float) -> float:
    return next((v for v in values if not math.isnan(v)), NAN)


def parse_jsonl(text: str, *, source: str) -> list[dict[str, Any]]:
    """The records of a JSONL export; a line that is not a record is a ``ValueError`` naming it."""
    out = []
    for number_, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}: line {number_} is not JSON ({exc.msg})") from None
        if not looks_like_record(doc):
            raise ValueError(f"{source}: line {number_} is not an AIPerf request record (no metadata.request_start_ns)")
        out.append(doc)
    return out


_CSV_TOOL = "_format_understood"  # the (format, version) of a summary made from a CSV export


def looks_like_csv(text: str) -> bool:
    """Whether ``text`` is AIPerf's summary CSV."""
    return text.lstrip().startswith("Metric,") and "Request Throughput" in text


def csv_to_summary(text: str) -> dict[str, Any]:
    """The summary CSV as the JSON export's mapping, for the metrics the reader uses."""
    names = {  # lower case: genai-perf writes "Time To First Token (ms)", AIPerf "Time to First Token (ms)"
        "time to first token (ms)": ("time_to_first_token", "ms"),
        "inter token latency (ms)": ("inter_token_latency", "ms"),
        "request latency (ms)": ("request_latency", "ms"),
        "request count (requests)": ("request_count", "requests"),
        "request count (count)": ("request_count", "requests"),
        "request count": ("request_count", "requests"),
        "request throughput (requests/sec)": ("request_throughput", "requests/sec"),
        "request throughput (per sec)": ("request_throughput", "requests/sec"),
        "output token throughput (tokens/sec)": ("output_token_throughput", "tokens/sec"),
        "output sequence length (tokens)": ("output_sequence_length", "tokens"),
        "input sequence length (tokens)": ("input_sequence_length", "tokens"),
        "total output tokens (tokens)": ("total_output_tokens", "tokens"),
        "benchmark duration (sec)": ("benchmark_duration", "sec"),
    }
    # genai-perf's header has no std column (AIPerf's has); its second table ("Metric,Value") reads under
    # the first header, so each value lands in "avg"
    genai_perf = "std" not in text.lstrip().split("\n", 1)[0].strip().split(",")
    tool = ("genai-perf", "genai-perf CSV export (no version field)") if genai_perf else (FORMAT, "aiperf CSV export")
    doc: dict[str, Any] = {_CSV_TOOL: tool}
    for row in csv.DictReader(io.StringIO(text)):
        name = (row.get("Metric") or "").strip().lower()
        if name in names:
            key, unit = names[name]
            doc[key] = {"unit": unit, **{k: _float(v) for k, v in row.items() if k != "Metric" and v not in (None, "")}}
    return doc


def _float(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return NAN

"""GuideLLM's benchmarks report (``benchmarks.json`` or ``.yaml``, ``GenerativeBenchmarksReport``).

``metadata`` (``version``, ``guidellm_version``, ``platform``), ``config`` (the scenario: target, model,
data, profile) and ``benchmarks``: one per strategy (``config.strategy.type_`` concurrent with
``streams``, constant or poisson with ``rate``, synchronous, throughput). Each benchmark's ``metrics``
hold ``request_totals`` (successful, errored, incomplete) and distributions split the same way, each
with ``median``, ``total_sum`` and ``percentiles`` (``p50`` ... ``p99``): ``time_to_first_token_ms``,
``inter_token_latency_ms`` (per request, (latency - TTFT) / (output tokens - 1): the sweep's TPOT),
``request_latency`` (s), ``prompt_token_count``, ``output_token_count``. ``requests`` holds sampled
per-request records (``--sample-requests``). GuideLLM keeps no gap between streamed chunks, so the ITL
percentiles are NaN.
"""

from __future__ import annotations

import math
from typing import Any

from toolkit._interop.frames import NAN, lanes_frame, level_from_lanes, levels_frame, make_run, number
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "guidellm"


def looks_like(doc: Any) -> bool:
    """Whether ``doc`` is a GuideLLM benchmarks report."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("benchmarks"), list)
        and all(isinstance(b, dict) and isinstance(b.get("metrics"), dict) for b in doc["benchmarks"])
        and len(doc["benchmarks"]) > 0
    )


def _dist(metrics: dict[str, Any], key: str, status: str = "successful") -> dict[str, Any]:
    value = metrics.get(key)
    value = value.get(status) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _pct(dist: dict[str, Any], p: int) -> float:
    if p == 50 and "median" in dist:
        return number(dist["median"])
    percentiles = dist.get("percentiles") if isinstance(dist.get("percentiles"), dict) else {}
    return number(percentiles.get(f"p{p}"))


def _load(bench: dict[str, Any]) -> tuple[float, float]:
    config = bench.get("config") if isinstance(bench.get("config"), dict) else {}
    strategy = config.get("strategy") or bench.get("strategy") or {}
    if not isinstance(strategy, dict):
        return NAN, NAN
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1.0, NAN
    return number(strategy.get("streams")), number(strategy.get("rate"))


def _duration(bench: dict[str, Any]) -> float:
    state = bench.get("scheduler_state") if isinstance(bench.get("scheduler_state"), dict) else {}
    for start, end in (("start_requests_time", "end_requests_time"), ("start_time", "end_time")):
        span = number(state.get(end)) - number(state.get(start))
        if span > 0:
            return span
    return number(bench.get("duration"))


def _level(bench: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    metrics = bench["metrics"]
    in_flight, rate = _load(bench)
    wall = _duration(bench)
    reasons = ["itl percentiles: GuideLLM keeps no gap between streamed chunks"]
    requests = bench.get("requests") if isinstance(bench.get("requests"), dict) else {}
    sampled = [
        (r, status) for status in ("successful", "errored") for r in requests.get(status) or [] if isinstance(r, dict)
    ]
    totals = metrics.get("request_totals") if isinstance(metrics.get("request_totals"), dict) else {}
    ok, errored = number(totals.get("successful")), number(totals.get("errored"))
    records = [_record(r, status, in_flight, rate) for r, status in sampled]
    if records and len(records) == ok + errored:  # every request kept: compute from them
        row = level_from_lanes(lanes_frame(records), wall_s=wall, reasons=reasons, fmt=FORMAT)
        return row, records
    if records:
        reasons.append(
            f"lanes: the report samples {len(records)} of {int(ok + errored)} requests; levels from its summary"
        )
    row: dict[str, Any] = {
        "in_flight": in_flight,
        "rate_rps": rate,
        "lanes_ok": ok,
        "lanes_failed": errored,
        "lanes_unfinished": number(totals.get("incomplete")),
        "lanes": number(totals.get("total")),
        "attempts": number(totals.get("total")),
        "wall_s": wall,
        "output_tokens": number(_dist(metrics, "output_token_count").get("total_sum")),
        "prompt_tokens": number(_dist(metrics, "prompt_token_count").get("total_sum")),
    }
    for key, name in (("dec_tok_s", "output_tokens"), ("input_tok_s", "prompt_tokens")):
        row[key] = row[name] / wall
    row["total_tok_s"] = (row["output_tokens"] + row["prompt_tokens"]) / wall
    row["achieved_rps"] = ok / wall
    for p in (50, 95, 99):
        row[f"ttft_p{p}_ms"] = _pct(_dist(metrics, "time_to_first_token_ms"), p)
        row[f"tpot_p{p}_ms"] = _pct(_dist(metrics, "inter_token_latency_ms"), p)
        row[f"e2e_p{p}_ms"] = 1000 * _pct(_dist(metrics, "request_latency"), p)
    if math.isnan(wall):
        reasons.append("wall_s and rates: the report's scheduler_state has no start and end")
    reasons.append(f"prefix_hit_rate: {FORMAT} records no server cache counters")
    row["reason"] = reasons
    return row, records


def _record(r: dict[str, Any], status: str, in_flight: float, rate: float) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "in_flight": in_flight,
        "rate_rps": rate,
        "start_s": number(r.get("request_start_time")),
        "end_s": number(r.get("request_end_time")),
        "prompt_tokens": number(r.get("prompt_tokens")),
        "cached_tokens": number(r.get("cached_tokens")),
    }
    if status == "errored":
        info = r.get("info") if isinstance(r.get("info"), dict) else {}
        rec.update(outcome="error", error=str(info.get("error") or "errored")[:300])
        return rec
    latency = number(r.get("request_latency"))
    rec.update(
        ttft_ms=number(r.get("time_to_first_token_ms")),
        e2e_ms=1000 * latency,
        output_tokens=number(r.get("output_tokens")),
        tpot_ms=number(r.get("inter_token_latency_ms")),
    )
    return rec


def read(doc: dict[str, Any], *, source: str) -> SweepResult:
    """Every benchmark of the report as one level (start times shifted to each level's first request)."""
    rows, records = [], []
    for bench in doc["benchmarks"]:
        row, recs = _level(bench)
        if recs:
            t0 = min((r["start_s"] for r in recs if not math.isnan(r["start_s"])), default=0.0)
            for r in recs:
                r["start_s"] -= t0
                r["end_s"] -= t0
        rows.append(row)
        records.extend(recs)
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    version = f"report v{meta.get('version', '?')}, guidellm {meta.get('guidellm_version', '?')}"
    conditions = {
        "model": config.get("model"),
        "tool": "guidellm",
        "tool_version": meta.get("guidellm_version"),
        "host": meta.get("platform"),
        "library_versions": {"python": meta.get("python_version")} if meta.get("python_version") else None,
        "workload": {k: config[k] for k in ("data", "profile", "rate", "backend") if k in config},
    }
    lanes = lanes_frame(records if len(records) else [])
    # GuideLLM's own figures per benchmark, as it printed them (its percentiles take the higher order
    # statistic; the levels interpolate, as the sweep does)
    summary = {"benchmarks": [_printed(b) for b in doc["benchmarks"]]}
    return make_run(
        lanes, levels_frame(rows), fmt=FORMAT, version=version, conditions=conditions, source=source, summary=summary
    )


def _printed(bench: dict[str, Any]) -> dict[str, float]:
    metrics = bench["metrics"]
    totals = metrics.get("request_totals") if isinstance(metrics.get("request_totals"), dict) else {}
    return {
        "requests": number(totals.get("successful")),
        "output_tokens": number(_dist(metrics, "output_token_count").get("total_sum")),
        "median_ttft_ms": _pct(_dist(metrics, "time_to_first_token_ms"), 50),
    }

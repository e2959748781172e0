"""inference-perf's lifecycle report (``stage_<n>_lifecycle_metrics.json``, ``summary_lifecycle_metrics.json``).

One JSON object: ``load_summary`` (``count``, ``requested_rate``, ``achieved_rate``, ``send_duration``
s), ``successes`` (``count``; ``latency`` with ``time_to_first_token``, ``time_per_output_token``,
``inter_token_latency``, ``request_latency`` in seconds, each summarised as ``mean``/``min``/``p10``/
``median``/``p90``/``max``, newer releases adding more percentiles; ``throughput``; ``prompt_len`` and
``output_len`` in tokens) and ``failures`` (``count``). The report has no per-request records.
"""

from __future__ import annotations

from typing import Any

from toolkit._interop.frames import NAN, lanes_frame, levels_frame, make_run, number
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "inference-perf"
_LATENCIES = {
    "ttft": "time_to_first_token",
    "tpot": "time_per_output_token",
    "itl": "inter_token_latency",
    "e2e": "request_latency",
}


def looks_like(doc: Any) -> bool:
    """Whether ``doc`` is an inference-perf lifecycle report."""
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("successes"), dict)
        and "failures" in doc
        and isinstance(doc["successes"].get("latency"), dict)
    )


def _stat(summary: Any, p: int) -> float:
    if not isinstance(summary, dict):
        return NAN
    key = "median" if p == 50 and "median" in summary else f"p{p}"
    return number(summary.get(key))


def read(doc: dict[str, Any], *, source: str) -> SweepResult:
    """The one-level run of a lifecycle report."""
    load = doc.get("load_summary") if isinstance(doc.get("load_summary"), dict) else {}
    ok = doc["successes"]
    failures = doc.get("failures") if isinstance(doc.get("failures"), dict) else {}
    reasons = ["per-request columns: the lifecycle report has none"]
    count = number(ok.get("count"))
    failed = number(failures.get("count"))
    throughput = ok.get("throughput") if isinstance(ok.get("throughput"), dict) else {}
    out_len = ok.get("output_len") if isinstance(ok.get("output_len"), dict) else {}
    prompt_len = ok.get("prompt_len") if isinstance(ok.get("prompt_len"), dict) else {}
    wall = number(load.get("send_duration"))
    if not load:
        reasons.append("rate_rps, wall_s: a summary report has no load_summary")
    else:
        reasons.append("wall_s: inference-perf's send_duration (the time spent sending, not the last answer)")
    row: dict[str, Any] = {
        "in_flight": NAN,
        "rate_rps": number(load.get("requested_rate")),
        "lanes_ok": count,
        "lanes_failed": failed,
        "lanes": count + failed,
        "attempts": count + failed,
        "wall_s": wall,
        # the mean length times the count: inference-perf keeps no total
        "output_tokens": number(out_len.get("mean")) * count,
        "prompt_tokens": number(prompt_len.get("mean")) * count,
        "dec_tok_s": number(throughput.get("output_tokens_per_sec")),
        "achieved_rps": number(throughput.get("requests_per_sec")),
        "input_tok_s": number(throughput.get("input_tokens_per_sec")),
        "total_tok_s": number(throughput.get("total_tokens_per_sec")),
    }
    latency = ok["latency"]
    for ours, theirs in _LATENCIES.items():
        for p in (50, 95, 99):
            row[f"{ours}_p{p}_ms"] = 1000 * _stat(latency.get(theirs), p)
        if isinstance(latency.get(theirs), dict) and "p95" not in latency[theirs]:
            reasons.append(f"{ours}_p95_ms, {ours}_p99_ms: this inference-perf release reports p10/median/p90 only")
    reasons.append("in_flight: inference-perf drives a request rate, not a concurrency")
    reasons.append(f"prefix_hit_rate: {FORMAT} records no server cache counters in this report")
    row["reason"] = reasons
    percentiles = sorted(k for k in (latency.get("time_to_first_token") or {}) if k not in ("mean", "min", "max"))
    version = f"lifecycle report ({', '.join(percentiles)})"
    summary = {"count": count, "median_ttft_ms": row["ttft_p50_ms"], "output_tokens": row["output_tokens"]}
    conditions = {"tool": "inference-perf", "workload": {"requested_rate": load.get("requested_rate")}}
    return make_run(
        lanes_frame([]), levels_frame([row]), fmt=FORMAT, version=version, conditions=conditions, source=source,
        summary=summary,
    )  # fmt: skip

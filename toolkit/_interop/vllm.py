"""vLLM's serving benchmark result (``vllm bench serve --save-result``, formerly ``benchmark_serving.py``).

The file is one JSON object: the run's settings (``backend``, ``model_id``, ``request_rate``,
``max_concurrency``, ``num_prompts``), its totals (``duration`` s, ``completed``, ``total_output_tokens``)
and summary statistics (``median_ttft_ms`` ...), and with ``--save-detailed`` one list entry per request:
``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (s between streamed chunks), ``errors`` and,
in recent releases, ``latencies`` and ``start_times`` (s). vLLM measures a request's latency from its
start to its last chunk and each gap from the previous chunk, so where ``latencies`` is missing
``ttft + sum(itls)`` is that latency and the per-request E2E is derived so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from toolkit._interop.frames import NAN, lanes_frame, level_from_lanes, levels_frame, make_run, number
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "vllm-bench-serve"
_REQUIRED = ("duration", "completed", "total_output_tokens")
_SUMMARY_KEYS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "duration", "median_ttft_ms")
_STATS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}


def looks_like(doc: Any) -> bool:
    """Whether ``doc`` is a vLLM serving benchmark result."""
    return isinstance(doc, dict) and all(k in doc for k in _REQUIRED) and "mean_ttft_ms" in doc


def read(doc: dict[str, Any], *, source: str) -> SweepResult:
    """The run in ``doc`` (see the module docstring); one level."""
    rate = doc.get("request_rate")
    rate_rps = number(rate) if not isinstance(rate, str) else NAN
    concurrency = number(doc.get("max_concurrency"))
    if math.isnan(concurrency) and (math.isnan(rate_rps) or math.isinf(rate_rps)):
        concurrency = number(doc.get("num_prompts"))  # every prompt sent at once
    detailed = isinstance(doc.get("ttfts"), list) and isinstance(doc.get("output_lens"), list)
    reasons: list[str] = []
    if detailed:
        lanes = lanes_frame(_records(doc, in_flight=concurrency, rate_rps=rate_rps))
        row = level_from_lanes(lanes, wall_s=number(doc.get("duration")), reasons=reasons, fmt=FORMAT)
    else:
        lanes = lanes_frame([])
        row = _summary_row(doc, in_flight=concurrency, rate_rps=rate_rps, reasons=reasons)
    conditions = {
        "engine": doc.get("backend") or doc.get("endpoint_type"),
        "model": doc.get("model_id"),
        "tool": "vllm bench serve",
        "workload": {
            k: doc[k] for k in ("num_prompts", "request_rate", "burstiness", "max_concurrency", "label") if k in doc
        },
    }
    summary = {k: doc[k] for k in _SUMMARY_KEYS if k in doc}
    version = "detailed" if detailed else "summary"
    return make_run(
        lanes, levels_frame([row]), fmt=FORMAT, version=version, conditions=conditions, source=source, summary=summary
    )


def _records(doc: dict[str, Any], *, in_flight: float, rate_rps: float) -> list[dict[str, Any]]:
    n = len(doc["ttfts"])
    inputs = _column(doc, "input_lens", n)
    outputs = _column(doc, "output_lens", n)
    itls = _column(doc, "itls", n)
    errors = _column(doc, "errors", n)
    latencies = _column(doc, "latencies", n)
    starts = [number(t) for t in _column(doc, "start_times", n)]
    t0 = min((t for t in starts if not math.isnan(t)), default=NAN)
    records = []
    for i in range(n):
        error = errors[i] if isinstance(errors[i], str) else ""
        gaps = [1000 * g for g in itls[i]] if isinstance(itls[i], list) else []
        ttft_ms = 1000 * number(doc["ttfts"][i])
        rec: dict[str, Any] = {
            "in_flight": in_flight,
            "rate_rps": rate_rps,
            "prompt_tokens": number(inputs[i]),
            "status_code": NAN,
            "start_s": starts[i] - t0,
        }
        if error:  # vLLM keeps the whole traceback: its last line names the exception
            last = [line for line in error.strip().splitlines() if line.strip()][-1:] or [error]
            rec.update(outcome="error", error=last[0].strip()[:300])
        else:
            e2e = 1000 * number(latencies[i])
            if math.isnan(e2e) and isinstance(itls[i], list):  # releases before "latencies"
                e2e = ttft_ms + float(np.sum(gaps))
            rec.update(ttft_ms=ttft_ms, e2e_ms=e2e, output_tokens=number(outputs[i]), itl_ms=gaps)
            rec["end_s"] = rec["start_s"] + e2e / 1000
        records.append(rec)
    return records


def _column(doc: dict[str, Any], key: str, n: int) -> list[Any]:
    values = doc.get(key)
    if not isinstance(values, list):
        return [None] * n
    if len(values) != n:
        raise ValueError(f"vLLM result: {key} has {len(values)} entries but ttfts has {n}")
    return values


def _summary_row(doc: dict[str, Any], *, in_flight: float, rate_rps: float, reasons: list[str]) -> dict[str, Any]:
    completed = number(doc.get("completed"))
    failed = number(doc.get("failed"))
    if math.isnan(failed):
        reasons.append("lanes_failed: this vLLM version records no failed count")
    wall = number(doc.get("duration"))
    row: dict[str, Any] = {
        "in_flight": in_flight,
        "rate_rps": rate_rps,
        "lanes_ok": completed,
        "lanes_failed": failed,
        "lanes": completed + failed,
        "attempts": completed + failed,
        "wall_s": wall,
        "output_tokens": number(doc.get("total_output_tokens")),
        "prompt_tokens": number(doc.get("total_input_tokens")),
        "dec_tok_s": number(doc.get("output_throughput")),
        "achieved_rps": number(doc.get("request_throughput")),
        "total_tok_s": number(doc.get("total_token_throughput")),
    }
    row["input_tok_s"] = row["prompt_tokens"] / wall
    for theirs, ours in _STATS.items():
        for p, key in ((50, f"median_{theirs}_ms"), (95, f"p95_{theirs}_ms"), (99, f"p99_{theirs}_ms")):
            row[f"{ours}_p{p}_ms"] = number(doc.get(key))
            if key not in doc:
                reasons.append(f"{ours}_p{p}_ms: not among the file's --metric-percentiles")
    reasons.append("per-request columns: the file was saved without --save-detailed")
    reasons.append(f"prefix_hit_rate: {FORMAT} records no server cache counters")
    row["reason"] = reasons
    return row

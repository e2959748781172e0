"""perf_analyzer's per-request profile export (``profile_export.json``): the requests genai-perf reads.

Layout (triton-inference-server/perf_analyzer, ``docs/benchmarking.md``): ``experiments`` of
``{"experiment": {"mode": "concurrency" | "request_rate", "value": ...}, "requests": [...]}`` next to
``version``, ``service_kind`` and ``endpoint``. Each request holds its send ``timestamp`` (ns), the
body sent (``request_inputs.payload``) and one ``response_timestamps`` entry (ns) per
``response_outputs`` entry: for a streamed OpenAI answer, one server-sent event each, sometimes
several in one. As genai-perf does, events without content (the role-only first one, the finish
event, ``[DONE]``) are dropped: TTFT is the first event with content, E2E the last, the gaps between
them the ITL. Token counts come from a streamed ``usage`` where the server sent one; genai-perf
counts the text with its tokenizer instead, which the export does not name, so otherwise they are NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any

from toolkit._interop.frames import NAN, lanes_frame, level_from_lanes, levels_frame, make_run, number
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

FORMAT = "perf_analyzer"
NO_COUNTS = "output_tokens, prompt_tokens: the server streamed no usage (genai-perf counts the text with its tokenizer)"


def looks_like(doc: Any) -> bool:
    """Whether ``doc`` is a perf_analyzer profile export."""
    return (
        isinstance(doc, dict)
        and "service_kind" in doc
        and isinstance(doc.get("experiments"), list)
        and all(isinstance(e, dict) and isinstance(e.get("requests"), list) for e in doc["experiments"])
    )


def _events(response: Any) -> list[dict[str, Any]]:
    """The JSON events of one response (several when they arrived together), ``[DONE]`` and others left out."""
    out = []
    for event in str(response).split("\n\n"):
        body = event.strip().removeprefix("data:").strip()
        if not body or body == "[DONE]":
            continue
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        if isinstance(choice, dict):
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
            if delta.get("content") or message.get("content") or choice.get("text"):
                return True
    return False


def _ns(value: Any) -> int | None:
    """A timestamp in ns as an int: a float would lose its last digits (about 2**60 ns since 1970)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _record(request: dict[str, Any], t0: int, load: dict[str, float]) -> dict[str, Any]:
    sent = _ns(request.get("timestamp"))
    if sent is None:
        return load | {"outcome": "error", "error": "no send timestamp"}
    content_ns, usage = [], None
    outputs = request.get("response_outputs") or []
    for stamp, output in zip(request.get("response_timestamps") or [], outputs, strict=False):
        events = _events(output.get("response") if isinstance(output, dict) else None)
        usage = next((e["usage"] for e in events if isinstance(e.get("usage"), dict)), usage)
        if any(_has_content(e) for e in events) and _ns(stamp) is not None:
            content_ns.append(stamp)
    rec: dict[str, Any] = load | {"start_s": (sent - t0) / 1e9}
    if not content_ns:
        return rec | {"outcome": "error", "error": "no response with content (genai-perf skips the request)"}
    usage = usage or {}
    return rec | {
        "end_s": (content_ns[-1] - t0) / 1e9,
        "ttft_ms": (content_ns[0] - sent) / 1e6,
        "e2e_ms": (content_ns[-1] - sent) / 1e6,
        "itl_ms": [(b - a) / 1e6 for a, b in zip(content_ns, content_ns[1:], strict=False)],
        "output_tokens": number(usage.get("completion_tokens")),
        "prompt_tokens": number(usage.get("prompt_tokens")),
    }


def read_lanes(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(lane records of every experiment, one level row per experiment)."""
    records, rows = [], []
    for experiment in doc["experiments"]:
        setting = experiment.get("experiment") if isinstance(experiment.get("experiment"), dict) else {}
        mode, value = setting.get("mode"), number(setting.get("value"))
        load = {
            "in_flight": value if mode == "concurrency" else NAN,
            "rate_rps": value if mode == "request_rate" else NAN,
        }
        requests = [r for r in experiment["requests"] if isinstance(r, dict)]
        if not requests:
            continue
        t0 = min((_ns(r.get("timestamp")) for r in requests if _ns(r.get("timestamp")) is not None), default=0)
        mine = [_record(r, t0, load) for r in requests]
        reasons = [NO_COUNTS] if any(math.isnan(r.get("output_tokens", NAN)) for r in mine) else []
        rows.append(level_from_lanes(lanes_frame(mine), reasons=reasons, fmt=FORMAT))
        records += mine
    return records, rows


def read(doc: dict[str, Any], *, source: str) -> SweepResult:
    """The run of a perf_analyzer export: one level per experiment, one lane per request."""
    records, rows = read_lanes(doc)
    if not rows:
        raise ValueError(f"path: {source} is a perf_analyzer export without requests")
    version = f"perf_analyzer {doc.get('version') or '(no version field)'}"
    payload = _first_payload(doc)
    conditions = {"model": payload.get("model"), "tool": FORMAT, "tool_version": doc.get("version"),
                  "workload": {"endpoint": doc.get("endpoint"), "service_kind": doc.get("service_kind")}}  # fmt: skip
    return make_run(
        lanes_frame(records), levels_frame(rows), fmt=FORMAT, version=version, conditions=conditions, source=source
    )


def _first_payload(doc: dict[str, Any]) -> dict[str, Any]:
    try:
        payload = json.loads(doc["experiments"][0]["requests"][0]["request_inputs"]["payload"])
    except (KeyError, IndexError, TypeError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}

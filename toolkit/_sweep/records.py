"""A lane's record: its columns, the stream state a lane accumulates, and turning that into one record."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__: list[str] = []


NAN = math.nan
# the largest token count believed from a server: far beyond any context, inside float precision
MAX_TOKEN_COUNT = 10**9


# A server's text in an error is read up to _RAW_EXCERPT characters, redacted (a key it echoes
# blanked, see toolkit._sweep.files.redact), and only then cut to _ERROR_CHARS for the record.
_BODY_EXCERPT = 300  # characters of a server's text an error message quotes
_RAW_EXCERPT = 4 * _BODY_EXCERPT
_ERROR_CHARS = _BODY_EXCERPT + 100  # the record's error: the message's own words and the quote


_BARE_429_WAIT_S = 1.0  # pause after a 429 that names no Retry-After, rather than retrying at once


_CLOCK_SLACK_S = 0.05  # asyncio's timer may fire this much before time.monotonic() agrees


_SERVER_TIMINGS = {  # lane column -> llama.cpp ``timings`` key
    "server_tpot_ms": "predicted_per_token_ms",
    "server_predicted_ms": "predicted_ms",
    "server_predicted_n": "predicted_n",
    "server_prompt_ms": "prompt_ms",
    "server_prompt_n": "prompt_n",
    "server_cache_n": "cache_n",
}


# issue 5's lane columns first, in its order; extras follow
LANE_COLUMNS = [
    "in_flight",
    "lane",
    "attempt",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "llm_s",
    "output_tokens",
    "prompt_tokens",
    "cached_tokens",
    "slot_wait_s",
    "postprocess_s",
    "outcome",
    "error",
    "repeat",
    "rate_rps",
    "final",
    "cancelled",
    "tokens_from_usage",
    "content_chunks",
    "usage_disagrees",
    "status_code",
    "retry_after_s",
    "start_s",
    "end_s",
    "itl_ms_p50",
    "itl_ms_max",
    *_SERVER_TIMINGS,
    "session",
    "itl_ms",
]


@dataclass
class _Stream:
    status: int = 0
    text: list[str] = field(default_factory=list)
    ttft_s: float = NAN
    chunks: int = 0
    chunk_s: list[float] = field(default_factory=list)  # perf_counter of each content chunk
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finished: bool = False
    retry_after_s: float = NAN


class _LaneError(Exception):
    """A failed attempt; its message is what the lane record's ``error`` says."""


def _take_chunk(chunk: Any, stream: _Stream, start: float) -> None:
    if not isinstance(chunk, dict):
        raise _LaneError(f"SSE data is not a JSON object: {str(chunk)[:_RAW_EXCERPT]!r}")
    if chunk.get("error"):
        raise _LaneError(f"server error in stream: {str(chunk['error'])[:_RAW_EXCERPT]}")
    if isinstance(chunk.get("usage"), dict):
        stream.usage = chunk["usage"]
    if isinstance(chunk.get("timings"), dict):
        stream.timings = chunk["timings"]
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise _LaneError(f"SSE chunk has a malformed 'choices': {str(choices)[:_RAW_EXCERPT]!r}")
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            delta = {}
        piece = delta.get("content") or delta.get("reasoning_content")
        if isinstance(piece, str) and piece:
            now = time.perf_counter()
            if stream.chunks == 0:
                stream.ttft_s = now - start
            stream.chunks += 1
            stream.chunk_s.append(now)
            stream.text.append(piece)
        if isinstance(choice, dict) and choice.get("finish_reason"):
            stream.finished = True


def _token_count(value: Any, field: str) -> float:
    """A token count from the server: a whole number from 0 to 10**9 (a bool is no number), or
    NaN when absent; anything else is a ``_LaneError`` naming ``field``."""
    if value is None:
        return NAN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _LaneError(f"{field} is not a token count: {str(value)[:_RAW_EXCERPT]!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value == int(value)):
        raise _LaneError(f"{field} is not a whole number of tokens: {value!r}")
    if not 0 <= value <= MAX_TOKEN_COUNT:
        raise _LaneError(f"{field} is out of range (0 to {MAX_TOKEN_COUNT:,}): {str(value)[:_RAW_EXCERPT]}")
    return float(value)


def _usage_counts(usage: dict[str, Any]) -> tuple[float, float, float]:
    """(completion, prompt, cached) tokens from a usage object, each checked; cached <= prompt."""
    out = _token_count(usage.get("completion_tokens"), "usage.completion_tokens")
    prompt = _token_count(usage.get("prompt_tokens"), "usage.prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = (
        _token_count(details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens")
        if isinstance(details, dict)
        else NAN
    )
    if cached > prompt:
        raise _LaneError(
            f"usage.prompt_tokens_details.cached_tokens ({cached:.0f}) exceeds prompt_tokens ({prompt:.0f})"
        )
    return out, prompt, cached


def _timing(value: Any) -> float:
    """A server timing (ms or tokens/s): a finite number >= 0 (a bool is no number), else NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    try:
        number = float(value)
    except OverflowError:
        return NAN
    return number if math.isfinite(number) and number >= 0 else NAN


# usage.completion_tokens and the content chunks received agree when neither exceeds the other by
# more than this factor plus this many: one token per chunk on llama.cpp, vLLM and SGLang, a few per
# chunk under speculative decoding. Beyond it the count is not believed (NaN, ``usage_disagrees``).
USAGE_CHUNK_FACTOR = 8
USAGE_CHUNK_SLACK = 8


def _disagree(tokens: float, chunks: int) -> bool:
    limit = USAGE_CHUNK_FACTOR * min(tokens, chunks) + USAGE_CHUNK_SLACK
    return max(tokens, chunks) > limit


def _record(stream: _Stream, start: float, end: float, error: str) -> dict[str, Any]:
    usage = stream.usage or {}
    out = prompt = cached = NAN
    if not error:
        try:
            out, prompt, cached = _usage_counts(usage)
        except _LaneError as exc:
            error = str(exc)
    ok = not error
    from_usage = ok and math.isfinite(out)
    disagrees = from_usage and _disagree(out, stream.chunks)
    if not ok:
        out = prompt = cached = NAN
    elif disagrees:
        out = NAN  # a count unknown to the server stays unknown: never the chunks counted instead
    e2e_ms = (end - start) * 1000 if ok else NAN
    ttft_ms = stream.ttft_s * 1000
    tpot_ms = (e2e_ms - ttft_ms) / (out - 1) if ok and out >= 2 and math.isfinite(ttft_ms) else NAN
    timings = stream.timings or {}
    gaps_ms = np.diff(stream.chunk_s) * 1000 if ok and stream.chunks >= 2 else None
    record = {
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "e2e_ms": e2e_ms,
        "llm_s": end - start,
        "output_tokens": out,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "slot_wait_s": 0.0,
        "postprocess_s": 0.0,
        "outcome": "ok" if ok else "error",
        "error": error,
        "tokens_from_usage": bool(from_usage),
        "content_chunks": stream.chunks,
        "usage_disagrees": bool(disagrees),
        "status_code": stream.status,
        "retry_after_s": stream.retry_after_s,
        "cancelled": False,
        "itl_ms_p50": float(np.median(gaps_ms)) if gaps_ms is not None else NAN,
        "itl_ms_max": float(gaps_ms.max()) if gaps_ms is not None else NAN,
        # every gap, so that a level's ITL percentiles pool its tokens as vLLM's benchmark does
        "itl_ms": [round(float(g), 3) for g in gaps_ms] if gaps_ms is not None else [],
    }
    for column, key in _SERVER_TIMINGS.items():
        record[column] = _timing(timings.get(key)) if ok else NAN
    return record


def _cancelled(base: dict[str, Any], start: float, level_t0: float, reason: str) -> dict[str, Any]:
    now = time.perf_counter()
    record = _record(_Stream(), start, now, reason)
    record.update(base, start_s=start - level_t0, end_s=now - level_t0, final=False, cancelled=True)
    return record


def unknown_output(measured: pd.DataFrame) -> str:
    """Why some of ``measured``'s ``output_tokens`` are unknown: how many answers carried no
    ``usage.completion_tokens`` and how many carried one the content chunks contradict."""
    flags = measured["usage_disagrees"] if "usage_disagrees" in measured else pd.Series(False, index=measured.index)
    disagree = int(flags.fillna(False).astype(bool).sum())
    missing = int(measured["output_tokens"].isna().sum()) - disagree
    parts = [f"{missing} of {len(measured)} answers carried no usage.completion_tokens"] if missing else []
    if disagree:
        parts.append(
            f"{disagree} carried a usage.completion_tokens that the content chunks received contradict "
            f"(beyond {USAGE_CHUNK_FACTOR}x + {USAGE_CHUNK_SLACK})"
        )
    return " and ".join(parts)

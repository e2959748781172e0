"""One lane: a streamed chat completion, timed, then the user's post-processing, with retries.

Definitions (one row per attempt, all times from the client's clock, ``time.perf_counter``):

- ``ttft_ms``: request sent -> the first chunk whose ``delta.content`` (or ``reasoning_content``) is a
  non-empty string. The role-only opening chunk, empty deltas and the usage chunk never count. NaN
  when no content arrived.
- ``e2e_ms``: request sent -> end of the stream (``data: [DONE]``, or the close after a chunk with a
  ``finish_reason``). NaN when the request failed.
- ``tpot_ms`` = (e2e - ttft) / (output_tokens - 1): the mean time per output token after the first.
  NaN when fewer than two tokens were produced.
- ``llm_s``: seconds the attempt spent on the request, successful or not (for a failure: until it
  failed). Summed over a level, it is the inference time to compare with the wall clock.
- ``output_tokens`` / ``prompt_tokens``: ``usage.completion_tokens`` / ``usage.prompt_tokens`` when the
  server sent a usage chunk (``tokens_from_usage`` True); otherwise the number of non-empty content
  chunks (one token per chunk on llama.cpp and vLLM; an approximation elsewhere) and NaN prompt
  tokens, with ``tokens_from_usage`` False. Unknown (NaN) for a failed request: a failure is never
  counted as zero tokens.
- ``cached_tokens``: ``usage.prompt_tokens_details.cached_tokens`` as the provider reports it, NaN
  when it reports nothing (vLLM sends ``null``).
- ``server_*``: llama.cpp's own ``timings`` object of the final chunk (``server_tpot_ms`` is its
  ``predicted_per_token_ms``), NaN from other servers.

A lane retries up to ``attempts`` times on an error or a rejection, each attempt recorded. A 429
answer's ``Retry-After`` (seconds or an HTTP date; 1 s when it names none) is honoured before the next
attempt, as long as it ends before the sweep's deadline; otherwise the lane stops there. Other errors
retry at once. The in-flight permit is held for the
lane's whole life, retries and post-processing included, as a real pipeline would hold it.
"""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from toolkit._sweep.files import redact

__all__: list[str] = []

NAN = math.nan
_BODY_EXCERPT = 300  # characters of an error body kept in the record
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
    "status_code",
    "retry_after_s",
    "start_s",
    "end_s",
    *_SERVER_TIMINGS,
    "session",
]


@dataclass(frozen=True)
class Lane:
    """What ``postprocess`` receives: one finished completion and where it came from.

    ``index`` is the prompt's position in ``prompts``; ``prompt`` the prompt as given; ``messages``
    the chat messages as sent (level tag included); ``text`` the streamed content; ``record`` the
    attempt's measured columns (``ttft_ms``, ``output_tokens`` ...).
    """

    index: int
    in_flight: int
    repeat: int
    attempt: int
    prompt: Any
    messages: list[dict[str, Any]]
    text: str
    record: dict[str, Any]


@dataclass
class LaneContext:
    """Everything the lanes of one sweep share (set up once by the sweep)."""

    client: httpx.AsyncClient
    chat_url: str
    body: dict[str, Any]  # model, max_tokens, stream options and extra_body; messages added per lane
    timeout_s: float
    attempts: int
    postprocess: Callable[[Lane], Any] | None
    slots: asyncio.Semaphore
    secrets: tuple[str, ...]
    on_record: Callable[[dict[str, Any]], None]
    deadline: float = math.inf  # time.monotonic() at which the sweep cancels what is in flight
    deadline_text: str = "cancelled: the sweep's deadline was reached"


@dataclass
class _Stream:
    status: int = 0
    text: list[str] = field(default_factory=list)
    ttft_s: float = NAN
    chunks: int = 0
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finished: bool = False
    retry_after_s: float = NAN


class _LaneError(Exception):
    """A failed attempt; its message is what the lane record's ``error`` says."""


async def run_lane(
    ctx: LaneContext,
    *,
    index: int,
    prompt: Any,
    messages: list[dict[str, Any]],
    keys: dict[str, Any],
    first_attempt: int,
    level_t0: float,
) -> None:
    """Run one lane's attempts ``first_attempt..ctx.attempts``, handing each record to ``ctx.on_record``.

    ``keys`` (``in_flight``, ``repeat``, ``rate_rps``, ``session``) are copied into every record.
    """
    for attempt in range(first_attempt, ctx.attempts + 1):
        base = {**keys, "lane": index, "attempt": attempt}
        start = time.perf_counter()
        try:
            record, text = await _attempt(ctx, messages, start)
        except asyncio.CancelledError:
            # the sweep cancels lanes at its deadline or on Ctrl-C; the clock says which
            late = time.monotonic() >= ctx.deadline - _CLOCK_SLACK_S
            reason = ctx.deadline_text if late else "cancelled: the sweep was interrupted"
            ctx.on_record(_cancelled(base, start, level_t0, reason))
            raise
        record.update(base, start_s=start - level_t0)
        if record["outcome"] == "ok" and ctx.postprocess is not None:
            lane = Lane(index, keys["in_flight"], keys["repeat"], attempt, prompt, messages, text, dict(record))
            await _postprocess(ctx, lane, record)
        record["end_s"] = time.perf_counter() - level_t0
        record["final"] = record["outcome"] == "ok" or attempt == ctx.attempts
        wait_s = record["retry_after_s"]
        if not math.isfinite(wait_s):
            wait_s = _BARE_429_WAIT_S if record["status_code"] == 429 else 0.0
        if not record["final"] and time.monotonic() + wait_s >= ctx.deadline:
            record["final"] = True
            record["error"] += "; no retry: the sweep's deadline comes first"
        ctx.on_record(record)
        if record["final"]:
            return
        if wait_s > 0:
            await asyncio.sleep(wait_s)


async def _attempt(ctx: LaneContext, messages: list[dict[str, Any]], start: float) -> tuple[dict[str, Any], str]:
    stream = _Stream()
    error = ""
    try:
        async with asyncio.timeout(ctx.timeout_s):
            await _stream_chat(ctx, messages, stream, start)
    except TimeoutError:
        error = f"timeout: no complete answer within timeout_s={ctx.timeout_s:g} s"
    except _LaneError as exc:
        error = str(exc)
    except httpx.HTTPError as exc:
        where = f" after {stream.chunks} content chunks" if stream.chunks else ""
        error = f"{type(exc).__name__}{where}: {exc}"
    end = time.perf_counter()
    if not error and not stream.finished:
        error = "stream ended without [DONE] or a finish_reason"
    return _record(stream, start, end, redact(error, ctx.secrets)), "".join(stream.text)


async def _stream_chat(ctx: LaneContext, messages: list[dict[str, Any]], stream: _Stream, start: float) -> None:
    body = {**ctx.body, "messages": messages}
    async with ctx.client.stream("POST", ctx.chat_url, json=body) as response:
        stream.status = response.status_code
        if response.status_code != 200:
            stream.retry_after_s = _retry_after(response.headers.get("retry-after"))
            excerpt = (await _read_excerpt(response)).strip()
            raise _LaneError(f"HTTP {response.status_code}: {excerpt}" if excerpt else f"HTTP {response.status_code}")
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == "[DONE]":
                stream.finished = True
                return
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise _LaneError(f"malformed SSE data line: {data[:_BODY_EXCERPT]!r}") from None
            _take_chunk(chunk, stream, start)


def _take_chunk(chunk: Any, stream: _Stream, start: float) -> None:
    if not isinstance(chunk, dict):
        raise _LaneError(f"SSE data is not a JSON object: {str(chunk)[:_BODY_EXCERPT]!r}")
    if chunk.get("error"):
        raise _LaneError(f"server error in stream: {str(chunk['error'])[:_BODY_EXCERPT]}")
    if isinstance(chunk.get("usage"), dict):
        stream.usage = chunk["usage"]
    if isinstance(chunk.get("timings"), dict):
        stream.timings = chunk["timings"]
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise _LaneError(f"SSE chunk has a malformed 'choices': {str(choices)[:_BODY_EXCERPT]!r}")
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            delta = {}
        piece = delta.get("content") or delta.get("reasoning_content")
        if isinstance(piece, str) and piece:
            if stream.chunks == 0:
                stream.ttft_s = time.perf_counter() - start
            stream.chunks += 1
            stream.text.append(piece)
        if isinstance(choice, dict) and choice.get("finish_reason"):
            stream.finished = True


async def _read_excerpt(response: httpx.Response) -> str:
    raw = b""
    async for block in response.aiter_bytes():
        raw += block
        if len(raw) > 4 * _BODY_EXCERPT:
            break
    return raw.decode("utf-8", "replace")[:_BODY_EXCERPT]


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date); NaN if absent/bad."""
    if not value:
        return NAN
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return NAN
    return max(0.0, seconds) if math.isfinite(seconds) else NAN


def _record(stream: _Stream, start: float, end: float, error: str) -> dict[str, Any]:
    ok = not error
    usage = stream.usage or {}
    from_usage = ok and isinstance(usage.get("completion_tokens"), (int, float))
    if not ok:
        out = prompt = NAN
    elif from_usage:
        out = float(usage["completion_tokens"])
        prompt = float(usage["prompt_tokens"]) if isinstance(usage.get("prompt_tokens"), (int, float)) else NAN
    else:
        out, prompt = float(stream.chunks), NAN
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    e2e_ms = (end - start) * 1000 if ok else NAN
    ttft_ms = stream.ttft_s * 1000
    tpot_ms = (e2e_ms - ttft_ms) / (out - 1) if ok and out >= 2 and math.isfinite(ttft_ms) else NAN
    timings = stream.timings or {}
    record = {
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "e2e_ms": e2e_ms,
        "llm_s": end - start,
        "output_tokens": out,
        "prompt_tokens": prompt,
        "cached_tokens": float(cached) if ok and isinstance(cached, (int, float)) else NAN,
        "slot_wait_s": 0.0,
        "postprocess_s": 0.0,
        "outcome": "ok" if ok else "error",
        "error": error,
        "tokens_from_usage": bool(from_usage),
        "content_chunks": stream.chunks,
        "status_code": stream.status,
        "retry_after_s": stream.retry_after_s,
        "cancelled": False,
    }
    for column, key in _SERVER_TIMINGS.items():
        value = timings.get(key)
        record[column] = float(value) if ok and isinstance(value, (int, float)) else NAN
    return record


async def _postprocess(ctx: LaneContext, lane: Lane, record: dict[str, Any]) -> None:
    waited = time.perf_counter()
    async with ctx.slots:
        began = time.perf_counter()
        record["slot_wait_s"] = began - waited
        try:
            if inspect.iscoroutinefunction(ctx.postprocess):
                accepted = await ctx.postprocess(lane)
            else:  # a blocking callable runs in a worker thread: the other lanes keep streaming
                accepted = await asyncio.to_thread(ctx.postprocess, lane)
                if inspect.isawaitable(accepted):
                    accepted = await accepted
            reason = "" if accepted else "postprocess rejected the output"
        except Exception as exc:  # the user's code: any failure is a rejection, recorded
            reason = redact(f"postprocess raised {type(exc).__name__}: {exc}", ctx.secrets)
        record["postprocess_s"] = time.perf_counter() - began
    if reason:
        record["outcome"], record["error"] = "rejected", reason


def _cancelled(base: dict[str, Any], start: float, level_t0: float, reason: str) -> dict[str, Any]:
    now = time.perf_counter()
    record = _record(_Stream(), start, now, reason)
    record.update(base, start_s=start - level_t0, end_s=now - level_t0, final=False, cancelled=True)
    return record

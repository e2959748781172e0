"""One lane: a streamed chat completion, timed, then the user's post-processing, with retries.

Definitions (one row per attempt, all times from the client's clock, ``time.perf_counter``):

- ``ttft_ms``: request sent -> the first chunk whose ``delta.content`` (or ``reasoning_content``) is a
  non-empty string. The role-only opening chunk, empty deltas and the usage chunk never count. NaN
  when no content arrived.
- ``e2e_ms``: request sent -> end of the stream (``data: [DONE]``, or the close after a chunk with a
  ``finish_reason``). NaN when the request failed.
- ``tpot_ms`` = (e2e - ttft) / (output_tokens - 1): the mean time per output token after the first.
  NaN when fewer than two tokens were produced or their count is unknown.
- ``llm_s``: seconds the attempt spent on the request, successful or not (for a failure: until it
  failed). Summed over a level, it is the inference time to compare with the wall clock.
- ``output_tokens`` / ``prompt_tokens``: ``usage.completion_tokens`` / ``usage.prompt_tokens`` as the
  server reported them (``tokens_from_usage`` True when it reported the former). A count the server
  did not report (no usage chunk, a stream closed after its ``finish_reason``, a null field) is NaN,
  never the content chunks counted instead (``content_chunks`` holds those). A completion count that
  disagrees with the chunks received beyond ``USAGE_CHUNK_FACTOR`` times plus ``USAGE_CHUNK_SLACK``
  (:mod:`toolkit._sweep.records`) is NaN too, with ``usage_disagrees`` True. Unknown (NaN) for a
  failed request: a failure is never counted as zero tokens.
- ``cached_tokens``: ``usage.prompt_tokens_details.cached_tokens`` as the provider reports it, NaN
  when it reports nothing (vLLM sends ``null``).
- ``server_*``: llama.cpp's own ``timings`` object of the final chunk (``server_tpot_ms`` is its
  ``predicted_per_token_ms``), NaN from other servers.

A lane retries up to ``attempts`` times on an error or a rejection, each attempt recorded. A 429
answer's ``Retry-After`` (seconds or an HTTP date; 1 s when it names none) is honoured before the next
attempt, capped at ``RETRY_AFTER_CAP_S``, as long as it ends before the sweep's deadline; otherwise the
lane stops there. Other errors retry after an exponential backoff with jitter (``backoff_s``), again
only if it ends before the deadline. ``timeout_s`` bounds each attempt's whole duration, connection to
last byte (a server trickling bytes cannot stretch it). The in-flight permit is held for the
lane's whole life, retries and post-processing included, as a real pipeline would hold it.
"""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from toolkit._sweep.bounded import BodyTooLarge, excerpt, lines
from toolkit._sweep.files import redact
from toolkit._sweep.records import (
    _BARE_429_WAIT_S,
    _CLOCK_SLACK_S,
    _ERROR_CHARS,
    _RAW_EXCERPT,
    NAN,
    _cancelled,
    _LaneError,
    _record,
    _Stream,
    _take_chunk,
)

__all__: list[str] = []


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
    auth: httpx.Auth | None  # the base URL's credentials, sent to it alone
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
            wait_s = _BARE_429_WAIT_S if record["status_code"] == 429 else backoff_s(attempt)
        if not record["final"] and time.monotonic() + wait_s >= ctx.deadline:
            record["final"] = True
            record["error"] += "; no retry: the sweep's deadline comes first"
        ctx.on_record(record)
        if record["final"]:
            return
        if wait_s > 0:
            await asyncio.sleep(wait_s)


async def _attempt(ctx: LaneContext, messages: list[dict[str, Any]], start: float) -> tuple[dict[str, Any], str]:
    body = {**ctx.body, "messages": messages}
    return await _exchange(
        ctx.client, ctx.chat_url, body, auth=ctx.auth, timeout_s=ctx.timeout_s, secrets=ctx.secrets, start=start
    )


async def _exchange(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    auth: httpx.Auth | None,
    timeout_s: float,
    secrets: tuple[str, ...],
    start: float,
) -> tuple[dict[str, Any], str]:
    """POST one streamed chat completion and return its record (see the module notes) and text.

    ``auth`` is the base URL's credentials (sent with this request only); ``timeout_s`` bounds the
    whole request, connection to last byte; ``start`` is the ``time.perf_counter()`` it counts from.
    Any failure becomes the record's ``error`` (credentials in ``secrets`` redacted), never an
    exception, and memory stays bounded (see :mod:`toolkit._sweep.bounded`).
    """
    stream = _Stream()
    error = ""
    try:
        async with asyncio.timeout(timeout_s):
            await _stream_chat(client, url, body, auth, stream, start)
    except TimeoutError:
        error = f"timeout: no complete answer within timeout_s={timeout_s:g} s"
    except (_LaneError, BodyTooLarge) as exc:
        error = str(exc)
    except httpx.HTTPError as exc:
        where = f" after {stream.chunks} content chunks" if stream.chunks else ""
        error = f"{type(exc).__name__}{where}: {exc}"
    end = time.perf_counter()
    if not error and not stream.finished:
        error = "stream ended without [DONE] or a finish_reason"
    record = _record(stream, start, end, error)
    # redacted before it is cut (a cut could leave a piece of a key too short to be recognised), and
    # after the usage check, whose message may quote the server too
    record["error"] = _clip(redact(record["error"], secrets))
    return record, "".join(stream.text)


def _clip(text: str) -> str:
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


async def _stream_chat(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], auth: httpx.Auth | None, stream: _Stream, start: float
) -> None:
    async with client.stream("POST", url, json=body, auth=auth or httpx.USE_CLIENT_DEFAULT) as response:
        stream.status = response.status_code
        if response.status_code != 200:
            stream.retry_after_s = _retry_after(response.headers.get("retry-after"))
            text = (await excerpt(response, max_bytes=_RAW_EXCERPT)).strip()
            raise _LaneError(f"HTTP {response.status_code}: {text}" if text else f"HTTP {response.status_code}")
        async for line in lines(response):
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == "[DONE]":
                stream.finished = True
                return
            try:
                chunk = json.loads(data)
            except (ValueError, RecursionError) as exc:
                # ValueError covers malformed JSON and integers past Python's digit limit;
                # RecursionError a nesting deeper than the parser's stack
                reason = "too deeply nested" if isinstance(exc, RecursionError) else "malformed"
                raise _LaneError(f"{reason} SSE data line: {data[:_RAW_EXCERPT]!r}") from None
            _take_chunk(chunk, stream, start)


# A server's Retry-After is honoured up to this many seconds (a year, 1e308 or a date in 2100 would
# stall the sweep); the deadline, when one is set, still bounds the wait.
RETRY_AFTER_CAP_S = 60.0


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), at most
    ``RETRY_AFTER_CAP_S``; NaN if absent or unreadable."""
    if not value:
        return NAN
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return NAN
    if not math.isfinite(seconds):
        return NAN
    return min(max(0.0, seconds), RETRY_AFTER_CAP_S)


# Retries after an error other than a 429 wait d/2 + U(0, d/2) with d = BACKOFF_BASE_S * 2**(attempt - 1)
# capped at BACKOFF_CAP_S ("equal jitter"): a failing server is not hammered, and lanes that failed
# together do not retry in lock-step.
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 8.0


def backoff_s(attempt: int) -> float:
    """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based)."""
    d = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(attempt - 1, 30))
    return d / 2 + random.uniform(0, d / 2)


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

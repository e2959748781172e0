"""Prompts with prefix structure, and multi-turn sessions replayed closed loop, as chat clients send them.

Prefix blocks (a trace's ``prefix_blocks``, blocks of ``attrs["prefix_block_tokens"]`` tokens) become
text block by block: each block id gets one fixed run of filler words, drawn by a generator seeded
with the replay's seed and the id, so requests whose leading block ids are equal send byte-identical
leading text and share that prefix on the server, whatever tokenizer it uses. Every word carries its
leading space, and with ``/tokenize`` the vocabulary holds only words that are one token after a
space (:mod:`toolkit._sweep.filler`), so a block of ``n`` tokens is ``n`` words and a prefix of ``k``
shared blocks is ``k x block`` tokens after the chat template's opening. The blocks cover the user
text: a prompt of ``p`` tokens gets ``p - template_tokens`` tokens of blocks, its last block cut to
what remains (a block cut short is the first words of the same block uncut).

A session (rows with ``session_id`` and ``turn``, as :func:`toolkit.session_workload` makes) is one
conversation: its first turn is sent at its ``arrival_s`` (sessions arrive open loop), each later turn
``think_time_s`` after the previous answer has arrived (closed loop), as the whole chat so far: every
earlier user message, the answer the server actually gave to it as the assistant's message, then the
new user message, sized so that the whole prompt reaches the row's ``prompt_tokens``: the row's length
less the server's count of the previous prompt (``usage.prompt_tokens``), of its answer
(``usage.completion_tokens``) and the chat template's tokens for one more exchange, which one request
of three messages measures before the sessions start (without those counts, the trace's new user
tokens: the row's prompt less the previous row's prompt and answer). A turn whose predecessor failed
or was not sent is not sent either. The first turn's text comes from its blocks, so sessions that
drew the same system prompt open with the same text.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from toolkit._queueing.prefix_segments import check_prefix_blocks
from toolkit._sweep.filler import Filler

__all__: list[str] = []

SESSION_COLUMNS = ("session_id", "turn")
# a block id seeds its text as a 64-bit word: numpy's seeds are non-negative, a trace's ids need not be
_ID_MASK = 2**64 - 1


def block_text(filler: Filler, ids: tuple[int, ...], n_tokens: int, block_tokens: int, seed: int) -> str:
    """User text of about ``n_tokens`` tokens (at least one word) built from the blocks ``ids``, each of
    ``block_tokens`` tokens but a last one cut to the rest (module notes)."""
    words = np.asarray(filler.words)
    parts = []
    left = max(int(n_tokens), 1)
    for block in ids:
        if left <= 0:
            break
        n_words = max(1, round(min(block_tokens, left) / filler.tokens_per_word))
        full = max(1, round(block_tokens / filler.tokens_per_word))
        rng = np.random.default_rng([seed, int(block) & _ID_MASK])
        parts.append(" " + " ".join(words[rng.integers(0, len(words), full)][:n_words]))
        left -= block_tokens
    return "".join(parts)


def words_text(filler: Filler, n_tokens: int, seed: int) -> str:
    """User text of about ``n_tokens`` tokens (at least one word) of words seeded with ``seed``."""
    n_words = max(1, round(int(n_tokens) / filler.tokens_per_word))
    rng = np.random.default_rng(seed)
    return " " + " ".join(np.asarray(filler.words)[rng.integers(0, len(filler.words), n_words)])


def conversation_columns(
    trace: pd.DataFrame, prompt: np.ndarray, output: np.ndarray
) -> tuple[tuple[int, list] | None, tuple[list[np.ndarray], np.ndarray] | None, np.ndarray]:
    """A trace's prefix blocks ``(block tokens, ids per row)``, its sessions ``(rows of each session,
    the trace's new user tokens per row)`` (each None without those columns) and ``think_time_s``
    (zeros without it), checked."""
    blocks = (check_prefix_blocks(trace)[0], trace["prefix_blocks"].tolist()) if "prefix_blocks" in trace else None
    sessions = None
    if set(SESSION_COLUMNS) <= set(trace.columns):
        rows = sessions_of(trace)
        new_user = prompt.astype(np.int64)  # a later turn's: its prompt less the previous prompt and answer
        for turns in rows:
            new_user[turns[1:]] = prompt[turns[1:]] - prompt[turns[:-1]] - output[turns[:-1]]
        sessions = (rows, new_user)
    think = trace["think_time_s"].to_numpy(dtype=float) if "think_time_s" in trace else np.zeros(len(trace))
    if not np.all(np.isfinite(think) & (think >= 0)):
        raise ValueError("trace think_time_s must be finite seconds (>= 0)")
    return blocks, sessions, think


def sessions_of(trace: pd.DataFrame) -> list[np.ndarray]:
    """The rows of each session, in turn order; a ValueError when ``turn`` is not 0, 1, ... per session."""
    turn = trace["turn"].to_numpy()
    session = pd.factorize(trace["session_id"])[0]  # any hashable ids: numbers or names
    order = np.lexsort((turn, session))
    out = []
    for rows in np.split(order, np.flatnonzero(np.diff(session[order])) + 1):
        if not np.array_equal(turn[rows], np.arange(len(rows))):
            raise ValueError(
                f"trace turn must number each session's turns 0, 1, 2, ...; session "
                f"{trace['session_id'].iloc[rows[0]]!r} has turns {turn[rows].tolist()[:10]}"
            )
        out.append(rows)
    return out


async def send_sessions(
    sessions: list[np.ndarray],
    *,
    arrival_s: np.ndarray,
    think_s: np.ndarray,
    prompt_tokens: np.ndarray,
    new_user_tokens: np.ndarray,
    filler: Filler,
    seed: int,
    first_text: Callable[[int], str],
    body_for: Callable[[int, list[dict[str, str]]], dict[str, Any]],
    exchange: Callable[[dict[str, Any], float], Awaitable[tuple[dict[str, Any], str]]],
    cancelled: Callable[[float], dict[str, Any]],
    rows: list[dict[str, Any]],
    deadline_s: float | None,
    progress: bool,
) -> float:
    """Run every session as its own task (module notes), filling ``rows[i]`` for each turn.

    ``exchange(body, sent)`` sends one request and returns its record and answer text; ``cancelled(sent)``
    is the record of a request cut at the deadline (``deadline_s`` from now), after which nothing is
    sent. A turn never sent keeps an empty row. Returns the template's tokens per exchange it measured
    (NaN when the server did not say)."""
    stop_at = math.inf if deadline_s is None else time.perf_counter() + deadline_s
    try:  # the probe counts against the deadline too; without its answer the trace's user tokens are sent
        async with asyncio.timeout(None if math.isinf(stop_at) else max(0.0, stop_at - time.perf_counter())):
            overhead = await _exchange_tokens(exchange, body_for, filler, seed)
    except TimeoutError:
        overhead = math.nan

    def new_text(i: int, before: dict[str, Any]) -> str:
        known = before["prompt_tokens"] + before["output_tokens"] + overhead
        n = prompt_tokens[i] - known if math.isfinite(known) else new_user_tokens[i]
        return words_text(filler, n, seed + i)

    bar = tqdm(total=len(rows), desc="sessions", unit="req", leave=False, disable=not progress)
    t0 = time.perf_counter() + 0.05  # a short lead so the first sends are not late by set-up time

    async def run(turns: np.ndarray) -> None:
        scheduled = t0 + arrival_s[turns[0]]
        messages: list[dict[str, str]] = []
        for k, i in enumerate(int(r) for r in turns):
            if scheduled >= stop_at:
                return
            messages.append(
                {"role": "user", "content": first_text(i) if k == 0 else new_text(i, rows[int(turns[k - 1])])}
            )
            body = body_for(i, list(messages))
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter()
            words = sum(len(m["content"].split()) for m in messages if m["role"] == "user")
            rows[i].update(
                scheduled_s=scheduled - t0, sent_s=sent - t0, lateness_ms=(sent - scheduled) * 1000, prompt_words=words
            )
            try:
                record, answer = await exchange(body, sent)
            except asyncio.CancelledError:
                rows[i].update(cancelled(sent), end_s=time.perf_counter() - t0)
                bar.update()
                return
            end = time.perf_counter()
            rows[i].update(record, end_s=end - t0)
            bar.update()
            if record["outcome"] != "ok":
                for later in turns[k + 1 :]:
                    rows[int(later)].update(outcome="not_sent", error=f"not sent: turn {k} of its session failed")
                return
            messages.append({"role": "assistant", "content": answer})
            if k + 1 < len(turns):
                scheduled = end + float(think_s[turns[k + 1]])

    tasks = [asyncio.create_task(run(turns)) for turns in sessions]
    if tasks:
        left = None if math.isinf(stop_at) else max(0.0, stop_at - time.perf_counter())
        _, pending = await asyncio.wait(tasks, timeout=left)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    bar.close()
    return overhead


async def _exchange_tokens(
    exchange: Callable[[dict[str, Any], float], Awaitable[tuple[dict[str, Any], str]]],
    body_for: Callable[[int, list[dict[str, str]]], dict[str, Any]],
    filler: Filler,
    seed: int,
) -> float:
    """The chat template's tokens for one more exchange (an assistant message and the next user message):
    one request of three messages of 8 words each, its ``usage.prompt_tokens`` less the one-message
    template's tokens and the words' (NaN when the server gives no count)."""
    messages = [
        {"role": role, "content": words_text(filler, 8 * filler.tokens_per_word, seed + 2**62 + 2 + j)}
        for j, role in enumerate(("user", "assistant", "user"))
    ]
    body = body_for(0, messages) | {"max_tokens": 1}
    if "min_tokens" in body:
        body["min_tokens"] = 1
    record, _ = await exchange(body, time.perf_counter())
    return float(record["prompt_tokens"]) - filler.template_tokens - 24 * filler.tokens_per_word

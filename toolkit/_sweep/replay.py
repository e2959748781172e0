"""Replaying a request trace against an OpenAI-compatible server, open loop at the trace's times.

Each trace row becomes one streamed chat completion sent at ``arrival_s`` seconds after the replay
starts, whatever is still in flight (open loop: the server's queue, not the client, absorbs bursts).
Its prompt is filler text sized to the row's ``prompt_tokens`` (see :mod:`toolkit._sweep.filler`);
its output is held to the row's ``output_tokens`` with ``max_tokens`` and, when ``exact_output``,
``ignore_eos`` (llama.cpp, vLLM, SGLang) and ``min_tokens`` (vLLM), so a request runs as long as it
did in production. Whether it did is measured, not assumed: ``output_exact`` compares the server's
``usage.completion_tokens`` with the target.

A trace with ``prefix_blocks`` sends prompts built block by block, one fixed text per block id, so
requests with equal leading block ids send byte-identical prefixes; rows with ``session_id`` and
``turn`` are replayed as conversations, closed loop per session (:mod:`toolkit._sweep.conversation`).
Each request records the prompt tokens the server reports it reused (``cached_tokens``).

Rows are sent in order of ``arrival_s`` (as :func:`toolkit.simulate` reads a trace), whatever their
order in the frame, and each prompt is built as its row is sent, so memory does not grow with the
trace.

The client's own punctuality is measured too: ``lateness_ms`` is how long after its scheduled time
each request left. A client that falls behind (the 99th percentile above ``max_lateness_ms``)
replays a different, smoother trace than the one given, and the result says so.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from toolkit._args import check_int, check_number
from toolkit._queueing.workload import _trace_columns
from toolkit._sweep.blocking import run_blocking
from toolkit._sweep.conversation import block_text, conversation_columns, send_sessions
from toolkit._sweep.lanes import _exchange
from toolkit._sweep.llama_server import LlamaServer
from toolkit._sweep.plan import _api_key
from toolkit._sweep.records import _record, _Stream
from toolkit._sweep.replay_result import ReplayResult, replay_summary, requests_frame
from toolkit._sweep.session import check_target, session

__all__ = ["replay_trace"]


def replay_trace(
    trace: pd.DataFrame,
    base_url: str | None = None,
    model: str | None = None,
    *,
    server: Any = None,
    exact_output: bool = True,
    timeout_s: float = 600.0,
    deadline_s: float | None = None,
    max_lateness_ms: float = 50.0,
    seed: int = 0,
    api_key: str | None = None,
    api_key_env: str | None = "TOOLKIT_API_KEY",
    extra_body: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> ReplayResult:
    """Replay a request trace against a chat-completions server and measure every request.

    Works from a script and from a notebook alike (inside a running event loop it runs in a worker
    thread and blocks the cell until done).

    Parameters
    ----------
    trace : pandas.DataFrame
        One request per row: ``arrival_s`` (s from the start), ``prompt_tokens``, ``output_tokens``
        (integers >= 1), as :func:`toolkit.load_trace` returns (use its ``time_scale`` and
        ``token_scale`` to fit a production hour to a small server; ``token_scale`` scales prefix
        blocks too). Other columns are carried into the result. With ``prefix_blocks`` (and
        ``attrs["prefix_block_tokens"]``, as :func:`toolkit.load_trace` and
        :func:`toolkit.session_workload` give) each prompt is built from one fixed text per block id;
        with ``session_id`` and ``turn`` (and optionally ``think_time_s``) each session is one chat,
        its first turn sent at ``arrival_s``, each later turn ``think_time_s`` after the previous
        answer arrived, carrying the chat so far with the server's actual answers, its new user
        message sized so the whole prompt reaches the row's ``prompt_tokens``.
    base_url : str or None
        The server's root, ``http://host:port``. With neither ``base_url`` nor ``server``, a local
        :class:`toolkit.LlamaServer` serving the default model is started for the replay and stopped
        after it.
    model : str or None
        Model name sent with every request; None takes the first one ``/v1/models`` lists.
    server : toolkit.LlamaServer or None
        A running server to replay against (instead of ``base_url``).
    exact_output : bool
        Ask the server to produce exactly ``output_tokens`` (``ignore_eos`` and ``min_tokens``
        alongside ``max_tokens``); False sends only ``max_tokens``, for servers that reject unknown
        fields.
    timeout_s : float
        Limit for one request, sending to last byte, in seconds (> 0).
    deadline_s : float or None
        Limit for the whole call in seconds (> 0), counted from the call: set-up (the model probe,
        the ``/tokenize`` probe, the two calibration requests, a local server's start) falls inside
        it. At the deadline nothing more is sent, requests in flight are cancelled, and both are rows
        with an error (never dropped). When set-up itself does not finish in time nothing has been
        measured, and a ``TimeoutError`` says which step it was on.
    max_lateness_ms : float
        The client is said to have fallen behind when the 99th percentile of ``lateness_ms`` exceeds
        this (> 0).
    seed : int
        Seed of the filler words and of each block's text (0 to 2**62).
    api_key : str or None
        Bearer token; None reads the environment variable ``api_key_env``. Sent to ``base_url`` only.
    api_key_env : str or None
        Environment variable read when ``api_key`` is None.
    extra_body : mapping or None
        Extra JSON fields for every request (``temperature`` ...).
    progress : bool
        Show a tqdm bar of completed requests.

    Returns
    -------
    ReplayResult
        ``requests`` (one row per trace row, in trace order), ``summary`` (one row) and ``warnings``;
        the columns are listed on :class:`toolkit.ReplayResult`.

    Raises
    ------
    ValueError
        An argument out of range (the message names it) or a malformed trace.
    ConnectionError
        Nothing answered at ``<base_url>/v1/models``, or prompt lengths could not be calibrated (the
        server's counts put tokens per word outside the believed range, see
        :mod:`toolkit._sweep.filler`).
    TimeoutError
        ``deadline_s`` ran out before set-up finished; nothing was sent.
    """
    started = time.monotonic()
    args = _check(dict(locals())) | {"started": started}
    if args["base_url"] is None:
        with LlamaServer() as local:
            return _run(args | {"base_url": local.base_url})
    return _run(args)


def _run(args: dict[str, Any]) -> ReplayResult:
    return run_blocking(lambda: _replay(**args), name="toolkit-replay")


def _check(a: dict[str, Any]) -> dict[str, Any]:
    arrival, prompt, output = _trace_columns(a["trace"])
    extra = check_target(a)
    for name in ("exact_output", "progress"):
        if not isinstance(a[name], bool):
            raise ValueError(f"{name} must be True or False, got {a[name]!r}")
    deadline = a["deadline_s"]
    trace = a["trace"]
    blocks, sessions, think = conversation_columns(trace, prompt, output)
    return {
        "trace": trace,
        "blocks": blocks,
        "sessions": sessions,
        "think_s": think,
        "arrival_s": arrival,
        "prompt_tokens": prompt.astype(int),
        "output_tokens": output.astype(int),
        "base_url": a["base_url"],
        "model": a["model"],
        "exact_output": a["exact_output"],
        "timeout_s": check_number("timeout_s", a["timeout_s"], low=0, low_inclusive=False, high=86_400),
        "deadline_s": None if deadline is None else check_number("deadline_s", deadline, low=0, low_inclusive=False),
        "max_lateness_ms": check_number("max_lateness_ms", a["max_lateness_ms"], low=0, low_inclusive=False),
        "seed": check_int("seed", a["seed"], low=0, high=2**62),
        "api_key": _api_key(a["api_key"], a["api_key_env"]),
        "extra_body": extra,
        "progress": a["progress"],
    }


async def _replay(
    *, trace, blocks, sessions, think_s, arrival_s, prompt_tokens, output_tokens, base_url, model, exact_output,
    timeout_s, deadline_s, max_lateness_ms, seed, api_key, extra_body, progress, started,
) -> ReplayResult:  # fmt: skip
    until = math.inf if deadline_s is None else started + deadline_s
    bound = f"replay_trace's deadline_s={deadline_s:g} s" if deadline_s is not None else ""
    async with session(base_url, model, api_key, timeout_s, seed, until=until, bound=bound) as ses:
        model, filler = ses.model, ses.filler

        def first_text(i: int) -> str:
            if blocks is None:
                return filler.text(filler.words_for(int(prompt_tokens[i])), seed=seed + i)
            return block_text(filler, blocks[1][i], prompt_tokens[i] - filler.template_tokens, blocks[0], seed)

        def body_for(i: int, messages: list[dict[str, str]] | None = None) -> dict[str, Any]:
            messages = messages or [{"role": "user", "content": first_text(i)}]
            return _body(messages, model, output_tokens[i], exact_output, extra_body)

        left = None if deadline_s is None else until - time.monotonic()
        turn_tokens = None
        if sessions is None:
            rows = await _send_all(
                ses.client, ses.chat_url, ses.auth, body_for, arrival_s, timeout_s, left, ses.secrets, progress
            )
        else:
            rows = [{} for _ in arrival_s]
            turn_tokens = await send_sessions(
                sessions[0],
                arrival_s=arrival_s,
                think_s=think_s,
                prompt_tokens=prompt_tokens,
                new_user_tokens=sessions[1],
                filler=filler,
                seed=seed,
                first_text=first_text,
                body_for=body_for,
                exchange=lambda body, sent: _exchange(
                    ses.client, ses.chat_url, body, auth=ses.auth, timeout_s=timeout_s, secrets=ses.secrets, start=sent
                ),
                cancelled=lambda sent: _record(_Stream(), sent, time.perf_counter(), f"cancelled: {bound} was reached"),
                rows=rows,
                deadline_s=left,
                progress=progress,
            )
            for row in rows:
                if not row:
                    row.update(outcome="not_sent", error=f"not sent: {bound} came first")
    root = ses.root
    requests = requests_frame(trace, rows, prompt_tokens, output_tokens, filler)
    params = {
        "base_url": root,
        "model": model,
        "requests": len(trace),
        "exact_output": exact_output,
        "prompt_method": filler.method,
        "prefix_block_tokens": None if blocks is None else blocks[0],
        "closed_loop_sessions": None if sessions is None else len(sessions[0]),
        "turn_template_tokens": turn_tokens,
        "template_tokens": filler.template_tokens,
        "tokens_per_word": filler.tokens_per_word,
        "max_lateness_ms": max_lateness_ms,
        "seed": seed,
    }
    summary, warnings = replay_summary(requests, max_lateness_ms=max_lateness_ms, prompt_method=filler.method)
    return ReplayResult(requests=requests, summary=summary, params=params, warnings=tuple(warnings))


def _body(messages: list[dict[str, str]], model: str, n_output: int, exact: bool, extra: dict) -> dict[str, Any]:
    """One request's body: the chat ``messages``, its answer held to ``n_output`` tokens."""
    body = {
        **extra,
        "model": model,
        "messages": messages,
        "max_tokens": int(n_output),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if exact:
        body.update(ignore_eos=True, min_tokens=int(n_output))
    return body


async def _send_all(
    client: httpx.AsyncClient,
    chat_url: str,
    auth: httpx.Auth | None,
    body_for: Callable[[int], dict[str, Any]],
    arrival_s: np.ndarray,
    timeout_s: float,
    deadline_s: float | None,
    secrets: tuple[str, ...],
    progress: bool,
    bound: str = "the replay's deadline",
) -> list[dict[str, Any]]:
    """Send request ``i`` (body ``body_for(i)``, built as it is sent) at ``arrival_s[i]``, in order of
    arrival; one row per request, in the given order, whatever happened to it. ``deadline_s`` counts
    from now; ``bound`` names it in the rows it stops."""
    rows: list[dict[str, Any]] = [{} for _ in arrival_s]
    bar = tqdm(total=len(rows), desc="replay", unit="req", leave=False, disable=not progress)
    stop_at = math.inf if deadline_s is None else time.perf_counter() + deadline_s
    t0 = time.perf_counter() + 0.05  # a short lead so the first sends are not late by set-up time

    async def one(i: int, body: dict[str, Any], sent: float) -> None:
        try:
            record, _ = await _exchange(
                client, chat_url, body, auth=auth, timeout_s=timeout_s, secrets=secrets, start=sent
            )
        except asyncio.CancelledError:
            record = _record(_Stream(), sent, time.perf_counter(), f"cancelled: {bound} was reached")
        rows[i].update(record, end_s=time.perf_counter() - t0)
        bar.update()

    tasks = []
    for i in np.argsort(arrival_s, kind="stable"):
        scheduled = t0 + arrival_s[i]
        if scheduled >= stop_at:
            break
        body = body_for(int(i))
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent = time.perf_counter()
        rows[i].update(sent_s=sent - t0, lateness_ms=(sent - scheduled) * 1000)
        tasks.append(asyncio.create_task(one(int(i), body, sent)))
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, stop_at - time.perf_counter()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    bar.close()
    for row in rows:
        if not row:
            row.update(outcome="not_sent", error=f"not sent: {bound} came first")
    return rows

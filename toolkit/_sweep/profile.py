"""A designed experiment that identifies each efficiency of the cost model on a real server.

A sweep measures whatever its prompts happen to exercise; a profile measures cells chosen so that
each term of :class:`toolkit.CostModel` moves on its own (see :func:`profile`). Each cell is a
*wave*: ``batch`` requests sent together with the same prompt and output lengths, their prompts
filler words sized by the server's tokenizer (:mod:`toolkit._sweep.filler`) and all distinct, so
that nothing but the chat template can come from the prefix cache (what does is read back from
``usage`` and not counted as prefilled). Repeats are interleaved (every cell once, then every cell
again) so that a drift of the host touches every cell alike.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
import pandas as pd

from toolkit._args import check_int, check_number
from toolkit._sweep import host_state
from toolkit._sweep.blocking import run_blocking
from toolkit._sweep.bounded import MAX_EXCERPT_BYTES, BodyTooLarge, fetch
from toolkit._sweep.llama_server import LlamaServer
from toolkit._sweep.plan import _api_key
from toolkit._sweep.profile_cells import design, mark_noisy, mixed_delay_s, wave_requests
from toolkit._sweep.replay import _body, _send_all
from toolkit._sweep.session import check_target, session

__all__ = ["profile"]


def profile(
    base_url: str | None = None,
    model: str | None = None,
    *,
    server: Any = None,
    repeats: int = 3,
    context_tokens: Sequence[int] = (64, 1024),
    prompt_tokens: Sequence[int] = (32, 128, 384, 768),
    batch_sizes: Sequence[int] = (1, 2, 4, 6, 8),
    mixed_prompt_tokens: Sequence[int] = (),
    mixed_batch_sizes: Sequence[int] = (2, 4),
    output_tokens: int = 32,
    budget_s: float = 600.0,
    timeout_s: float = 300.0,
    seed: int | None = None,
    api_key: str | None = None,
    api_key_env: str | None = "TOOLKIT_API_KEY",
    extra_body: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Measure the cells that identify the serving model's efficiencies on one server.

    The design (each cell repeated ``repeats`` times, repeats interleaved):

    - ``decode``: one stream of ``output_tokens`` tokens after a prompt of each of
      ``context_tokens``: the step time at batch 1 against context separates the bandwidth term
      (``mbu``) from the fixed step overhead (``step_overhead_ms``).
    - ``batch``: ``b`` streams together for each ``b`` of ``batch_sizes`` above 1, prompts of
      ``context_tokens[0]``: the step time against batch gives the per-sequence (compute) term,
      how it adds to the memory term (``mfu``, ``serial_share``), and against the single stream
      whether a step of several tokens reads the weights as fast as one of one
      (``batched_mbu_factor``); a batch above four that is not a multiple of four (6 by default)
      whether the engine's matrix kernels run rows in blocks of four (``logit_remainder_reads``).
    - ``prefill``: one prompt of each of ``prompt_tokens``, one output token: TTFT against prompt
      length gives the prefill rate (``mfu``) and the fixed per-request cost
      (``request_overhead_ms``); a prompt's one row of logits against the batch cells' row per
      sequence, whether the output matrix's batched kernel costs what the body's does
      (``logit_batched_reads``, from the shortest prompt).
    - ``mixed``: ``b`` streams as in a batch cell, and one prompt of each of ``mixed_prompt_tokens``
      (one output token) sent while they decode, for each ``b`` of ``mixed_batch_sizes``: the
      prompt is prefilled in the same engine steps as their decodes, so its TTFT and the streams'
      longest gap (``itl_ms_max``) measure how the two interfere (``masked_pair_share``, and the
      step rule itself; :mod:`toolkit._calibration.observations`).

    Before it sends anything the profile states its cost (requests and tokens) on stderr when
    ``progress``. ``budget_s`` bounds the whole call from its start, set-up included (the model probe,
    the ``/tokenize`` probe, the calibration requests, a local server's start): a wave is not started
    when the time left is shorter than an earlier wave of the same cell took, requests still in
    flight when the budget runs out are cancelled (rows with an error), and the waves not run are
    rows with ``outcome`` ``not_run``. When set-up itself does not finish within the budget nothing
    has been measured, and a ``TimeoutError`` says which step it was on.

    Parameters
    ----------
    base_url : str or None
        The server's root; with neither ``base_url`` nor ``server`` a local
        :class:`toolkit.LlamaServer` is started for the profile and stopped after it.
    model : str or None
        Model name sent with every request; None takes the first one ``/v1/models`` lists.
    server : toolkit.LlamaServer or None
        A running local server (its process's CPU time is then measured too).
    repeats : int
        Waves per cell (1..100); three or more give each cell a spread.
    context_tokens : sequence of int
        Prompt lengths of the single-stream decode cells (two or more distinct, >= 1).
    prompt_tokens : sequence of int
        Prompt lengths of the prefill cells (three or more distinct, >= 1).
    batch_sizes : sequence of int
        Streams decoded together (three or more distinct, 1..256; 1 is the first decode cell).
    mixed_prompt_tokens, mixed_batch_sizes : sequence of int
        Prompt lengths (>= 1) and stream counts (1..256, at least one) of the mixed cells, every pair
        one cell; an empty ``mixed_prompt_tokens`` runs none. None by default (opt in with e.g. ``(256, 768)``): on the local
        llama-server the term they identify (``masked_pair_share``) is not yet shown to improve
        held-out predictions, and the report keeps the profile it was validated with.
    output_tokens : int
        Tokens generated by each decode and batch request (2..100000).
    budget_s : float
        Limit for the whole call, set-up included, in seconds (> 0).
    timeout_s : float
        Limit for one request (s, > 0).
    seed : int or None
        Seed of the filler words (0 to 2**40); None draws a fresh one, so that a profile repeated on
        the same server finds none of its prompts in the prefix cache. Recorded in ``seed``.
    api_key, api_key_env, extra_body, progress
        As in :func:`toolkit.replay_trace`.

    Returns
    -------
    pandas.DataFrame
        One row per request: ``cell`` (``decode``, ``batch``, ``prefill`` or ``mixed``), ``repeat``,
        ``wave`` (running number), ``batch`` (streams in the wave), ``request`` (position in it),
        ``role`` (``stream`` or ``prompt``), ``prompt_tokens_target`` (a mixed wave's: its prompt's),
        ``output_tokens_target``, ``sent_s`` (s after the wave's start); the server's ``prompt_tokens``,
        ``cached_tokens`` and ``output_tokens``; ``ttft_ms``, ``tpot_ms``, ``e2e_ms``,
        ``itl_ms_p50``, ``itl_ms_max`` (ms); ``outcome`` (``ok``, ``error``, ``not_run``), ``error``; the wave's
        conditions ``wave_s``, ``load_1m_before``, ``load_1m_after``, ``steal_share``,
        ``other_cpu_share``, ``client_cpu_s``, ``server_cpu_s``, ``busy`` (see
        :mod:`toolkit._sweep.host_state`); ``noisy`` (the cell's repeats disagree: its per-wave
        medians' standard deviation exceeds ``NOISY_TOLERANCE`` of their median); ``server_version``,
        ``server_flags``, ``model`` and ``seed``. Unknowns are NaN, never zero.

    Raises
    ------
    ValueError
        An argument out of range (the message names it).
    ConnectionError
        Nothing answered at ``<base_url>/v1/models``, or prompt lengths could not be calibrated.
    TimeoutError
        ``budget_s`` ran out before set-up finished; nothing was sent.
    """
    started = time.monotonic()
    args = _check(dict(locals())) | {"started": started}
    if args["base_url"] is None:
        with LlamaServer() as local:
            return _run(args | {"base_url": local.base_url, "server": local})
    return _run(args)


def _run(args: dict[str, Any]) -> pd.DataFrame:
    return run_blocking(lambda: _profile(**args), name="toolkit-profile")


def _distinct(name: str, values: Any, *, least: int, low: int, high: int) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence of integers, got {values!r}")
    out = tuple(check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values))
    if len(set(out)) < least:
        raise ValueError(f"{name} must hold at least {least} distinct values to identify its term, got {values!r}")
    return out


def _check(a: dict[str, Any]) -> dict[str, Any]:
    extra = check_target(a)
    if not isinstance(a["progress"], bool):
        raise ValueError(f"progress must be True or False, got {a['progress']!r}")
    return {
        "base_url": a["base_url"],
        "model": a["model"],
        "server": a["server"],
        "cells": design(
            context_tokens=_distinct("context_tokens", a["context_tokens"], least=2, low=1, high=10**6),
            prompt_tokens=_distinct("prompt_tokens", a["prompt_tokens"], least=3, low=1, high=10**6),
            batch_sizes=_distinct("batch_sizes", a["batch_sizes"], least=3, low=1, high=256),
            output_tokens=check_int("output_tokens", a["output_tokens"], low=2, high=100_000),
            repeats=check_int("repeats", a["repeats"], low=1, high=100),
            mixed_prompt_tokens=_distinct("mixed_prompt_tokens", a["mixed_prompt_tokens"], least=0, low=1, high=10**6),
            mixed_batch_sizes=_distinct("mixed_batch_sizes", a["mixed_batch_sizes"], least=1, low=1, high=256),
        ),
        "budget_s": check_number("budget_s", a["budget_s"], low=0, low_inclusive=False),
        "timeout_s": check_number("timeout_s", a["timeout_s"], low=0, low_inclusive=False, high=86_400),
        "seed": int(np.random.SeedSequence().entropy % 2**40)
        if a["seed"] is None
        else check_int("seed", a["seed"], low=0, high=2**40),
        "api_key": _api_key(a["api_key"], a["api_key_env"]),
        "extra_body": extra,
        "progress": a["progress"],
    }


async def _profile(
    *, base_url, model, server, cells, budget_s, timeout_s, seed, api_key, extra_body, progress, started
):
    if progress:
        print(_cost_statement(cells, budget_s), file=sys.stderr)
    pid = getattr(server, "pid", None)
    until = started + budget_s
    bound = f"profile's budget_s={budget_s:g} s"
    async with session(base_url, model, api_key, timeout_s, seed, until=until, bound=bound) as ses:
        client, model = ses.client, ses.model
        version = await _server_version(client, ses.root, ses.auth, min(timeout_s, until - time.monotonic()))
        rows: list[dict[str, Any]] = []
        took: dict[tuple, float] = {}  # the longest wave of each cell so far, s
        for wave, cell in enumerate(cells.itertuples(index=False)):
            base = {**cell._asdict(), "wave": wave}
            requests = wave_requests(
                cell.cell, int(cell.batch), int(cell.prompt_tokens_target), int(cell.output_tokens_target),
                int(cells["prompt_tokens_target"].iloc[0]),
                mixed_delay_s(rows, int(cell.batch), np.random.default_rng([seed, wave]).random())
                if cell.cell == "mixed"
                else 0.0,
            )  # fmt: skip
            n, key = len(requests), (cell.cell, cell.batch, cell.prompt_tokens_target)
            left = until - time.monotonic()
            if left <= took.get(key, 0.0):
                why = (
                    "the profile's budget_s was spent"
                    if left <= 0
                    else "the budget_s left is shorter than an earlier wave of this cell took"
                )
                rows += [{**base, **_own(requests, i), "outcome": "not_run", "error": why} for i in range(n)]
                continue
            # every request of the profile gets its own words: seed, wave and position
            seeds = seed + 1000 * wave

            def body_for(i: int, r: pd.DataFrame = requests, s: int = seeds) -> dict[str, Any]:
                p, o = int(r["prompt_tokens"].iloc[i]), int(r["output_tokens"].iloc[i])
                text = ses.filler.text(ses.filler.words_for(p), seed=s + i)
                return _body([{"role": "user", "content": text}], model, o, True, extra_body)

            before = host_state.sample(pid)
            arrivals = requests["arrival_s"].to_numpy(float)
            records = await _send_all(
                client, ses.chat_url, ses.auth, body_for, arrivals, timeout_s, left, ses.secrets, False, bound
            )
            after = host_state.sample(pid)
            took[key] = max(took.get(key, 0.0), after.wall_s - before.wall_s)
            state = host_state.conditions(before, after) | {"wave_s": after.wall_s - before.wall_s}
            rows += [{**base, **_own(requests, i), **_keep(r), **state} for i, r in enumerate(records)]
            if progress:
                print(f"profile: wave {wave + 1}/{len(cells)} ({cell.cell}, batch {n}) done", file=sys.stderr)
    frame = pd.DataFrame(rows).reindex(columns=_COLUMNS)
    frame["server_version"] = version
    frame["server_flags"] = _flags(server)
    frame["model"] = model
    frame["seed"] = seed
    return mark_noisy(frame)


_KEPT = (
    "prompt_tokens", "cached_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2e_ms", "itl_ms_p50", "itl_ms_max",
    "sent_s", "outcome", "error",
)  # fmt: skip
_COLUMNS = [
    "cell", "repeat", "wave", "batch", "request", "role", "prompt_tokens_target", "output_tokens_target", *_KEPT,
    "wave_s", "load_1m_before", "load_1m_after", "steal_share", "other_cpu_share", "client_cpu_s", "server_cpu_s",
    "busy",
]  # fmt: skip


def _own(requests: pd.DataFrame, i: int) -> dict[str, Any]:
    """A request's own position, role and output target within its wave."""
    return {
        "request": i,
        "role": requests["role"].iloc[i],
        "output_tokens_target": int(requests["output_tokens"].iloc[i]),
    }


def _keep(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record.get(k, math.nan) for k in _KEPT}


def _cost_statement(cells: pd.DataFrame, budget_s: float) -> str:
    requests, prompt, output = (int(cells[c].sum()) for c in ("requests", "prompt_sent", "output_sent"))
    return (
        f"profile: {len(cells)} waves, {requests} requests, {prompt:,} prompt and {output:,} output tokens; "
        f"no wave starts after {budget_s:g} s"
    )


async def _server_version(client: httpx.AsyncClient, root: str, auth: Any, timeout_s: float) -> str:
    """llama.cpp's ``/props`` build string, else ``unknown`` (also when ``timeout_s`` is not > 0)."""
    if timeout_s <= 0:
        return "unknown"
    try:
        status, raw = await fetch(
            client, "GET", root + "/props", max_bytes=MAX_EXCERPT_BYTES * 64, timeout_s=min(timeout_s, 10.0),
            auth=auth or httpx.USE_CLIENT_DEFAULT,
        )  # fmt: skip
        value = json.loads(raw).get("build_info") if status == 200 else None
    except (httpx.HTTPError, TimeoutError, BodyTooLarge, ValueError, AttributeError, RecursionError):
        value = None
    return value if isinstance(value, str) and value else "unknown"


def _flags(server: Any) -> str:
    """The local server's command line without its paths, else ``unknown``."""
    command = getattr(server, "command", None)
    if command is None:
        return "unknown"
    return " ".join("<path>" if "/" in a else a for a in command()[1:])

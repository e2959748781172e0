"""Multi-turn chat and agent sessions as a trace frame with prefix blocks.

Sessions start at Poisson or gamma-distributed times. A session has a number of turns; each turn's
prompt is the previous turn's prompt, its answer and the user's new tokens, so turn k + 1 reuses all
of turn k's prompt. A session may open with a system prompt drawn from a pool whose popularity
follows Zipf's law (agents and RAG templates share a few long preambles), so sessions share that
prefix with each other.

The blocks model a token stream per session: a block that lies wholly inside the system prompt is
named by (system prompt, position) and is shared by every session that drew that prompt; any other
block by (session, position, last token), so a turn shares every block of the previous turn's prompt
but a partial last block, which grows into a different, full block (block-hash engines cache full
blocks only). Ids are numbered densely; equal ids are equal tokens.

An engine keeps a finished request's answer after its prompt: llama.cpp's server decodes each
sampled token into the slot's cache (``update_slots`` in ``tools/server/server-context.cpp`` pushes
``slot.sampled`` to the slot's prompt tokens as it adds it to the batch), vLLM hashes the full
blocks of the output tokens too (``Request.append_output_token_ids`` extends ``block_hashes``,
``KVCacheManager.allocate_slots`` caches up to ``request.num_tokens``). Both keep ``prompt + output
- 1`` tokens: the last sampled token is never decoded. ``answer_blocks`` names the blocks of that
token stream past the prompt's full blocks by the same rule, so the next turn's prompt, which holds
the answer, has the same ids for the blocks the engine kept whole.

Arrival times are open loop: turn k + 1 arrives ``response_time_s + think_time_s`` after turn k,
where ``response_time_s`` is a fixed estimate of the time to answer (0 by default: the earliest the
user could send). A real client sends the next turn after the answer arrives, which a closed-loop
replay does from ``session_id``, ``turn`` and ``think_time_s``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._queueing.arrivals import ARRIVALS, MAX_CA2, inter_arrival_gaps_s
from toolkit._queueing.workload import MAX_REQUESTS, _draw_tokens
from toolkit._workload.blocks import MAX_BLOCK_TOKENS, MAX_BLOCKS, as_tuples
from toolkit._workload.prefix import ANSWER_COLUMN, ATTR, COLUMN

__all__ = ["session_workload"]

MAX_SESSIONS = 10**6
MAX_THINK_S = 1e6


def session_workload(
    *,
    num_sessions: int,
    session_rate: float,
    arrivals: str = "poisson",
    ca2: float = 1.0,
    turns: object = ("geometric", 4),
    think_time_s: object = ("exponential", 30.0),
    user_tokens: object = ("lognormal", 200, 1.0),
    output_tokens: object = ("lognormal", 300, 1.0),
    system_prompt_tokens: int = 0,
    system_prompts: int = 1,
    zipf_exponent: float = 1.0,
    response_time_s: float = 0.0,
    max_prompt_tokens: int = 32768,
    prefix_block_tokens: int = 16,
    seed: int = 0,
) -> pd.DataFrame:
    """Generate multi-turn sessions as a trace frame with prefix blocks.

    Parameters
    ----------
    num_sessions : int
        Sessions generated (1 to 10**6).
    session_rate : float
        Mean rate at which sessions start (sessions/s, > 0).
    arrivals : {"poisson", "gamma"}
        Gaps between session starts: exponential, or gamma with squared coefficient of variation ``ca2``.
    ca2 : float
        Burstiness of the session starts (``arrivals="gamma"`` only; > 0, at most 1e4).
    turns : int, callable or tuple
        Turns per session, a token-count spec as in :func:`toolkit.simulate`: an int,
        ``("geometric", mean)`` (the default, mean 4: a conversation goes on with a fixed
        probability), ``("lognormal", mean, cv)`` or ``callable(rng, n)``.
    think_time_s : float, callable or tuple
        Seconds between an answer and the next turn: a constant, ``("exponential", mean)``,
        ``("lognormal", mean, cv)`` or ``callable(rng, n)`` (each 0 to 1e6 s).
    user_tokens, output_tokens : int, callable or tuple
        New user tokens per turn and answer tokens per turn, token-count specs as ``turns``.
    system_prompt_tokens : int
        Tokens of each shared system prompt (0, the default: none).
    system_prompts : int
        Size of the pool the system prompts are drawn from (1 to 10**6).
    zipf_exponent : float
        Popularity of the pool's prompts: prompt i (from 1) is drawn with probability proportional to
        ``i ** -zipf_exponent`` (0 to 10; 0 is uniform).
    response_time_s : float
        Estimated time to answer a turn, added between turns in the open-loop arrival times (s, >= 0).
    max_prompt_tokens : int
        A session ends before the turn whose prompt would exceed this (as a client starts over
        when its context is full); its first turn is always kept.
    prefix_block_tokens : int
        Tokens per block of ``prefix_blocks`` (1 to 2**20; vLLM's default block is 16).
    seed : int
        Seed of every draw (0 to 2**63 - 1).

    Returns
    -------
    pandas.DataFrame
        One row per turn, sorted by ``arrival_s``: ``arrival_s``, ``prompt_tokens``,
        ``output_tokens``, ``session_id``, ``turn`` (from 0), ``think_time_s`` (the pause before
        this turn, 0 for a first turn), ``system_prompt`` (pool index, -1 for none) and
        ``prefix_blocks``, and ``answer_blocks`` (the blocks the engine keeps of the answer: module
        notes); ``attrs`` records ``prefix_block_tokens``, ``source`` and ``window_s``.
    """
    n = check_int("num_sessions", num_sessions, low=1, high=MAX_SESSIONS)
    rate = check_number("session_rate", session_rate, low=0, low_inclusive=False, high=1e9)
    check_choice("arrivals", arrivals, ARRIVALS)
    ca2 = check_number("ca2", ca2, low=0, low_inclusive=False, high=MAX_CA2)
    if arrivals == "poisson" and ca2 != 1.0:
        raise ValueError("ca2 applies to arrivals='gamma' only (Poisson inter-arrivals have cv^2 = 1)")
    system = check_int("system_prompt_tokens", system_prompt_tokens, low=0, high=10**7)
    pool = check_int("system_prompts", system_prompts, low=1, high=MAX_SESSIONS)
    zipf = check_number("zipf_exponent", zipf_exponent, low=0, high=10)
    response = check_number("response_time_s", response_time_s, low=0, high=MAX_THINK_S)
    cap = check_int("max_prompt_tokens", max_prompt_tokens, low=1, high=10**9)
    block = check_int("prefix_block_tokens", prefix_block_tokens, low=1, high=MAX_BLOCK_TOKENS)
    rng = np.random.default_rng(check_int("seed", seed, low=0, high=2**63 - 1))

    starts = np.concatenate([[0.0], np.cumsum(inter_arrival_gaps_s(rng, n - 1, rate, arrivals=arrivals, ca2=ca2))])
    weights = np.arange(1, pool + 1, dtype=float) ** -zipf
    drawn = rng.choice(pool, size=n, p=weights / weights.sum()) if system else np.full(n, -1)
    count = _draw_tokens("turns", turns, rng, n)
    total = int(count.sum())
    if total > MAX_REQUESTS:
        raise ValueError(f"turns: {total} turns in all; at most {MAX_REQUESTS:.0e} (the simulator's cap)")
    session = np.repeat(np.arange(n), count)
    turn = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    user = _draw_tokens("user_tokens", user_tokens, rng, total)
    answer = _draw_tokens("output_tokens", output_tokens, rng, total)
    think = np.where(turn > 0, _draw_seconds(think_time_s, rng, total), 0.0)

    # prompt of turn k: system + sum of (user + answer) of the turns before + user of turn k
    grown = _cumsum_within(user + answer, session) - answer
    prompt = system + grown
    arrival = starts[session] + _cumsum_within(np.where(turn > 0, think + response, 0.0), session)
    keep = (turn == 0) | (_cumsum_within((prompt > cap).astype(np.int64), session) == 0)
    frame = pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": answer,
            "session_id": session,
            "turn": turn,
            "think_time_s": think,
            "system_prompt": drawn[session],
        }
    ).loc[keep]
    frame[COLUMN], frame[ANSWER_COLUMN] = _blocks(frame, system=system, block=block)
    frame = frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    frame.attrs.update(
        {
            ATTR: block,
            "source": f"toolkit.session_workload (seed {seed})",
            "window_s": float(frame["arrival_s"].max()),
        }
    )
    return frame


def _cumsum_within(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running sums of ``values`` restarting at each new ``group`` (rows of a group are contiguous)."""
    total = np.cumsum(values)
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    before = np.repeat(total[first] - values[first], np.diff(np.r_[first, len(values)]))
    return total - before


def _draw_seconds(spec: object, rng: np.random.Generator, n: int) -> np.ndarray:
    if callable(spec):
        values = np.asarray(spec(rng, n), dtype=float)
    elif isinstance(spec, (tuple, list)) and spec and spec[0] == "exponential" and len(spec) == 2:
        values = rng.exponential(check_number("think_time_s mean", spec[1], low=0, high=MAX_THINK_S), n)
    elif isinstance(spec, (tuple, list)) and spec and spec[0] == "lognormal" and len(spec) == 3:
        mean = check_number("think_time_s mean", spec[1], low=0, low_inclusive=False, high=MAX_THINK_S)
        sigma2 = math.log1p(check_number("think_time_s cv", spec[2], low=0, high=100) ** 2)
        values = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    elif isinstance(spec, (int, float)) and not isinstance(spec, bool):
        values = np.full(n, check_number("think_time_s", spec, low=0, high=MAX_THINK_S))
    else:
        raise ValueError(
            "think_time_s must be seconds, ('exponential', mean), ('lognormal', mean, cv) or a "
            f"callable(rng, n); got {spec!r}"
        )
    if values.shape != (n,) or not np.all((values >= 0) & (values <= MAX_THINK_S)):
        raise ValueError(f"think_time_s must give {n} values, each 0 to {MAX_THINK_S:g} s")
    return values


def _blocks(frame: pd.DataFrame, *, system: int, block: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Each turn's prompt block ids and answer block ids: a block at a position of the session's token
    stream is named (system prompt, position) inside the system prompt, else (session, position, last
    token); numbered densely. The answer's are those of the ``prompt + output - 1`` tokens an engine
    keeps, from the prompt's last partial block (or the block after a whole prompt) on."""
    prompt = frame["prompt_tokens"].to_numpy(dtype=np.int64)
    kept = prompt + frame["output_tokens"].to_numpy(dtype=np.int64) - 1
    counts = -(-prompt // block)
    answer_counts = -(-kept // block) - prompt // block
    total = int(counts.sum() + answer_counts.sum())
    if total > MAX_BLOCKS:
        raise ValueError(
            f"prefix_block_tokens={block} gives {total} blocks; at most {MAX_BLOCKS:.0e}: use a larger block"
        )
    # the prompts' blocks, then the answers', each a run of positions of its row's stream
    rows = np.concatenate([np.repeat(np.arange(len(frame)), counts), np.repeat(np.arange(len(frame)), answer_counts)])
    first = np.concatenate([np.zeros(len(frame), dtype=np.int64), prompt // block])
    run = np.concatenate([counts, answer_counts])
    position = np.repeat(first, run) + np.arange(total) - np.repeat(np.cumsum(run) - run, run)
    end = np.concatenate([prompt, kept])[np.repeat(np.arange(2 * len(frame)), run)]
    last = np.minimum((position + 1) * block, end)
    drawn = frame["system_prompt"].to_numpy()[rows]
    shared = (drawn >= 0) & ((position + 1) * block <= system)
    owner = np.where(shared, drawn, frame["session_id"].to_numpy()[rows])
    keys = np.stack([shared.astype(np.int64), owner, position, np.where(shared, 0, last)], axis=1)
    ids = np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)
    split = int(counts.sum())
    return as_tuples(ids[:split], counts), as_tuples(ids[split:], answer_counts)

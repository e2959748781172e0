"""The cost model's prediction of each calibration observation (:mod:`toolkit._calibration.observations`).

A ``tpot`` observation is one decode step of its batch; a ``ttft`` one the wait for the running step,
the steps that prefill the prompt beside the sequences decoding, and the request overhead; a ``gap``
one (a mixed profile cell's streams' longest inter-token gap) the longest of those prefill steps: the
step a decode waits through while a prompt is prefilled beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from toolkit._model.cost import CostModel
from toolkit._queueing.chunking import iteration_ms, prefill_chunk

__all__: list[str] = []


def predict_ms(
    cm: CostModel,
    obs: pd.DataFrame,
    prefill_breaks: Sequence[int] = (),
    prefill_starts: Sequence[int] = (),
    ubatch_tokens: int | None = None,
) -> np.ndarray:
    """The cost model's prediction (ms) of every observation from :func:`observations`.

    With ``prefill_breaks`` (offsets from a prompt's end) or ``prefill_starts`` (positions from its
    start, counting its cached tokens), as in :func:`toolkit.simulate`, a prompt is prefilled in one
    step per chunk between the breaks, as llama-server does on a sliding-window model: its TTFT is
    the sum of those steps, each one also decoding the sequences already running. A ``gap``
    observation (a mixed cell's streams' longest inter-token gap) is the longest of those steps.
    With ``ubatch_tokens`` a step of more tokens is priced as the simulator prices it, as graph passes
    of that many tokens each (:func:`toolkit._queueing.chunking.iteration_ms`).
    """
    b = obs["batch"].to_numpy()
    context = obs["context_tokens"].to_numpy()
    cached = obs["cached_tokens"].to_numpy()
    wave = obs["wave_tokens"].to_numpy()
    m = obs["decoding"].to_numpy()
    held = m * obs.get("decoding_context_tokens", obs["context_tokens"]).to_numpy()  # the decoders' KV
    tpot = cm.step_ms(b, b * context)
    wait = np.minimum(m, 1.0) * 0.5 * cm.step_ms(m, held)
    prompts = obs["wave_prompts"].to_numpy()  # each ends in the wave's last step
    if prefill_breaks or prefill_starts:
        own = np.maximum(obs["prompt_tokens"].to_numpy() - cached, 1.0)
        together = wave / own  # the wave's tokens, as prompts of this one's size cut at the same breaks
        prefill, longest = np.zeros(len(obs)), np.zeros(len(obs))
        chunks = prefill_chunks(own, prefill_breaks, cm.max_num_batched_tokens, cached, prefill_starts)
        for chunk, done in chunks:
            ends = prompts * (done + chunk >= own)
            step = iteration_ms(cm.step_ms, m, held, chunk * together, cached + done, ends, ubatch_tokens)
            prefill = prefill + np.where(chunk > 0, step, 0.0)
            longest = np.maximum(longest, np.where(chunk > 0, step, 0.0))
    else:
        prefill = longest = iteration_ms(cm.step_ms, m, held, wave, cached, prompts, ubatch_tokens)
    ttft = wait + prefill + cm.request_overhead_ms
    kind = obs["kind"].to_numpy()
    return np.where(kind == "tpot", tpot, np.where(kind == "gap", longest, ttft))


def prefill_chunks(
    tokens: np.ndarray,
    prefill_breaks: Sequence[int],
    max_num_batched_tokens: int,
    cached: np.ndarray | None = None,
    prefill_starts: Sequence[int] = (),
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The chunks a lone prompt of ``tokens`` uncached tokens after ``cached`` cached ones (default
    none) is prefilled in, one step each, as the simulator's engine cuts it
    (:func:`toolkit._queueing.chunking.prefill_chunk`: at most the step's token budget, ended at the
    first of ``prefill_breaks`` or ``prefill_starts`` it would cross): (chunk, uncached tokens before
    it) per step, first step first; a chunk is 0 where that prompt needs fewer steps."""
    tokens = np.asarray(tokens, dtype=float)
    cached = np.zeros_like(tokens) if cached is None else np.broadcast_to(np.asarray(cached, dtype=float), tokens.shape)
    pairs, which = np.unique(np.stack([tokens, cached], axis=1), axis=0, return_inverse=True)
    which = np.ravel(which)
    breaks = tuple(sorted(set(prefill_breaks), reverse=True))
    starts = tuple(sorted(set(prefill_starts)))
    steps = []  # per distinct (size, cached), its chunks
    for size, before in pairs:
        chunks, left = [], float(size)
        while left > 0:
            chunks.append(prefill_chunk(left, max_num_batched_tokens, breaks, before + size - left, starts))
            left -= chunks[-1]
        steps.append(chunks)
    table = np.zeros((len(pairs), max(map(len, steps), default=0)))
    for row, chunks in zip(table, steps, strict=True):
        row[: len(chunks)] = chunks
    done = np.cumsum(table, axis=1) - table
    return [(table[which, i], done[which, i]) for i in range(table.shape[1])]

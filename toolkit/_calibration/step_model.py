"""The cost model's prediction of each calibration observation (:mod:`toolkit._calibration.observations`).

A ``tpot`` observation is one decode step of its batch; a ``ttft`` one the wait for the running step,
the steps that prefill the prompt beside the sequences decoding, and the request overhead; a ``gap``
one (a mixed profile cell's streams' longest inter-token gap) the longest of those prefill steps: the
step a decode waits through while a prompt is prefilled beside it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from toolkit._model.cost import CostModel
from toolkit._queueing.chunking import iteration_ms, prefill_chunk

__all__: list[str] = []


def predict_ms(
    cm: CostModel,
    obs: pd.DataFrame | Mapping[str, np.ndarray],
    prefill_breaks: Sequence[int] = (),
    prefill_starts: Sequence[int] = (),
    ubatch_tokens: int | None = None,
) -> np.ndarray:
    """The cost model's prediction (ms) of every observation from :func:`observations`.

    ``obs`` is that frame, or a mapping of its columns to arrays (a fit, which predicts the same
    observations thousands of times, passes one: reading a frame's columns is most of a call's time).

    With ``prefill_breaks`` (offsets from a prompt's end) or ``prefill_starts`` (positions from its
    start, counting its cached tokens), as in :func:`toolkit.simulate`, a prompt is prefilled in one
    step per chunk between the breaks, as llama-server does on a sliding-window model: its TTFT is
    the sum of those steps, each one also decoding the sequences already running. A ``gap``
    observation (a mixed cell's streams' longest inter-token gap) is the longest of those steps.
    With ``ubatch_tokens`` a step of more tokens is priced as the simulator prices it, as graph passes
    of that many tokens each (:func:`toolkit._queueing.chunking.iteration_ms`).
    """
    b = np.asarray(obs["batch"])
    context = np.asarray(obs["context_tokens"])
    cached = np.asarray(obs["cached_tokens"])
    wave = np.asarray(obs["wave_tokens"])
    m = np.asarray(obs["decoding"])
    held = m * np.asarray(obs.get("decoding_context_tokens", obs["context_tokens"]))  # the decoders' KV
    tpot = cm.step_ms(b, b * context)
    wait = np.minimum(m, 1.0) * 0.5 * cm.step_ms(m, held)
    prompts = np.asarray(obs["wave_prompts"])  # each ends in the wave's last step
    if prefill_breaks or prefill_starts:
        own = np.maximum(np.asarray(obs["prompt_tokens"]) - cached, 1.0)
        together = wave / own  # the wave's tokens, as prompts of this one's size cut at the same breaks
        prefill, longest = np.zeros(len(b)), np.zeros(len(b))
        chunks = _same_chunks(
            own.tobytes(), np.asarray(cached, dtype=float).tobytes(), tuple(prefill_breaks),
            cm.max_num_batched_tokens, tuple(prefill_starts),
        )  # fmt: skip
        for chunk, done in chunks:
            ends = prompts * (done + chunk >= own)
            step = iteration_ms(cm.step_ms, m, held, chunk * together, cached + done, ends, ubatch_tokens)
            prefill = prefill + np.where(chunk > 0, step, 0.0)
            longest = np.maximum(longest, np.where(chunk > 0, step, 0.0))
    else:
        prefill = longest = iteration_ms(cm.step_ms, m, held, wave, cached, prompts, ubatch_tokens)
    ttft = wait + prefill + cm.request_overhead_ms
    kind = np.asarray(obs["kind"])
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


@functools.lru_cache(maxsize=16)
def _same_chunks(
    tokens: bytes, cached: bytes, prefill_breaks: tuple[int, ...], max_num_batched_tokens: int, starts: tuple[int, ...]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`prefill_chunks` of float64 arrays given as bytes, kept: a fit predicts the same prompts
    thousands of times, and cutting them into chunks does not depend on the parameters it varies
    (callers only read the arrays returned)."""
    return prefill_chunks(np.frombuffer(tokens), prefill_breaks, max_num_batched_tokens, np.frombuffer(cached), starts)

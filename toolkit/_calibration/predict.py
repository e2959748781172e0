"""Predict a closed-loop concurrency sweep (the harness of issue 5) with the simulator.

A sweep runs the same ``lanes`` requests at each in-flight limit, at most ``limit`` at a time, in lane
order. The simulator's closed loop with ``concurrency=limit`` clients and one request per lane does
exactly that; the level's figures are then computed the way the harness computes them.

Prefix caching: the simulator prefills every prompt token it is given, so each lane is given its
uncached tokens (``prompt - cached``) as its prompt, and the cached prefix is added back where it
costs time, through :class:`_PrefixCached`: every decoding sequence also holds the mean cached prefix
in its KV (read each step) and a prefill attends to it. Step times still come from
``CostModel.step_ms``; only its arguments change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from toolkit._args import check_array, check_int
from toolkit._model.cost import CostModel
from toolkit._model.efficiency import MAX_BATCH, MAX_TOKENS
from toolkit._model.serving import cost_model
from toolkit._model.validity import extrapolation, measured_range, warn_extrapolated
from toolkit._queueing.simulator import simulate
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["predict_sweep"]

# Lanes are simulated requests per level: the simulator's own ceiling on requests bounds them.
MAX_LANES = 10**6

# The sweep's level columns that a prediction can fill (the others need a real server).
PREDICTED_LEVEL_COLUMNS = (
    "in_flight",
    "lanes",
    "wall_s",
    "speedup",
    "llm_sum_s",
    "achieved_concurrency",
    "prompt_tokens",
    "output_tokens",
    "dec_tok_s",
    "tok_s_gain",
    "ttft_p50_ms",
    "tpot_p50_ms",
)


class _PrefixCached:
    """A CostModel seen through a prefix cache of ``cached_tokens`` tokens per sequence."""

    def __init__(self, cm: CostModel, cached_tokens: float):
        self._cm = cm
        self._cached = float(cached_tokens)
        self.kv_budget_tokens = cm.kv_budget_tokens
        self.kv_block_tokens = cm.kv_block_tokens
        self.request_overhead_ms = cm.request_overhead_ms
        self.max_batch = cm.max_batch

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0, last_chunks=1):
        n = np.asarray(decode_seqs, dtype=float)
        return self._cm.step_ms(
            n,
            np.asarray(kv_tokens, dtype=float) + n * self._cached,
            prefill_tokens,
            np.asarray(prefill_context_tokens, dtype=float) + self._cached,
            last_chunks,
        )


def _per_lane(name: str, value: object, lanes: int, low: float) -> np.ndarray:
    arr = check_array(name, value, low=low, high=MAX_TOKENS)
    if arr.size == 1:
        arr = np.full(lanes, arr[0])
    if arr.size != lanes:
        raise ValueError(f"{name} must be one number or one per lane ({lanes}), got {arr.size}")
    return arr


@positional_deprecated
def predict_sweep(
    model: object,
    gpu: object,
    quant: object,
    *,
    prompt_tokens: object,
    output_tokens: object,
    lanes: int,
    limits: Sequence[int],
    calibration: object = None,
    cached_tokens: object = 0,
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    max_batch: int = 256,
    max_num_batched_tokens: int = 2048,
    prefill_breaks: Sequence[int] = (),
    ubatch_tokens: int | None = None,
) -> pd.DataFrame:
    """Predict the levels of a closed-loop sweep: ``lanes`` requests at each in-flight limit.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As in :func:`toolkit.cost_model` (``gpu`` may be the row of ``measure_host``).
    prompt_tokens, output_tokens : int or sequence
        Tokens per lane (one number for all lanes, or one per lane in lane order).
    lanes : int
        Requests per level (1 to 1,000,000).
    limits : sequence of int
        In-flight limits, one level each (>= 1).
    calibration : dict, Series or one-row DataFrame, optional
        Efficiency overrides, e.g. the row of :func:`toolkit.calibrate`.
    cached_tokens : int or sequence
        Prompt tokens each lane finds in the prefix cache (<= prompt tokens).
    tensor_parallel : int
        GPUs per replica.
    kv_dtype : str or spec
        KV-cache format.
    max_batch : int
        The server's cap on running sequences (llama-server ``--parallel``, vLLM ``--max-num-seqs``).
    max_num_batched_tokens : int
        Token budget of one engine step.
    prefill_breaks : sequence of int
        The server's prefill breaks, as in :func:`toolkit.simulate`.
    ubatch_tokens : int, optional
        Tokens per graph pass of a step, as in :func:`toolkit.simulate` (None: one pass a step).

    Returns
    -------
    pandas.DataFrame
        One row per limit, with the sweep's level columns: ``in_flight``, ``lanes``, ``wall_s`` (s,
        last completion), ``speedup`` (wall at the first limit / wall), ``llm_sum_s`` (s, summed
        request time), ``achieved_concurrency`` (llm_sum / wall), ``prompt_tokens``,
        ``output_tokens`` (totals), ``dec_tok_s`` (output tokens / wall), ``tok_s_gain``
        (dec_tok_s / dec_tok_s at the first limit), ``ttft_p50_ms``, ``tpot_p50_ms`` (ms, medians
        over lanes). With a ``calibration`` that records its measured range (:func:`toolkit.calibrate`),
        also ``extrapolated`` (bool) and ``extrapolated_reason`` per level: the lanes' longest prompt,
        their longest context (prompt + output) or the level's batch (``min(limit, lanes,
        max_batch)``) above that range, each quantity also named once in a ``UserWarning``.
    """
    lanes = check_int("lanes", lanes, low=1, high=MAX_LANES)
    limits = [check_int("limits", x, low=1, high=MAX_BATCH) for x in np.atleast_1d(limits)]
    if not limits:
        raise ValueError("limits must name at least one in-flight limit (1 to 1,000,000)")
    prompt = _per_lane("prompt_tokens", prompt_tokens, lanes, 1)
    output = _per_lane("output_tokens", output_tokens, lanes, 1)
    cached = _per_lane("cached_tokens", cached_tokens, lanes, 0)
    if np.any(cached > prompt):
        raise ValueError("cached_tokens must be <= prompt_tokens for every lane")
    cm = cost_model(
        model,
        gpu,
        quant,
        tensor_parallel=tensor_parallel,
        kv_dtype=kv_dtype,
        calibration=calibration,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    cost = _PrefixCached(cm, float(np.mean(cached))) if np.any(cached > 0) else cm
    new = np.maximum(np.round(prompt - cached), 1).astype(int)
    out = np.round(output).astype(int)
    rows = []
    for limit in limits:
        result = simulate(
            prompt_tokens=lambda rng, n: new,
            output_tokens=lambda rng, n: out,
            num_requests=lanes,
            concurrency=limit,
            max_batch=max_batch,
            max_num_batched_tokens=max_num_batched_tokens,
            cost=cost,
            warmup_fraction=0.0,
            prefill_breaks=prefill_breaks,
            ubatch_tokens=ubatch_tokens,
        )
        req = result.requests
        wall = float((req["arrival_s"] + req["e2e_s"]).max())
        llm = float(req["e2e_s"].sum())
        rows.append(
            {
                "in_flight": limit,
                "lanes": lanes,
                "wall_s": wall,
                "llm_sum_s": llm,
                "achieved_concurrency": llm / wall,
                "prompt_tokens": float(prompt.sum()),
                "output_tokens": float(out.sum()),
                "dec_tok_s": float(out.sum()) / wall,
                "ttft_p50_ms": float(req["ttft_s"].median() * 1e3),
                "tpot_p50_ms": float(req["tpot_s"].median() * 1e3),
            }
        )
    levels = pd.DataFrame(rows)
    levels["speedup"] = levels["wall_s"].iloc[0] / levels["wall_s"]
    levels["tok_s_gain"] = levels["dec_tok_s"] / levels["dec_tok_s"].iloc[0]
    levels = levels[list(PREDICTED_LEVEL_COLUMNS)]
    if measured_range(calibration):
        extent = {"prompt_tokens": float(prompt.max()), "context_tokens": float((prompt + out).max())}
        flags = [extrapolation(calibration, **extent, batch=min(limit, lanes, max_batch)) for limit in limits]
        levels = levels.assign(extrapolated=[f for f, _ in flags], extrapolated_reason=[r for _, r in flags])
        # one warning per quantity, at its largest value over the levels
        warn_extrapolated(
            "predict_sweep", extrapolation(calibration, **extent, batch=min(max(limits), lanes, max_batch))[1]
        )
    return levels

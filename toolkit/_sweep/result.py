"""What a sweep returns: its levels, runs and lanes as DataFrames, and where its files are."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit._args import check_number
from toolkit._sweep.levels import AGGREGATE_COLUMNS, RUN_COLUMNS, add_relative, aggregate, metric_values

__all__ = ["SweepResult"]


@dataclass(frozen=True)
class SweepResult:
    """The outcome of a sweep: lane attempts, level rows and how the run ended.

    Attributes
    ----------
    lanes : pandas.DataFrame
        One row per lane attempt, columns ``in_flight``, ``lane`` (index into ``prompts``),
        ``attempt`` (1-based), ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (ms), ``llm_s`` (s),
        ``output_tokens``, ``prompt_tokens``, ``cached_tokens`` (tokens), ``slot_wait_s``,
        ``postprocess_s`` (s), ``outcome`` (ok, rejected or error), ``error`` (text), then
        ``repeat``, ``rate_rps``, ``final``, ``cancelled``, ``tokens_from_usage``, ``content_chunks``,
        ``status_code``, ``retry_after_s``, ``start_s``/``end_s`` (s from the level's start),
        ``itl_ms_p50``/``itl_ms_max`` (median and longest gap between content chunks, ms), llama.cpp's
        ``server_tpot_ms``, ``server_predicted_ms``, ``server_predicted_n``,
        ``server_prompt_ms``, ``server_prompt_n``, ``server_cache_n``, ``session`` and ``itl_ms`` (the list
        of every gap between content chunks, ms).
    levels : pandas.DataFrame
        One row per level (repeats averaged): ``in_flight``, ``lanes``, ``wall_s`` (s),
        ``s_per_candidate`` (s, wall / lanes finished), ``speedup``, ``llm_sum_s`` (s), ``achieved_concurrency``,
        ``postprocess_sum_s``, ``slot_wait_s`` (s), ``prompt_tokens``, ``output_tokens``,
        ``dec_tok_s`` (tokens/s), ``tok_s_gain``, ``lanes_ok``, ``prefix_hit_rate`` (server),
        ``provider_cached_rate``, ``ttft_p50_ms`` ... ``tpot_p99_ms`` (ms), ``verdict``, then
        ``rate_rps``, ``achieved_rps``, ``goodput_rps`` (req/s), ``attempts``, ``lanes_failed``,
        ``lanes_unfinished``, ``server_output_tokens``, ``llm_ms_per_token``, ``elasticity``,
        ``itl_p50_ms`` ... ``itl_p99_ms`` (every token gap pooled), ``e2e_p50_ms`` ... ``e2e_p99_ms`` (ms),
        ``input_tok_s`` and ``total_tok_s`` (prompt and prompt-plus-output tokens per second of wall
        clock), ``repeats``, ``wall_s_ci95``, ``dec_tok_s_ci95`` (95% CI half-widths) and ``reason``.
    runs : pandas.DataFrame
        One row per level and repeat, the level columns plus ``repeat``.
    params : dict
        The sweep's parameters as written to ``run.json`` (no API key).
    stopped : str
        Empty when every level ran; otherwise why the sweep stopped early.
    """

    lanes: pd.DataFrame
    levels: pd.DataFrame
    runs: pd.DataFrame
    params: dict = field(default_factory=dict)
    stopped: str = ""

    def latency_stats(self, percentiles: Sequence[float] = (50, 90, 95, 99)) -> pd.DataFrame:
        """Distribution of each latency metric per level, over the answers that completed.

        Parameters
        ----------
        percentiles : sequence of float
            Percentiles to report (each from 0 to 100; linear interpolation).

        Returns
        -------
        pandas.DataFrame
            One row per level (``in_flight``, ``rate_rps``) and metric (``ttft_ms``, ``itl_ms``,
            ``tpot_ms``, ``e2e_ms``; ITL pools every gap between content chunks), with ``count``,
            ``mean``, ``std`` (sample), ``min``, ``max`` and one ``p<q>`` column per percentile, all
            in ms. A metric with no value at a level has ``count`` 0 and NaN elsewhere.
        """
        qs = [check_number("percentiles", q, low=0, high=100) for q in percentiles]
        rows = []
        measured = self.lanes[self.lanes["outcome"].isin(["ok", "rejected"])]
        for (in_flight, rate), level in measured.groupby(["in_flight", "rate_rps"], sort=False, dropna=False):
            for metric in ("ttft", "itl", "tpot", "e2e"):
                v = metric_values(level, metric)
                row = {"in_flight": in_flight, "rate_rps": rate, "metric": f"{metric}_ms", "count": v.size}
                row.update(
                    mean=v.mean() if v.size else math.nan,
                    std=v.std(ddof=1) if v.size > 1 else math.nan,
                    min=v.min() if v.size else math.nan,
                    max=v.max() if v.size else math.nan,
                )
                row.update({f"p{q:g}": float(np.percentile(v, q)) if v.size else math.nan for q in qs})
                rows.append(row)
        columns = ["in_flight", "rate_rps", "metric", "count", "mean", "std", "min", "max", *(f"p{q:g}" for q in qs)]
        return pd.DataFrame(rows, columns=columns)


def from_runs(lanes: pd.DataFrame, runs: pd.DataFrame, *, closed_loop: bool, params: dict, stopped: str) -> SweepResult:
    """A sweep's result from its lane attempts and level runs (one row per level and repeat): each
    repeat's relative columns against its own first level, then the levels aggregated over repeats."""
    if len(runs):
        runs = pd.concat([add_relative(g, closed_loop=closed_loop) for _, g in runs.groupby("repeat", sort=False)])[
            RUN_COLUMNS
        ].reset_index(drop=True)
    else:
        runs = pd.DataFrame(columns=RUN_COLUMNS)
    levels = aggregate(runs, lanes, closed_loop=closed_loop) if len(runs) else pd.DataFrame(columns=AGGREGATE_COLUMNS)
    return SweepResult(lanes=lanes, levels=levels, runs=runs, params=dict(params), stopped=stopped)


def combine_passes(passes: Sequence[SweepResult]) -> SweepResult:
    """One sweep from passes over the same levels run at different times: the repeats of each pass
    numbered on from the previous pass's (from 1), the levels aggregated over all of them.

    Spreading the repeats of a level over a run, rather than running them back to back, puts what
    moves between the minutes at which the levels are measured into the spread of the repeats'
    elasticities, which is what the verdict's interval (:mod:`toolkit._sweep.verdict_interval`)
    stands for. The passes must share their parameters but for ``repeats``; ``stopped`` is the first pass's
    reason to stop early, if any.
    """
    if not passes:
        raise ValueError("passes must hold at least one SweepResult")
    keys = [{k: v for k, v in p.params.items() if k != "repeats"} for p in passes]
    if any(k != keys[0] for k in keys[1:]):
        raise ValueError("passes must come from sweeps with the same parameters (but repeats)")
    lanes, runs, offset = [], [], 0
    for result in passes:
        number = {r: offset + i for i, r in enumerate(sorted(result.runs["repeat"].dropna().unique()), start=1)}
        lanes.append(result.lanes.assign(repeat=result.lanes["repeat"].map(number)))
        runs.append(result.runs.assign(repeat=result.runs["repeat"].map(number)))
        offset += len(number)
    params = {**passes[0].params, "repeats": offset}
    return from_runs(
        pd.concat(lanes, ignore_index=True),
        pd.concat(runs, ignore_index=True),
        closed_loop=not passes[0].params.get("rates"),
        params=params,
        stopped=next((p.stopped for p in passes if p.stopped), ""),
    )

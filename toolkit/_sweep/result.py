"""What a sweep returns: its levels, runs and lanes as DataFrames, and where its files are."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

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
        ``itl_ms_p50``/``itl_ms_max`` (median and longest gap between content chunks, ms), llama.cpp's ``server_tpot_ms``, ``server_predicted_ms``, ``server_predicted_n``,
        ``server_prompt_ms``, ``server_prompt_n``, ``server_cache_n`` and ``session``.
    levels : pandas.DataFrame
        One row per level (repeats averaged): ``in_flight``, ``lanes``, ``wall_s`` (s),
        ``s_per_candidate`` (s, wall / lanes finished), ``speedup``, ``llm_sum_s`` (s), ``achieved_concurrency``,
        ``postprocess_sum_s``, ``slot_wait_s`` (s), ``prompt_tokens``, ``output_tokens``,
        ``dec_tok_s`` (tokens/s), ``tok_s_gain``, ``lanes_ok``, ``prefix_hit_rate`` (server),
        ``provider_cached_rate``, ``ttft_p50_ms`` ... ``tpot_p99_ms`` (ms), ``verdict``, then
        ``rate_rps``, ``achieved_rps``, ``goodput_rps`` (req/s), ``attempts``, ``lanes_failed``,
        ``lanes_unfinished``, ``server_output_tokens``, ``llm_ms_per_token``, ``elasticity``,
        ``repeats``, ``wall_s_ci95``, ``dec_tok_s_ci95`` (95% CI half-widths) and ``reason``.
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

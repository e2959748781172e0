"""From lane records to level rows: throughput, the time decomposition, percentiles and the verdict.

Only what was measured is counted. An attempt whose stream completed (``outcome`` ok or rejected)
contributes its tokens and latencies; a failed attempt contributes its time to ``llm_sum_s`` (the
time was spent) but never zero tokens. A figure that cannot be known (no attempt completed, no usage
reported, ``/metrics`` unavailable, a level cut short or resumed) is NaN, and ``reason`` says why.

The verdict: batching or queueing
---------------------------------
Wall clock alone cannot tell batching from queueing; the summed per-lane time can. Let
``u = llm_sum_s / output_tokens`` be the lane time per generated token (normalising by tokens keeps a
level that drew longer answers or extra retries comparable) and ``x`` the concurrency (the in-flight
limit, at most the number of lanes; for open-loop levels the achieved concurrency). Between the first
level and level ``k`` the elasticity is ``e = ln(u_k / u_1) / ln(x_k / x_1)``:

- a batching server runs ``k`` sequences in roughly the time of one (decode reads the weights once per
  step for the whole batch), so each lane takes as long as alone: ``u`` is flat, ``e`` near 0;
- a server that serves one sequence at a time, or time-slices a saturated compute unit, gives each of
  ``k`` lanes ``1/k`` of its speed: ``u`` grows like ``k``, ``e`` near 1.

``e <= 0.3`` reads ``batching``, ``e >= 0.7`` ``queueing``, in between ``mixed`` (thresholds that split
the range so a 30% deviation from either ideal is still named after it). The first level reads
``baseline``. A verdict that the measurement cannot support reads ``inconclusive``: the level is
``noisy`` (its repeats' decode throughputs have a standard deviation above ``NOISY_TOLERANCE`` of
their median),
its elasticity's 95% interval (``elasticity_ci95``: how far its repeats' elasticities spread,
pooled over the levels, :mod:`toolkit._sweep.verdict_interval`) or its repeats' elasticities cross a threshold,
or, from one repeat, the elasticity lies within ``VERDICT_MARGIN`` of a threshold (one run cannot
tell 0.68 from 0.72). Checks: the vLLM reference sweep (32 lanes, RTX PRO 6000) grows from 13.4 to 21.6 ms per
token between limits 1 and 32, e = 0.14, batching; the 2-core llama-server run in issue 5 grows its
summed lane time 9.6 -> 62.7 s at equal work between limits 1 and 8, e = 0.90, queueing.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from toolkit._sweep.records import unknown_output
from toolkit._sweep.verdict_interval import elasticity_ci95

__all__: list[str] = []

NAN = math.nan
BATCHING_MAX_ELASTICITY = 0.3
QUEUEING_MIN_ELASTICITY = 0.7
# Repeats of one level (or one profile cell) disagree when their sample standard deviation exceeds
# this share of their median. On an idle 2-core VM three repeats of a one-thread llama-server cell
# spread by up to about 20% (one slow wave: a standard deviation of about 11%), while one other busy
# process moves them by 40% and more (about 20% and more). For two repeats the cut is the one judged
# before on the spread (max - min), 25% of their mean (18% x sqrt 2); unlike the spread, a standard
# deviation does not grow with the number of repeats (ten steady repeats spread twice as far as two).
NOISY_TOLERANCE = 0.18
VERDICT_MARGIN = 0.05

# issue 5's columns, in its order; extras follow
LEVEL_COLUMNS = [
    "in_flight",
    "lanes",
    "wall_s",
    "s_per_candidate",
    "speedup",
    "llm_sum_s",
    "achieved_concurrency",
    "postprocess_sum_s",
    "slot_wait_s",
    "prompt_tokens",
    "output_tokens",
    "dec_tok_s",
    "tok_s_gain",
    "lanes_ok",
    "prefix_hit_rate",
    "provider_cached_rate",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "verdict",
    "rate_rps",
    "achieved_rps",
    "goodput_rps",
    "attempts",
    "lanes_failed",
    "lanes_unfinished",
    "server_output_tokens",
    "llm_ms_per_token",
    "elasticity",
    "itl_p50_ms",
    "itl_p95_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p95_ms",
    "e2e_p99_ms",
    "input_tok_s",
    "total_tok_s",
]
RUN_COLUMNS = [*LEVEL_COLUMNS, "repeat", "reason"]
AGGREGATE_COLUMNS = [
    *LEVEL_COLUMNS, "repeats", "wall_s_ci95", "dec_tok_s_ci95", "elasticity_ci95", "noisy", "reason",
]  # fmt: skip
_PERCENTILES = (50, 95, 99)


def summarize(
    records: pd.DataFrame,
    *,
    in_flight: int,
    rate_rps: float,
    repeat: int,
    lanes: int,
    wall_s: float,
    server_hit_rate: float,
    server_output_tokens: float,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    reasons: list[str],
) -> dict:
    """One level run's row (the relative columns speedup, tok_s_gain, verdict are added later)."""
    reasons = list(reasons)
    wall_s = wall_s if wall_s > 0 else NAN  # NaN stays NaN
    measured = records[records["outcome"].isin(["ok", "rejected"])] if len(records) else records
    finals = records[records["final"].astype(bool)] if len(records) else records
    ok_lanes = int((finals["outcome"] == "ok").sum()) if len(finals) else 0
    out = measured["output_tokens"] if len(measured) else pd.Series(dtype=float)
    out_tokens = float(out.sum()) if len(out) and out.notna().all() else NAN  # a partial sum would mislead
    if not len(measured):
        reasons.append("output_tokens, dec_tok_s: no attempt completed")
    elif out.isna().any():
        reasons.append(f"output_tokens: {unknown_output(measured)}")
    prompt = measured["prompt_tokens"] if len(measured) else pd.Series(dtype=float)
    prompt_tokens = float(prompt.sum()) if len(prompt) and prompt.notna().all() else NAN
    if prompt.isna().any():  # a partial sum would be a confident wrong total
        reasons.append(f"prompt_tokens: {int(prompt.isna().sum())} of {len(prompt)} answers carried no usage")
    llm_sum = float(records["llm_s"].sum()) if len(records) else 0.0
    with_cached = measured.dropna(subset=["cached_tokens", "prompt_tokens"]) if len(measured) else measured
    cached_rate = NAN
    if len(with_cached) and with_cached["prompt_tokens"].sum() > 0:
        cached_rate = float(with_cached["cached_tokens"].sum() / with_cached["prompt_tokens"].sum())
        if len(with_cached) < len(measured):
            reasons.append(f"provider_cached_rate: over the {len(with_cached)} of {len(measured)} answers reporting it")
    elif len(measured):
        reasons.append("provider_cached_rate: the provider reported no cached_tokens")
    row = {
        "in_flight": in_flight,
        "lanes": lanes,
        "wall_s": wall_s,
        "s_per_candidate": wall_s / len(finals) if len(finals) else NAN,  # = wall / lanes unless cut short
        "llm_sum_s": llm_sum,
        "achieved_concurrency": llm_sum / wall_s,
        "postprocess_sum_s": float(records["postprocess_s"].sum()) if len(records) else 0.0,
        "slot_wait_s": float(records["slot_wait_s"].sum()) if len(records) else 0.0,
        "prompt_tokens": prompt_tokens,
        "output_tokens": out_tokens,
        "dec_tok_s": out_tokens / wall_s,
        "input_tok_s": prompt_tokens / wall_s,
        "total_tok_s": (prompt_tokens + out_tokens) / wall_s,
        "lanes_ok": ok_lanes,
        "prefix_hit_rate": server_hit_rate,
        "provider_cached_rate": cached_rate,
        "rate_rps": rate_rps,
        "achieved_rps": len(finals) / wall_s,
        "goodput_rps": _goodput(records, slo_ttft_ms, slo_tpot_ms) / wall_s,
        "attempts": len(records),
        "lanes_failed": len(finals) - ok_lanes,
        "lanes_unfinished": lanes - len(finals),
        "server_output_tokens": server_output_tokens,
        "llm_ms_per_token": float(measured["llm_s"].sum()) * 1000 / out_tokens if out_tokens > 0 else NAN,
        "repeat": repeat,
    }
    row.update(percentiles(measured))
    row["reason"] = "; ".join(dict.fromkeys(r for r in reasons if r))
    return row


def percentiles(measured: pd.DataFrame) -> dict[str, float]:
    """TTFT, TPOT, ITL and E2E p50/p95/p99 (ms, linear interpolation) over the finite values in
    ``measured``; ITL pools every gap between content chunks of every answer."""
    out = {}
    for metric in ("ttft", "tpot", "itl", "e2e"):
        values = metric_values(measured, metric)
        for p in _PERCENTILES:
            out[f"{metric}_p{p}_ms"] = float(np.percentile(values, p)) if values.size else NAN
    return out


def metric_values(measured: pd.DataFrame, metric: str) -> np.ndarray:
    """The finite values of one latency metric (ms): per answer, or per gap for ``itl``."""
    if not len(measured):
        return np.array([])
    if metric == "itl":
        gaps = [g for lst in measured.get("itl_ms", pd.Series(dtype=object)) if isinstance(lst, list) for g in lst]
        values = np.asarray(gaps, dtype=float)
    else:
        values = measured[f"{metric}_ms"].to_numpy(dtype=float)
    return values[np.isfinite(values)]


def _goodput(records: pd.DataFrame, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> float:
    # requests meeting every SLO; failures, rejections and answers without a first token are misses;
    # a one-token answer has no TPOT and so cannot miss that SLO
    if slo_ttft_ms is None and slo_tpot_ms is None:
        return NAN
    if not len(records):
        return 0.0
    good = records["outcome"] == "ok"
    if slo_ttft_ms is not None:
        good &= records["ttft_ms"] <= slo_ttft_ms
    if slo_tpot_ms is not None:
        good &= (records["tpot_ms"] <= slo_tpot_ms) | (records["output_tokens"] <= 1)
    return float(good.sum())


def add_relative(frame: pd.DataFrame, *, closed_loop: bool) -> pd.DataFrame:
    """Add ``speedup``, ``tok_s_gain``, ``elasticity`` and ``verdict`` relative to the first row."""
    frame = frame.reset_index(drop=True).copy()
    if not len(frame):
        return frame.assign(speedup=[], tok_s_gain=[], elasticity=[], verdict=[])
    first = frame.iloc[0]
    frame["speedup"] = first["wall_s"] / frame["wall_s"]
    frame["tok_s_gain"] = frame["dec_tok_s"] / first["dec_tok_s"]
    x = np.minimum(frame["in_flight"], frame["lanes"]) if closed_loop else frame["achieved_concurrency"]
    x = x.to_numpy(dtype=float)
    u = frame["llm_ms_per_token"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.log(u / u[0]) / np.log(x / x[0])
    frame["elasticity"] = np.where(np.isfinite(e) & (np.abs(np.log(x / x[0])) > 1e-9), e, NAN)
    frame["verdict"] = [_verdict(i, ei) for i, ei in enumerate(frame["elasticity"])]
    return frame


def _verdict(i: int, e: float) -> str:
    if i == 0:
        return "baseline"
    if not math.isfinite(e):
        return "unknown"
    if e <= BATCHING_MAX_ELASTICITY:
        return "batching"
    return "queueing" if e >= QUEUEING_MIN_ELASTICITY else "mixed"


def aggregate(runs: pd.DataFrame, lanes: pd.DataFrame, *, closed_loop: bool) -> pd.DataFrame:
    """Levels from level runs: per-repeat means, pooled percentiles and t-based 95% CI half-widths.

    ``wall_s_ci95`` and ``dec_tok_s_ci95`` are ``t(0.975, n-1) * s / sqrt(n)`` over the ``n`` finite
    repeats (NaN below two); ``elasticity_ci95`` is the half-width of the elasticity's 95% interval
    from the repeats' pooled spread (:mod:`toolkit._sweep.verdict_interval`; NaN without repeats).
    """
    if not len(runs):
        return pd.DataFrame(columns=AGGREGATE_COLUMNS)
    rows = []
    keys = ["in_flight", "rate_rps"]
    for (in_flight, rate), group in runs.groupby(keys, sort=False, dropna=False):
        numeric = group.drop(columns=["verdict", "reason", "repeat"]).mean(numeric_only=True)
        row = numeric.to_dict()
        row["repeats"] = len(group)
        row["wall_s_ci95"] = _ci95(group["wall_s"])
        row["dec_tok_s_ci95"] = _ci95(group["dec_tok_s"])
        row["noisy"] = disagree(group["dec_tok_s"])
        elasticities = group["elasticity"].to_numpy(dtype=float)
        elasticities = elasticities[np.isfinite(elasticities)]
        row["e_low"] = elasticities.min() if elasticities.size else NAN
        row["e_high"] = elasticities.max() if elasticities.size else NAN
        level = lanes[(lanes["in_flight"] == in_flight) & _same(lanes["rate_rps"], rate)] if len(lanes) else lanes
        measured = level[level["outcome"].isin(["ok", "rejected"])] if len(level) else level
        row.update(percentiles(measured))
        row["reason"] = "; ".join(dict.fromkeys(r for r in group["reason"].fillna("") if r))
        rows.append(row)
    levels = add_relative(pd.DataFrame(rows), closed_loop=closed_loop)
    levels["elasticity_ci95"] = elasticity_ci95(runs, levels, keys)
    half = levels["elasticity_ci95"].fillna(0.0)
    levels["verdict"] = [
        _inconclusive(
            v, row.noisy, min(row.e_low, row.elasticity - h), max(row.e_high, row.elasticity + h), row.repeats
        )
        for v, row, h in zip(levels["verdict"], levels.itertuples(), half)
    ]
    for col in ("in_flight", "lanes", "attempts", "repeats", "lanes_ok", "lanes_failed", "lanes_unfinished"):
        if (levels[col] % 1 == 0).all():  # a mean over repeats may be fractional; keep it then
            levels[col] = levels[col].astype(int)
    return levels[AGGREGATE_COLUMNS]


def disagree(values: pd.Series) -> bool:
    """Whether repeated values' sample standard deviation exceeds ``NOISY_TOLERANCE`` of their median."""
    x = values.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2 or np.median(x) == 0:
        return False
    return bool(np.std(x, ddof=1) / abs(np.median(x)) > NOISY_TOLERANCE)


def _inconclusive(verdict: str, noisy: bool, low: float, high: float, repeats: int) -> str:
    """``inconclusive`` where the measurement cannot support ``verdict`` (module docstring)."""
    if verdict in ("baseline", "unknown"):
        return verdict
    if noisy:
        return "inconclusive"
    if repeats < 2:
        low, high = low - VERDICT_MARGIN, high + VERDICT_MARGIN
    for threshold in (BATCHING_MAX_ELASTICITY, QUEUEING_MIN_ELASTICITY):
        if low < threshold < high:
            return "inconclusive"
    return verdict


def _same(column: pd.Series, value: float) -> pd.Series:
    return column.isna() if pd.isna(value) else column == value


def _ci95(values: pd.Series) -> float:
    x = values.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return NAN
    return float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))

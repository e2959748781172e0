"""The toolkit's own frames from another tool's run: per-request lanes and per-level rows.

Every reader turns its tool's records into dicts with the lane columns it knows (the rest stay NaN)
and its summaries into level rows; this module fills in what can be computed from them, the same way
the sweep does (:func:`toolkit._sweep.levels.percentiles` for the latency percentiles), and leaves NaN
with a reason where the tool did not record a figure. Nothing unknown is ever written as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from toolkit._sweep.levels import AGGREGATE_COLUMNS, RUN_COLUMNS, _inconclusive, add_relative, percentiles
from toolkit._sweep.records import LANE_COLUMNS
from toolkit._sweep.result import SweepResult

__all__: list[str] = []

NAN = math.nan
# conditions a comparison looks at first, in this order; readers fill the ones their format records
CONDITION_KEYS = (
    "engine",
    "engine_version",
    "server_flags",
    "model",
    "gpu",
    "host",
    "tool",
    "tool_version",
    "library_versions",
    "workload",
)


def lanes_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per request with every lane column (:data:`LANE_COLUMNS`), NaN where a record lacks one.

    ``llm_s`` is derived from ``e2e_ms``, ``tpot_ms`` from ``e2e_ms - ttft_ms`` over ``output_tokens - 1``
    (the definition vLLM and the sweep share) and ``itl_ms_p50``/``itl_ms_max`` from ``itl_ms`` wherever
    the record did not carry them.
    """
    rows = []
    for i, rec in enumerate(records):
        row: dict[str, Any] = {c: NAN for c in LANE_COLUMNS}
        row.update(lane=i, attempt=1, repeat=1, final=True, cancelled=False, error="", outcome="ok")
        row.update({k: v for k, v in rec.items() if v is not None})
        gaps = row.get("itl_ms")
        if not isinstance(gaps, list):
            row["itl_ms"] = []
        elif gaps:
            if _nan(row["itl_ms_p50"]):
                row["itl_ms_p50"] = float(np.median(gaps))
            if _nan(row["itl_ms_max"]):
                row["itl_ms_max"] = float(max(gaps))
        if _nan(row["llm_s"]) and not _nan(row["e2e_ms"]):
            row["llm_s"] = row["e2e_ms"] / 1000
        n = row["output_tokens"]
        if _nan(row["tpot_ms"]) and not (_nan(row["e2e_ms"]) or _nan(row["ttft_ms"]) or _nan(n)) and n > 1:
            row["tpot_ms"] = (row["e2e_ms"] - row["ttft_ms"]) / (n - 1)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=LANE_COLUMNS)
    for column in ("ttft_ms", "tpot_ms", "e2e_ms", "llm_s", "output_tokens", "prompt_tokens", "cached_tokens"):
        frame[column] = frame[column].astype(float)
    return frame


def level_from_lanes(
    lanes: pd.DataFrame, *, wall_s: float = NAN, reasons: Sequence[str] = (), fmt: str = ""
) -> dict[str, Any]:
    """One level row computed from its requests (all sharing ``in_flight`` and ``rate_rps``).

    ``wall_s`` is the tool's own benchmark duration; NaN takes the span of the requests' ``start_s``
    and ``end_s`` where they were recorded.
    """
    reasons = list(reasons)
    ok = lanes[lanes["outcome"] == "ok"]
    if _nan(wall_s) and lanes["start_s"].notna().any() and lanes["end_s"].notna().any():
        wall_s = float(lanes["end_s"].max() - lanes["start_s"].min())
    if _nan(wall_s) or wall_s <= 0:
        wall_s = NAN
        reasons.append(f"wall_s, dec_tok_s, achieved_rps: {fmt or 'the file'} records no duration")
    out_tokens = _total(ok["output_tokens"], "output_tokens", reasons)
    prompt_tokens = _total(ok["prompt_tokens"], "prompt_tokens", reasons)
    llm_sum = float(ok["e2e_ms"].sum() / 1000) if len(ok) and ok["e2e_ms"].notna().all() else NAN
    row = {
        "in_flight": lanes["in_flight"].iloc[0],
        "rate_rps": lanes["rate_rps"].iloc[0],
        "lanes": len(lanes),
        "attempts": len(lanes),
        "lanes_ok": len(ok),
        "lanes_failed": int((lanes["outcome"] == "error").sum()),
        "lanes_unfinished": 0,
        "wall_s": wall_s,
        "llm_sum_s": llm_sum,
        "llm_ms_per_token": llm_sum * 1000 / out_tokens if out_tokens > 0 else NAN,
        "achieved_concurrency": llm_sum / wall_s,
        "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens,
        "dec_tok_s": out_tokens / wall_s,
        "achieved_rps": len(ok) / wall_s,
        "input_tok_s": prompt_tokens / wall_s,
        "total_tok_s": (prompt_tokens + out_tokens) / wall_s,
    }
    if not len(ok):
        reasons.append("latencies: no request completed")
    row.update(percentiles(ok))
    reasons.append(f"prefix_hit_rate: {fmt or 'the file'} records no server cache counters")
    row["reason"] = reasons
    return row


def _total(values: pd.Series, name: str, reasons: list[str]) -> float:
    if not len(values):
        return NAN
    if values.isna().any():  # a partial sum would be a confident wrong total
        reasons.append(f"{name}: {int(values.isna().sum())} of {len(values)} requests carry no count")
        return NAN
    return float(values.sum())


def levels_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Level rows with every aggregate column (NaN where unknown), one repeat each, ``reason`` joined."""
    out = []
    for row in rows:
        full: dict[str, Any] = {c: NAN for c in AGGREGATE_COLUMNS}
        full.update(row)
        full["repeats"] = 1
        full["noisy"] = False
        reasons = row.get("reason", [])
        full["reason"] = "; ".join(dict.fromkeys(reasons)) if isinstance(reasons, list) else str(reasons)
        out.append(full)
    levels = pd.DataFrame(out, columns=AGGREGATE_COLUMNS)
    sort = [c for c in ("in_flight", "rate_rps") if levels[c].notna().any()]
    levels = levels.sort_values(sort, kind="stable").reset_index(drop=True) if sort else levels
    return _relative(levels)


def _relative(levels: pd.DataFrame) -> pd.DataFrame:
    """``speedup``, ``tok_s_gain``, ``elasticity`` and the batching verdict relative to the first level, as the
    sweep computes them (:mod:`toolkit._sweep.levels`), from one repeat: an elasticity within the margin of
    a threshold reads ``inconclusive``, one without the requests' times (a summary-only file) ``unknown``."""
    if not len(levels):
        return levels
    closed_loop = bool(levels["in_flight"].notna().all())
    levels = add_relative(levels, closed_loop=closed_loop)
    levels["verdict"] = [_inconclusive(v, False, e, e, 1) for v, e in zip(levels["verdict"], levels["elasticity"])]
    return levels[AGGREGATE_COLUMNS]


def make_run(
    lanes: pd.DataFrame,
    levels: pd.DataFrame,
    *,
    fmt: str,
    version: str,
    conditions: Mapping[str, Any],
    source: str,
    summary: Mapping[str, Any] | None = None,
) -> SweepResult:
    """The run as a :class:`~toolkit.SweepResult`: the frames' ``attrs`` and ``params`` name the format,
    the version understood, the conditions and the reasons for every NaN."""
    runs = levels.assign(repeat=1)[RUN_COLUMNS] if len(levels) else pd.DataFrame(columns=RUN_COLUMNS)
    reasons = sorted({r for text in levels["reason"].dropna() for r in str(text).split("; ") if r})
    attrs = {
        "format": fmt,
        "version": version,
        "source": source,
        "conditions": {k: conditions[k] for k in conditions if conditions[k] not in (None, "", {}, [])},
        "reasons": reasons,
        "summary": dict(summary or {}),
    }
    for frame in (lanes, levels, runs):
        frame.attrs.update(attrs)
    params = {
        "format": fmt,
        "format_version": version,
        "source": source,
        "conditions": attrs["conditions"],
        "rates": sorted({float(r) for r in levels["rate_rps"].dropna()}),
        "limits": sorted({int(x) for x in levels["in_flight"].dropna()}),
    }
    return SweepResult(lanes=lanes, levels=levels, runs=runs, params=params, stopped="")


def number(value: Any) -> float:
    """``value`` as a float, NaN for None, text, a bool or anything not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    return float(value) if math.isfinite(value) else NAN


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))

"""The standard views of the measured server, one section each: latency distributions per level,
throughput against latency, the request timeline and the successes and errors per level.

Every figure is taken from the sweep's lane attempts (``SweepResult.lanes``) and levels; the
percentiles are linear-interpolated over the answered attempts (outcome ok or rejected), as the
levels' own are.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._report import view_charts as _vc
from toolkit._report.blocks import _chart_html, _Section, _table_html
from toolkit._report.conclusion import ANSWERED, request_counts, sample_note
from toolkit._report.measure import _Run

__all__: list[str] = []


# per-request latency columns of the lanes -> the name a chart panel and a table column give them
LATENCIES = {"ttft_ms": "TTFT", "itl_ms_p50": "ITL", "tpot_ms": "TPOT", "e2e_ms": "E2E"}


def _views(run: _Run, out: Path) -> list[_Section]:
    """The four standard-view sections of a run with lane records (none without)."""
    if run.lanes is None or not len(run.lanes):
        return []
    lanes = run.lanes
    table = _latency_table(lanes)
    table.to_csv(out / "latency.csv", index=False)
    return [
        _latency_section(lanes, table, run, out),
        _throughput_latency_section(run.levels, table, out),
        _timeline_section(lanes, out),
        _outcomes_section(lanes, out),
    ]


def _sample_html(levels: pd.DataFrame, lanes: pd.DataFrame | None) -> str:
    """The few-requests warning as a paragraph, or nothing when every level has enough."""
    note = sample_note(request_counts(levels, lanes))
    return f'<p class="warn"><b>Sample size.</b> {html.escape(note)}</p>' if note else ""


def _gap_column(lanes: pd.DataFrame) -> str:
    """``itl_ms_p50`` where the sweep recorded gaps between chunks, else ``tpot_ms`` (older runs)."""
    return "itl_ms_p50" if "itl_ms_p50" in lanes and lanes["itl_ms_p50"].notna().any() else "tpot_ms"


def _latency_table(lanes: pd.DataFrame) -> pd.DataFrame:
    """Per level: answered requests, TTFT / gap / E2E p50, p95, p99 (ms) and the longest gap (ms)."""
    answered = lanes[lanes["outcome"].isin(ANSWERED)]
    gap = _gap_column(lanes)
    rows = []
    for limit in sorted(lanes["in_flight"].unique()):
        level = answered[answered["in_flight"] == limit]
        row = {"in_flight": int(limit), "requests": len(level)}
        for col in ("ttft_ms", gap, "e2e_ms"):
            values = level[col].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            name = LATENCIES[col].lower()
            for p in (50, 95, 99):
                row[f"{name}_p{p}_ms"] = float(np.percentile(values, p)) if values.size else np.nan
        if gap == "itl_ms_p50":
            row["itl_max_ms"] = float(level["itl_ms_max"].max()) if "itl_ms_max" in level else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _latency_section(lanes: pd.DataFrame, table: pd.DataFrame, run: _Run, out: Path) -> _Section:
    gap = _gap_column(lanes)
    cols = ["ttft_ms", gap, "e2e_ms"]
    answered = lanes[lanes["outcome"].isin(ANSWERED)]
    long = answered.melt(["in_flight", "lane"], cols, var_name="metric", value_name="ms").dropna(subset=["ms"])
    long["metric"] = long["metric"].map(LATENCIES)
    metrics = [LATENCIES[c] for c in cols]
    gap_words = (
        "ITL is each request's median gap between content chunks (the longest gap per level is in the table)"
        if gap == "itl_ms_p50"
        else "this run recorded no gaps between chunks, so TPOT (each request's mean time per output token)"
        " stands in for ITL"
    )
    return _Section(
        "Latency distributions per level",
        _chart_html(_vc._latency_chart(long, metrics), "latency", out)
        + "<p>Every answered request at every in-flight limit: time to first token (TTFT), the gap"
        f" between tokens, and end to end (E2E); {gap_words}.</p>"
        + _sample_html(run.levels, lanes)
        + _table_html(table, "Percentiles per level (ms)", "latency.csv", open_=True),
    )


def _throughput_latency_section(levels: pd.DataFrame, table: pd.DataFrame, out: Path) -> _Section:
    points = table[["in_flight", "e2e_p50_ms", "e2e_p95_ms"]].merge(levels[["in_flight", "dec_tok_s"]], on="in_flight")
    points = points.assign(e2e_p50_s=points["e2e_p50_ms"] / 1000, e2e_p95_s=points["e2e_p95_ms"] / 1000)
    points = points[["in_flight", "dec_tok_s", "e2e_p50_s", "e2e_p95_s"]]
    points.to_csv(out / "throughput_latency.csv", index=False)
    return _Section(
        "Throughput against latency",
        _chart_html(_vc._throughput_latency_chart(points), "throughput_latency", out)
        + "<p>What each in-flight limit buys and costs: decode tokens/s of the whole level against the"
        " median request's end-to-end latency. A step right with little gain upward is concurrency"
        " turned into waiting.</p>" + _table_html(points, "One row per level", "throughput_latency.csv"),
    )


def _timeline_segments(lanes: pd.DataFrame) -> pd.DataFrame:
    """Each attempt as phases on its lane: to first token and streaming if answered, else failed."""
    df = lanes.dropna(subset=["start_s", "end_s"])
    df = df.assign(first_token_s=df["start_s"] + df["ttft_ms"] / 1000, answered=df["outcome"].isin(ANSWERED))
    keys = ["in_flight", "lane", "attempt"]
    waiting = df[df["answered"] & df["first_token_s"].notna()]
    streaming = df[df["answered"]]
    failed = df[~df["answered"]]
    phases = [
        (waiting, "to first token", waiting["start_s"], waiting["first_token_s"]),
        (streaming, "streaming", streaming["first_token_s"].fillna(streaming["start_s"]), streaming["end_s"]),
        (failed, "failed", failed["start_s"], failed["end_s"]),
    ]
    frames = [rows[keys].assign(phase=phase, start_s=start, end_s=end) for rows, phase, start, end in phases]
    return pd.concat([f for f in frames if len(f)] or [frames[0]], ignore_index=True)


def _timeline_section(lanes: pd.DataFrame, out: Path) -> _Section:
    repeated = "repeat" in lanes and lanes["repeat"].nunique() > 1
    if repeated:  # every repeat starts its clock at zero: draw the first
        lanes = lanes[lanes["repeat"] == lanes["repeat"].min()]
    if "start_s" not in lanes or not len(segments := _timeline_segments(lanes)):
        return _Section("Request timeline", "<p>This run recorded no start and end times of its attempts.</p>")
    return _Section(
        "Request timeline",
        _chart_html(_vc._timeline_chart(segments), "timeline", out)
        + "<p>Each lane's attempts from the level's start: waiting for the first token (queueing and"
        " prefill), then streaming, or failed. Lanes that wait while others stream are queued;"
        " lanes that stream side by side are batched."
        + (" Only each level's first repeat is drawn." if repeated else "")
        + "</p>",
    )


def _outcome_counts(lanes: pd.DataFrame) -> pd.DataFrame:
    """Per level: attempts, ok, rejected, error, retried attempts and lanes whose last attempt failed."""
    limits = sorted(lanes["in_flight"].unique())
    counts = pd.crosstab(lanes["in_flight"], lanes["outcome"]).reindex(
        index=limits, columns=list(_vc.OUTCOME_COLORS), fill_value=0
    )
    finals = lanes[lanes["final"].astype(bool)] if "final" in lanes else lanes
    counts.insert(0, "attempts", counts.sum(axis=1))
    counts["retried"] = counts["attempts"] - finals.groupby("in_flight").size().reindex(limits, fill_value=0)
    failed = finals[finals["outcome"] != "ok"].groupby("in_flight").size()
    counts["lanes_failed"] = failed.reindex(limits, fill_value=0)
    return counts.reset_index().rename_axis(columns=None)


def _outcomes_section(lanes: pd.DataFrame, out: Path) -> _Section:
    counts = _outcome_counts(lanes)
    counts.to_csv(out / "outcomes.csv", index=False)
    outcomes = ["in_flight", *_vc.OUTCOME_COLORS]
    long = counts[outcomes].melt("in_flight", var_name="outcome", value_name="attempts")
    errors = lanes.loc[lanes["outcome"] == "error"] if "error" in lanes else lanes.iloc[:0]
    listed = ""
    if len(errors):
        top = errors.groupby(["in_flight", "error"]).size().rename("attempts").reset_index()
        listed = _table_html(
            top.sort_values("attempts", ascending=False).head(20), "Errors by level", "lanes.csv", open_=True
        )
    failed = int(counts["lanes_failed"].sum())
    ended = "No lane" if failed == 0 else f"{failed} lane{'s' * (failed != 1)}"
    return _Section(
        "Successes and errors per level",
        _chart_html(_vc._outcomes_chart(long), "outcomes", out)
        + f"<p>Every attempt by outcome: ok, rejected (the stream completed but post-processing refused"
        f" it) or error; a failed attempt may be retried. {ended} ended without a successful attempt.</p>"
        + _table_html(counts, "Attempts per level", "outcomes.csv", open_=True)
        + listed,
    )

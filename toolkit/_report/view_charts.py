"""Charts of the standard views of a measured server: latency per level, throughput against latency,
the request timeline, and the outcome of every attempt. Each takes a tidy frame that
``toolkit._report.views`` derives from the sweep's lanes and levels; nothing here computes a figure."""

from __future__ import annotations

import altair as alt
import pandas as pd

from toolkit._report.panels import BAR_COLOR, HEIGHT, WIDTH, _require, _tidy

__all__: list[str] = []


OUTCOME_COLORS = {"ok": BAR_COLOR, "rejected": "#E65100", "error": "#C62828"}


PHASE_COLORS = {"to first token": "#757575", "streaming": BAR_COLOR, "failed": "#C62828"}


# pixels per lane row in the timeline
LANE_STEP = 9


def _level_axis() -> alt.X:
    return alt.X("in_flight:O", title="lanes in flight", axis=alt.Axis(labelAngle=0))


def _latency_chart(long: pd.DataFrame, metrics: list[str]) -> alt.FacetChart:
    """Each request's latency as a dot per level (spread by lane), the level's median as a tick.

    ``long``: one row per request and metric, ``in_flight``, ``lane``, ``metric`` (one of
    ``metrics``, the panel order) and ``ms``; one panel per metric, each with its own y scale.
    """
    _require(long, ("in_flight", "lane", "metric", "ms"), "long")
    y = alt.Y("ms:Q", title="milliseconds", scale=alt.Scale(zero=True))
    dots = (
        alt.Chart()
        .mark_circle(size=36, opacity=0.7, color=BAR_COLOR)
        .encode(
            x=_level_axis(),
            xOffset=alt.XOffset("lane:O"),
            y=y,
            tooltip=["in_flight", "lane", "metric", alt.Tooltip("ms:Q", format=",.1f")],
        )
    )
    median = alt.Chart().mark_tick(color="#616161", thickness=2, size=28).encode(x=_level_axis(), y="median(ms):Q")
    layered = alt.layer(dots, median, data=_tidy(long)).properties(width=WIDTH * 2 // 3, height=HEIGHT)
    return (
        layered.facet(column=alt.Column("metric:N", sort=metrics, title=None))
        .resolve_scale(y="independent")
        .properties(title=alt.Title("Latency per request", subtitle="dots: requests; grey tick: the level's median"))
    )


def _throughput_latency_chart(points: pd.DataFrame) -> alt.LayerChart:
    """Decode tokens/s against median end-to-end latency, one labelled point per level, joined in order.

    ``points``: ``in_flight``, ``e2e_p50_s`` (s), ``dec_tok_s`` (tokens/s), optionally
    ``e2e_p95_s`` (s) for the tooltip.
    """
    _require(points, ("in_flight", "e2e_p50_s", "dec_tok_s"), "points")
    cols = [c for c in ("in_flight", "e2e_p50_s", "e2e_p95_s", "dec_tok_s") if c in points]
    df = _tidy(points[cols]).dropna(subset=["e2e_p50_s", "dec_tok_s"])
    df["label"] = df["in_flight"].map(lambda n: f"{int(n)} in flight")
    base = alt.Chart(df).encode(
        x=alt.X("e2e_p50_s:Q", title="median end-to-end latency (s)", scale=alt.Scale(zero=True)),
        y=alt.Y("dec_tok_s:Q", title="decode tokens/s", scale=alt.Scale(zero=True)),
    )
    tooltip = [alt.Tooltip(c, format=",.4g") if c != "in_flight" else c for c in cols]
    return alt.layer(
        base.mark_line(color="#9E9E9E").encode(order="in_flight:Q"),
        base.mark_circle(size=90, color=BAR_COLOR, opacity=1).encode(tooltip=tooltip),
        base.mark_text(dx=8, align="left", baseline="middle").encode(text="label:N"),
    ).properties(
        width=WIDTH,
        height=HEIGHT,
        title=alt.Title("Throughput against latency", subtitle="one point per in-flight limit"),
    )


def _timeline_chart(segments: pd.DataFrame) -> alt.FacetChart:
    """A Gantt chart of the lanes: one row per lane, a bar per attempt phase, one panel per level.

    ``segments``: ``in_flight``, ``lane``, ``attempt``, ``phase`` (a key of ``PHASE_COLORS``),
    ``start_s`` and ``end_s`` (s from the level's start).
    """
    _require(segments, ("in_flight", "lane", "attempt", "phase", "start_s", "end_s"), "segments")
    df = _tidy(segments[["in_flight", "lane", "attempt", "phase", "start_s", "end_s"]])
    bars = (
        alt.Chart()
        .mark_bar()
        .encode(
            x=alt.X("start_s:Q", title="seconds from the level's start"),
            x2="end_s:Q",
            y=alt.Y("lane:O", title="lane", axis=alt.Axis(labelFontSize=8)),
            color=alt.Color(
                "phase:N", title=None, scale=alt.Scale(domain=list(PHASE_COLORS), range=list(PHASE_COLORS.values()))
            ),
            tooltip=[
                "in_flight",
                "lane",
                "attempt",
                "phase",
                alt.Tooltip("start_s", format=".2f"),
                alt.Tooltip("end_s", format=".2f"),
            ],
        )
        .properties(width=WIDTH * 2, height=alt.Step(LANE_STEP))
    )
    return bars.facet(
        row=alt.Row("in_flight:O", title="lanes in flight", header=alt.Header(labelAngle=0)), data=df
    ).properties(title="Request timeline")


def _outcomes_chart(counts: pd.DataFrame) -> alt.Chart:
    """Attempts per level stacked by outcome (ok, rejected, error).

    ``counts``: ``in_flight``, ``outcome`` (a key of ``OUTCOME_COLORS``) and ``attempts``.
    """
    _require(counts, ("in_flight", "outcome", "attempts"), "counts")
    return (
        alt.Chart(_tidy(counts[["in_flight", "outcome", "attempts"]]))
        .mark_bar()
        .encode(
            x=_level_axis(),
            y=alt.Y("attempts:Q", title="attempts", stack="zero"),
            color=alt.Color(
                "outcome:N",
                title=None,
                scale=alt.Scale(domain=list(OUTCOME_COLORS), range=list(OUTCOME_COLORS.values())),
            ),
            order=alt.Order("outcome_order:Q"),
            tooltip=["in_flight", "outcome", "attempts"],
        )
        .transform_calculate(outcome_order="indexof(['ok', 'rejected', 'error'], datum.outcome)")
        .properties(width=WIDTH, height=HEIGHT, title="Attempts per level by outcome")
    )

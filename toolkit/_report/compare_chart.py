"""A pair of runs on one chart, and the small self-contained page ``python -m toolkit compare A B --html`` writes.

The chart draws what :func:`toolkit.compare_runs` found: per metric, each matched level's value in both
runs side by side (top row), and the difference B - A with its confidence interval against zero
(bottom row), a filled point where the interval excludes zero. It computes no figure of its own.
"""

from __future__ import annotations

import html
import math

import altair as alt
import pandas as pd

from toolkit import __version__
from toolkit._interop.compare import RunComparison, compare_runs
from toolkit._report.blocks import _number
from toolkit._report.page import _CSS
from toolkit._report.panels import BAR_COLOR, HEIGHT, WIDTH, ChartLike

__all__ = ["compare_chart"]

_METRICS = ("dec_tok_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms")
_RUN_COLORS = ("#757575", BAR_COLOR)  # the baseline grey, the run compared with it in the bar hue


def compare_chart(
    comparison_or_a: RunComparison | object,
    b: object | None = None,
    *,
    metrics: tuple[str, ...] | list[str] = _METRICS,
    label_a: str = "A",
    label_b: str = "B",
    title: str = "Run B against run A, per level",
) -> ChartLike:
    """Both runs' levels on one chart: each metric per level side by side, and the difference's interval.

    Parameters
    ----------
    comparison_or_a : RunComparison, SweepResult, str or os.PathLike
        A comparison :func:`toolkit.compare_runs` returned, or the baseline run (then ``b`` is required
        and the pair is compared with ``compare_runs``' defaults).
    b : SweepResult, str or os.PathLike, optional
        The run compared with the baseline; only with a run as the first argument.
    metrics : sequence of str
        The ``metric`` names of :attr:`RunComparison.metrics` to draw, one column each (default: decode
        throughput and the TTFT, TPOT and end-to-end medians).
    label_a, label_b : str
        The runs' names in the legend.
    title : str
        Overall title.

    Returns
    -------
    altair.VConcatChart
        Top row: per metric, the bars of both runs at each level (``level``, ``metric``, ``run``,
        ``value``); bottom row: the difference B - A (``diff``) with its interval (``ci_low`` to
        ``ci_high``) and ``beyond_noise``. The level axis is ``in_flight`` where the runs' levels are set by
        concurrency, else ``rate_rps``.

    Raises
    ------
    ValueError
        ``b`` given with a comparison, or missing with a run; a metric the comparison does not hold; a
        comparison with no matched level.
    """
    comparison = _comparison(comparison_or_a, b)
    if comparison.metrics.empty:
        raise ValueError("comparison has no level matched in both runs to draw")
    metrics = list(metrics)
    known = list(dict.fromkeys(comparison.metrics["metric"]))
    unknown = [m for m in metrics if m not in known]
    if unknown or not metrics:
        raise ValueError(f"metrics must be a non-empty list of {known}, got {unknown or metrics}")
    table = comparison.metrics[comparison.metrics["metric"].isin(metrics)].copy()
    by_flight = table["in_flight"].notna().all()
    table["level"] = table["in_flight" if by_flight else "rate_rps"].astype(float)
    level_title = "lanes in flight" if by_flight else "request rate (req/s)"
    values = table.melt(id_vars=["level", "metric"], value_vars=["a", "b"], var_name="run", value_name="value")
    values["run"] = values["run"].map({"a": label_a, "b": label_b})
    values = values.dropna(subset=["value"])
    diffs = table[["level", "metric", "diff", "ci_low", "ci_high", "beyond_noise"]].copy()
    level = alt.X("level:O", title=level_title, axis=alt.Axis(labelAngle=0))
    column = alt.Column("metric:N", title=None, sort=metrics)
    size = {"width": WIDTH * 2 // 3, "height": HEIGHT * 2 // 3}
    bars = (
        alt.Chart(values)
        .mark_bar()
        .encode(
            x=level,
            xOffset=alt.XOffset("run:N", sort=[label_a, label_b]),
            y=alt.Y("value:Q", title="value (the metric's unit)"),
            color=alt.Color("run:N", title="run", scale=alt.Scale(domain=[label_a, label_b], range=_RUN_COLORS)),
            tooltip=["level", "metric", "run", alt.Tooltip("value:Q", format=".4g")],
        )
        .properties(**size)
        .facet(column=column)
        .resolve_scale(y="independent")
    )
    base = alt.Chart(diffs).encode(x=level)
    interval = base.mark_rule(color=BAR_COLOR).encode(y=alt.Y("ci_low:Q", title=f"{label_b} - {label_a}"), y2="ci_high")
    points = base.mark_point(color=BAR_COLOR, size=60).encode(
        y="diff:Q",
        fill=alt.Fill("beyond_noise:N", title="beyond the noise", scale=alt.Scale(range=["white", BAR_COLOR])),
        tooltip=[
            "level",
            "metric",
            *(alt.Tooltip(c, format="+.4g") for c in ("diff", "ci_low", "ci_high")),
            "beyond_noise",
        ],
    )
    zero = base.mark_rule(color="#757575", strokeDash=[4, 3]).encode(y=alt.datum(0))
    differences = (
        alt.layer(interval, points, zero, data=diffs)
        .properties(**size)
        .facet(column=column)
        .resolve_scale(y="independent")
    )
    return alt.vconcat(bars, differences).properties(title=title)


def _comparison(first: object, b: object | None) -> RunComparison:
    if isinstance(first, RunComparison):
        if b is not None:
            raise ValueError("b must be left out when comparison_or_a is a RunComparison")
        return first
    if b is None:
        raise ValueError("b is required when comparison_or_a is a run, not a RunComparison")
    return compare_runs(first, b)


def _compare_page(comparison: RunComparison, *, name_a: str, name_b: str) -> str:
    """The comparison as one self-contained HTML page: the runs, the conditions that differ, the flagged
    differences, the chart as inline SVG (rendered here by vl-convert, so the page needs no script and no
    network), then every level metric folded."""
    import vl_convert
    from altair.utils.html import vl_version_for_vl_convert

    chart = compare_chart(comparison, label_a="A", label_b="B").properties(background="white")
    svg = vl_convert.vegalite_to_svg(chart.to_dict(), vl_version=vl_version_for_vl_convert())
    flagged = comparison.metrics[comparison.metrics["beyond_noise"]]
    shown = ["in_flight", "rate_rps", "metric", "a", "b", "diff", "ci_low", "ci_high", "method"]
    unmatched = "".join(
        f"<li>level only in run {html.escape(str(r.run).upper())}: in_flight {_level(r.in_flight)}, "
        f"rate {_level(r.rate_rps)}</li>"
        for r in comparison.unmatched.itertuples()
    )
    title = f"{name_b} against {name_a}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">Written by toolkit {__version__}; self-contained, opens offline.</p>
<dl class="conditions"><dt>A (baseline)</dt><dd>{html.escape(name_a)}</dd><dt>B</dt><dd>{html.escape(name_b)}</dd></dl>
<h2>Conditions that differ</h2>
{_table(comparison.conditions, "none: the runs record the same conditions, or none")}
<h2>Differences beyond the noise ({len(flagged)} of {len(comparison.metrics)} level metrics)</h2>
{_table(flagged[shown], "none")}
<ul>{unmatched}</ul>
<h2>Both runs per level</h2>
<figure>{svg}<figcaption>Top: each run's value per level. Bottom: B - A with its confidence interval;
a filled point where the interval excludes zero.</figcaption></figure>
<details><summary>Every level metric</summary><div class="table">{_table(comparison.metrics[shown], "none")}</div></details>
</body></html>
"""


def _table(df: pd.DataFrame, empty: str) -> str:
    if df.empty:
        return f'<p class="muted">{html.escape(empty)}</p>'
    table = df.to_html(index=False, escape=True, na_rep="", float_format=_number, border=0)
    return f'<div class="table">{table}</div>'


def _level(value: float) -> str:
    return "-" if value is None or math.isnan(float(value)) else f"{float(value):g}"

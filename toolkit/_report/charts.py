"""Altair charts of the toolkit's DataFrames, and their static PNG/SVG export.

Each chart function takes the tidy DataFrame another part of the toolkit returns (sweep levels,
``batching_curve``, ``queue_wait`` / ``compare_wait_models``, ``plan``) and returns an Altair chart;
nothing here computes a model figure. ``save_chart`` writes the static files through vl-convert.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from toolkit._args import check_int
from toolkit._planning.pareto import pareto
from toolkit._report.panels import (
    _CONFIG_COLUMNS,
    BAR_COLOR,
    HEIGHT,
    WIDTH,
    ChartLike,
    _axis_title,
    _batching_panel,
    _bound_regions,
    _decomposition_panel,
    _describe_curve,
    _kv_max,
    _latency_column,
    _per_configuration,
    _pick_label,
    _require,
    _side_by_side,
    _throughput_panel,
    _tidy,
    _waits,
)

__all__ = ["batching_chart", "decode_throughput_chart", "decomposition_chart", "frontier_chart", "queueing_chart"]


def decode_throughput_chart(
    levels: pd.DataFrame,
    reference: pd.DataFrame | None = None,
    *,
    label: str = "this run",
    reference_label: str = "reference",
    title: str = "Decode throughput against concurrency",
) -> ChartLike:
    """Column chart of decode tokens/s per in-flight limit, optionally beside a reference run.

    One hue (``BAR_COLOR``) and no legend: bar length carries the value, the y axis starts at
    zero, and only the first and last columns are labelled. A reference run is drawn as a second
    panel with its own y scale, since runs on different hardware differ by orders of magnitude.

    Parameters
    ----------
    levels : pandas.DataFrame
        One row per in-flight limit, as ``SweepResult.levels``: ``in_flight`` (requests) and
        ``dec_tok_s`` (output tokens / wall clock, tokens/s); ``wall_s`` (s), ``output_tokens``
        and ``lanes_ok`` are shown in tooltips when present.
    reference : pandas.DataFrame, optional
        A second run with the same columns (e.g. ``data/reference_vllm_sweep_32_lanes.csv``).
    label, reference_label : str
        Panel titles for the two runs.
    title : str
        Overall title.

    Returns
    -------
    altair.LayerChart or altair.HConcatChart
        The chart; its data are the input rows' ``in_flight``, ``dec_tok_s`` and tooltip columns.
    """
    return _side_by_side(_throughput_panel, levels, reference, label, reference_label, title)


def decomposition_chart(
    levels: pd.DataFrame,
    reference: pd.DataFrame | None = None,
    *,
    label: str = "this run",
    reference_label: str = "reference",
    title: str = "Where the time goes",
) -> ChartLike:
    """Wall clock, summed per-lane inference time and post-processing slot wait per in-flight limit.

    Summed lane time that stays flat as the limit grows means the server batches; growing with the
    limit means it queues. Wall clock falls by the overlap bought.

    Parameters
    ----------
    levels : pandas.DataFrame
        One row per in-flight limit: ``in_flight`` (requests), ``wall_s`` (s) and any of
        ``llm_sum_s`` (s) and ``slot_wait_s`` (s); missing or NaN values are left out.
    reference : pandas.DataFrame, optional
        A second run drawn beside the first, with the same columns.
    label, reference_label : str
        Panel titles for the two runs.
    title : str
        Overall title.

    Returns
    -------
    altair.LayerChart or altair.HConcatChart
        Lines with points, data in long form: ``in_flight``, ``quantity``, ``seconds``.
    """
    return _side_by_side(_decomposition_panel, levels, reference, label, reference_label, title)


def batching_chart(curve: pd.DataFrame, *, title: str | None = None) -> alt.VConcatChart:
    """Aggregate and per-sequence decode tokens/s against batch, with the bound regions shaded.

    Parameters
    ----------
    curve : pandas.DataFrame
        ``batching_curve`` output: ``batch`` (sequences), ``aggregate_tok_s`` (tokens/s),
        ``per_seq_tok_s`` (tokens/s), ``tpot_ms`` (ms), ``bound`` (memory | compute | overhead),
        ``feasible`` (bool); ``max_concurrent_seqs`` (the KV-bound maximum, sequences) and
        ``model``, ``gpu``, ``quant``, ``context_tokens`` when present label the chart.
    title : str, optional
        Defaults to the model, GPU, quantization and context of the first row.

    Returns
    -------
    altair.VConcatChart
        Two panels sharing a log-scaled batch axis: aggregate above, per sequence below. Regions
        (rect) are coloured by ``bound``; a rule marks the KV-bound maximum; rows with
        ``feasible`` False are drawn faded, never joined to the line.
    """
    _require(curve, ("batch", "aggregate_tok_s", "per_seq_tok_s", "bound", "feasible"), "curve")
    df = _tidy(curve.sort_values("batch"))
    regions = _bound_regions(df)
    kv_max = _kv_max(df)
    if title is None:
        title = _describe_curve(df)
    subtitle = f"KV-bound maximum: {kv_max} sequences" if kv_max is not None else "KV-bound maximum unknown"
    panels = [
        _batching_panel(df, regions, kv_max, "aggregate_tok_s", "aggregate tokens/s"),
        _batching_panel(df, regions, kv_max, "per_seq_tok_s", "tokens/s per sequence"),
    ]
    return alt.vconcat(*panels).properties(title=alt.Title(title, subtitle=subtitle))


def queueing_chart(
    closed_form: pd.DataFrame,
    simulated: pd.DataFrame | None = None,
    *,
    percentile: int = 95,
    title: str | None = None,
) -> alt.LayerChart:
    """A wait percentile against utilisation, one colour per service-time variance ``cs2``.

    Closed forms are lines, simulations points (shaped by service-time law where there are
    several). Unstable rows (utilisation >= 1, infinite wait) and zero waits are not drawn: the y
    axis is logarithmic and an unstable queue has no finite wait to place on it.

    Parameters
    ----------
    closed_form : pandas.DataFrame
        ``utilization`` (0..1), ``cs2`` (squared coefficient of variation of the service time) and
        the wait in seconds as ``wait_p{percentile}_s`` (``queue_wait`` output) or
        ``closed_form_p{percentile}_s`` (``compare_wait_models`` output).
    simulated : pandas.DataFrame, optional
        ``utilization``, ``cs2`` and ``simulated_p{percentile}_s`` (``compare_wait_models``) or
        ``wait_p{percentile}_s`` (s); ``distribution`` sets the point shape when present.
    percentile : int
        Which wait percentile to draw, an integer from 1 to 99 (``queue_wait`` gives 50, 95 and 99
        by default; ``compare_wait_models`` gives 95 and 99).
    title : str, optional
        Defaults to "p{percentile} queue wait against utilisation".

    Returns
    -------
    altair.LayerChart
        Line layer (closed form) and, with ``simulated``, a point layer, both with the wait in a
        ``wait_s`` field; y is log-scaled seconds.
    """
    pct = check_int("percentile", percentile, low=1, high=99)
    closed = _waits(closed_form, "closed_form", (f"wait_p{pct}_s", f"closed_form_p{pct}_s"))
    color = alt.Color("cs2:O", title="service cs²", scale=alt.Scale(scheme="viridis"))
    x = alt.X("utilization:Q", title="utilisation", scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("wait_s:Q", title=f"p{pct} wait (s)", scale=alt.Scale(type="log"))
    tooltip = ["cs2", alt.Tooltip("utilization", format=".3g"), alt.Tooltip("wait_s", format=".3g")]
    layers = [alt.Chart(closed).mark_line().encode(x=x, y=y, color=color, tooltip=tooltip)]
    if simulated is not None:
        sim = _waits(simulated, "simulated", (f"simulated_p{pct}_s", f"wait_p{pct}_s"))
        points = alt.Chart(sim).mark_point(filled=True, size=50)
        if "distribution" in sim:
            points = points.encode(shape=alt.Shape("distribution:N", title="service law"))
            tooltip = [*tooltip, "distribution"]
        layers.append(points.encode(x=x, y=y, color=color, tooltip=tooltip))
    subtitle = "lines: closed form" + ("; points: simulation" if simulated is not None else "")
    return alt.layer(*layers).properties(
        title=alt.Title(title or f"p{pct} queue wait against utilisation", subtitle=subtitle),
        width=WIDTH,
        height=HEIGHT,
    )


def frontier_chart(
    candidates: pd.DataFrame,
    frontier: pd.DataFrame | None = None,
    *,
    latency: str | None = None,
    cost: str = "cost_usd_month",
    title: str = "Cost against latency",
) -> alt.LayerChart:
    """Every candidate's cost against latency, the Pareto set highlighted, joined and its picks named.

    A planner evaluates each fleet configuration at several batch sizes; at one configuration the
    cost is the same and only the fastest batch can be on the frontier, so each configuration
    (the columns ``model, gpu, quant, kv_dtype, backend, tensor_parallel, replicas`` present) is
    drawn once, at its fastest row; the tooltip shows the batch range evaluated.

    Parameters
    ----------
    candidates : pandas.DataFrame
        ``plan`` output: ``cost_usd_month`` (USD/month), ``e2e_p{pct}_ms`` (ms), and the
        configuration columns (``model``, ``gpu``, ``quant``, ``backend``, ``tensor_parallel``,
        ``replicas``, ``batch``, ...) shown in every tooltip.
    frontier : pandas.DataFrame, optional
        ``pareto(candidates)`` (rows with a ``pick`` column naming cheapest / fastest / best
        quality). Computed with ``toolkit.pareto`` when omitted.
    latency : str, optional
        Latency column; defaults to the ``e2e_p{pct}_ms`` column of ``candidates``.
    cost : str
        Cost column.
    title : str
        Chart title.

    Returns
    -------
    altair.LayerChart
        Layers: one grey point per configuration; the frontier's points in ``BAR_COLOR``, those
        non-dominated in cost and latency alone joined by a step line; one text label per pick;
        log-scaled axes.
    """
    latency = latency or _latency_column(candidates)
    _require(candidates, (cost, latency), "candidates")

    if frontier is None:
        frontier = pareto(candidates, minimize=(cost, latency))
    _require(frontier, (cost, latency), "frontier")
    everyone = _per_configuration(candidates, latency, cost)
    front = _per_configuration(frontier, latency, cost).sort_values(latency)
    # with a third objective (quality) some frontier rows are dominated in this plane: they are
    # highlighted, but only the rows non-dominated in cost and latency form the joined staircase
    staircase = pareto(front, minimize=(latency, cost), maximize=()).sort_values(latency)
    shown = [c for c in _CONFIG_COLUMNS if c in everyone.columns and c not in (cost, latency, "pick")]
    tooltip = [
        alt.Tooltip(c, format=".4g") if pd.api.types.is_float_dtype(everyone[c]) else c for c in (latency, cost, *shown)
    ]
    x = alt.X(f"{latency}:Q", title=_axis_title(latency), scale=alt.Scale(type="log", nice=False))
    y = alt.Y(f"{cost}:Q", title=_axis_title(cost), scale=alt.Scale(type="log", nice=False))
    cols = [latency, cost, *shown]
    layers = [
        alt.Chart(_tidy(everyone[cols]))
        .mark_point(color="#9E9E9E", opacity=0.5, size=25)
        .encode(x=x, y=y, tooltip=tooltip),
        alt.Chart(_tidy(staircase[cols])).mark_line(color=BAR_COLOR, interpolate="step-after").encode(x=x, y=y),
        alt.Chart(_tidy(front[cols]))
        .mark_point(color=BAR_COLOR, filled=True, size=45, opacity=1)
        .encode(x=x, y=y, tooltip=tooltip),
    ]
    picks = front[front["pick"].astype(str) != ""].drop_duplicates("pick") if "pick" in front else front[:0]
    if len(picks):
        picks = picks.assign(label=[_pick_label(row) for _, row in picks.iterrows()])
        layers.append(
            alt.Chart(_tidy(picks[[*cols, "label"]]))
            .mark_text(align="left", dx=7, dy=-7)
            .encode(x=x, y=y, text="label:N", tooltip=tooltip)
        )
    subtitle = (
        f"{len(candidates):,} candidates in {len(everyone):,} configurations;"
        f" {len(front):,} configurations on the Pareto frontier"
    )
    return alt.layer(*layers).properties(
        title=alt.Title(title, subtitle=subtitle), width=WIDTH + 120, height=HEIGHT + 60
    )


# --- helpers ---------------------------------------------------------------------------------

"""Altair charts of the toolkit's DataFrames, and their static PNG/SVG export.

Each chart function takes the tidy DataFrame another part of the toolkit returns (sweep levels,
``batching_curve``, ``queue_wait`` / ``compare_wait_models``, ``plan``) and returns an Altair chart;
nothing here computes a model figure. ``save_chart`` writes the static files through vl-convert.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from toolkit._args import check_int

__all__ = ["batching_chart", "decode_throughput_chart", "decomposition_chart", "frontier_chart", "queueing_chart"]

# One hue for single-series columns. WCAG contrast 4.3:1 on white and on #121212 (tests/test_charts.py
# derives both), so the bars keep >= 3:1 on light and dark pages alike.
BAR_COLOR = "#00897B"
# Hover only: #4ECDC4 is too light for 3:1 on white, so it never carries information.
HOVER_COLOR = "#4ECDC4"
BOUND_COLORS = {"memory": "#90CAF9", "compute": "#FFCC80", "overhead": "#CFD8DC"}
DECOMPOSITION = {  # levels column -> legend name, colour
    "wall_s": ("wall clock", "#00897B"),
    "llm_sum_s": ("summed lane time", "#5E35B1"),
    "slot_wait_s": ("slot wait", "#E65100"),
}
WIDTH = 360
HEIGHT = 240

ChartLike = alt.TopLevelMixin


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
    from toolkit._planning.pareto import pareto

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


def _accuracy_chart(table: pd.DataFrame) -> alt.FacetChart:
    """Relative error of predicted against measured per level, one panel per metric.

    ``table``: ``toolkit.accuracy`` rows (``in_flight``, ``metric``, ``rel_err``) with a
    ``calibration`` column naming each prediction (e.g. ``llamacpp_closed_loop_check`` output).
    """
    _require(table, ("in_flight", "metric", "rel_err", "calibration"), "table")
    df = _tidy(table[["in_flight", "metric", "calibration", "predicted", "measured", "rel_err"]])
    order = list(dict.fromkeys(df["calibration"]))  # first prediction grey, the last in the bar hue
    palette = ["#757575"] * (len(order) - 1) + [BAR_COLOR]
    bars = (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("in_flight:O", title="lanes in flight", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("calibration:N", sort=order),
            y=alt.Y("rel_err:Q", title="predicted / measured - 1", axis=alt.Axis(format="%")),
            color=alt.Color("calibration:N", title="calibration", scale=alt.Scale(domain=order, range=palette)),
            tooltip=[
                "in_flight",
                "metric",
                "calibration",
                alt.Tooltip("predicted", format=".4g"),
                alt.Tooltip("measured", format=".4g"),
                alt.Tooltip("rel_err", format="+.1%"),
            ],
        )
        .properties(width=WIDTH * 2 // 3, height=HEIGHT * 2 // 3)
    )
    return bars.facet(column=alt.Column("metric:N", title=None)).properties(
        title="Predicted against measured, per level"
    )


def save_chart(chart: ChartLike, path_png: str | Path, path_svg: str | Path, *, scale: float = 2.0) -> None:
    """Write ``chart`` as PNG and SVG through vl-convert, on a white background."""
    static = chart.properties(background="white")
    static.save(str(path_png), format="png", scale_factor=scale)
    static.save(str(path_svg), format="svg")


# --- helpers ---------------------------------------------------------------------------------

_CONFIGURATION = ("model", "gpu", "quant", "kv_dtype", "backend", "tensor_parallel", "replicas")
_CONFIG_COLUMNS = (
    "model",
    "gpu",
    "quant",
    "kv_dtype",
    "backend",
    "tensor_parallel",
    "replicas",
    "batch",
    "utilization",
    "ttft_ms",
    "tpot_ms",
    "cost_usd_month",
    "cost_usd_per_1m_tokens",
    "quality",
    "meets_slo",
    "binding_constraint",
    "warnings",
    "pick",
)


def _require(df: object, columns: Sequence[str], name: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{name} must have at least one row")


def _tidy(df: pd.DataFrame) -> pd.DataFrame:
    """JSON-safe copy: infinities become missing, lists and other objects become text."""
    out = df.reset_index(drop=True).replace([np.inf, -np.inf], np.nan)
    for c in out.columns:
        if out[c].dtype == object:
            out[c] = out[c].map(lambda v: "; ".join(map(str, v)) if isinstance(v, list | tuple) else v)
    return out


def _side_by_side(
    panel: Callable[[pd.DataFrame, str, str], alt.LayerChart],
    levels: pd.DataFrame,
    reference: pd.DataFrame | None,
    label: str,
    reference_label: str,
    title: str,
) -> ChartLike:
    own = panel(levels, label, "run")
    if reference is None:
        return own.properties(title=alt.Title(title, subtitle=label))
    both = alt.hconcat(own, panel(reference, reference_label, "reference")).resolve_scale(y="independent")
    return both.properties(title=title)


def _throughput_panel(levels: pd.DataFrame, label: str, key: str) -> alt.LayerChart:
    _require(levels, ("in_flight", "dec_tok_s"), "levels")
    cols = [c for c in ("in_flight", "dec_tok_s", "wall_s", "output_tokens", "lanes_ok") if c in levels]
    df = _tidy(levels.sort_values("in_flight")[cols])
    ends = df.iloc[[0, -1]].drop_duplicates("in_flight")
    hover = alt.selection_point(
        name=f"hover_{key}", on="pointerover", clear="pointerout", fields=["in_flight"], empty=False
    )
    x = alt.X("in_flight:O", title="lanes in flight", axis=alt.Axis(labelAngle=0))
    y = alt.Y("dec_tok_s:Q", title="decode tokens/s", scale=alt.Scale(zero=True))
    tooltip = [alt.Tooltip(c, format=",.4g") if c != "in_flight" else c for c in cols]
    bars = (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=x,
            y=y,
            color=alt.condition(hover, alt.value(HOVER_COLOR), alt.value(BAR_COLOR)),
            tooltip=tooltip,
        )
        .add_params(hover)
    )
    labels = (
        alt.Chart(ends)
        .mark_text(dy=-6, baseline="bottom", fontWeight="bold")
        .encode(x=x, y=y, text=alt.Text("dec_tok_s:Q", format=",.0f"))
    )
    return alt.layer(bars, labels).properties(title=label, width=WIDTH, height=HEIGHT)


def _decomposition_panel(levels: pd.DataFrame, label: str, key: str) -> alt.LayerChart:
    _require(levels, ("in_flight", "wall_s"), "levels")
    present = [c for c in DECOMPOSITION if c in levels]
    long = (
        _tidy(levels[["in_flight", *present]])
        .melt("in_flight", var_name="column", value_name="seconds")
        .dropna(subset=["seconds"])
    )
    long["quantity"] = long["column"].map(lambda c: DECOMPOSITION[c][0])
    names = [DECOMPOSITION[c][0] for c in present]
    colors = [DECOMPOSITION[c][1] for c in present]
    return (
        alt.Chart(long[["in_flight", "quantity", "seconds"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("in_flight:O", title="lanes in flight", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("seconds:Q", title="seconds", scale=alt.Scale(zero=True)),
            color=alt.Color("quantity:N", title=None, scale=alt.Scale(domain=names, range=colors)),
            tooltip=["in_flight", "quantity", alt.Tooltip("seconds:Q", format=",.3g")],
        )
        .properties(title=label, width=WIDTH, height=HEIGHT)
    )


def _bound_regions(df: pd.DataFrame) -> pd.DataFrame:
    """Contiguous runs of one ``bound`` as [start, end) spans on the log batch axis."""
    batch = df["batch"].to_numpy(dtype=float)
    edges = np.sqrt(batch[:-1] * batch[1:])  # geometric midpoints: halfway on a log axis
    starts = np.concatenate([[batch[0]], edges])
    ends = np.concatenate([edges, [batch[-1]]])
    run = (df["bound"] != df["bound"].shift()).cumsum().to_numpy()
    spans = pd.DataFrame({"bound": df["bound"].to_numpy(), "start": starts, "end": ends, "run": run})
    return spans.groupby("run").agg(bound=("bound", "first"), start=("start", "min"), end=("end", "max"))


def _kv_max(df: pd.DataFrame) -> int | None:
    if "max_concurrent_seqs" not in df or df["max_concurrent_seqs"].isna().all():
        return None
    return int(df["max_concurrent_seqs"].dropna().iloc[0])


def _batching_panel(df, regions, kv_max, y_col, y_title) -> alt.LayerChart:
    domain = [float(df["batch"].min()), float(df["batch"].max())]
    x = alt.X("batch:Q", title="batch (sequences)", scale=alt.Scale(type="log", domain=domain, nice=False))
    bounds = list(BOUND_COLORS)
    shade = (
        alt.Chart(regions)
        .mark_rect(opacity=0.35)
        .encode(
            x=alt.X("start:Q", scale=alt.Scale(type="log", domain=domain, nice=False), title="batch (sequences)"),
            x2="end:Q",
            color=alt.Color(
                "bound:N",
                title="bound",
                scale=alt.Scale(domain=bounds, range=[BOUND_COLORS[b] for b in bounds]),
            ),
        )
    )
    tooltip = [
        c if c in ("batch", "bound", "feasible") else alt.Tooltip(c, format=",.4g")
        for c in ("batch", "aggregate_tok_s", "per_seq_tok_s", "tpot_ms", "bound", "feasible")
        if c in df
    ]
    base = alt.Chart(df).encode(x=x, y=alt.Y(f"{y_col}:Q", title=y_title), tooltip=tooltip)
    line = base.transform_filter("datum.feasible").mark_line(color=BAR_COLOR)
    points = base.mark_point(filled=True, color=BAR_COLOR, size=20).encode(
        opacity=alt.condition("datum.feasible", alt.value(1.0), alt.value(0.25))
    )
    layers = [shade, line, points]
    if kv_max is not None and df["batch"].min() <= kv_max <= df["batch"].max():
        marker = pd.DataFrame({"batch": [kv_max], "label": [f"KV-bound max {kv_max}"]})
        rule = alt.Chart(marker).encode(x=alt.X("batch:Q"))
        layers += [
            rule.mark_rule(color="#B71C1C", strokeDash=[4, 3]),
            rule.mark_text(align="left", dx=3, y=8, color="#B71C1C").encode(text="label:N"),
        ]
    return alt.layer(*layers).properties(width=WIDTH + 120, height=HEIGHT - 60)


def _describe_curve(df: pd.DataFrame) -> str:
    row = df.iloc[0]
    parts = [str(row[c]) for c in ("model", "gpu", "quant") if c in df]
    if "context_tokens" in df:
        parts.append(f"{int(row['context_tokens']):,} context tokens")
    return "Continuous batching: " + ", ".join(parts) if parts else "Continuous batching"


def _waits(df: pd.DataFrame, name: str, candidates: Sequence[str]) -> pd.DataFrame:
    """``utilization``, ``cs2``, ``wait_s`` (and ``distribution``) of the drawable rows of ``df``."""
    column = next((c for c in candidates if isinstance(df, pd.DataFrame) and c in df.columns), candidates[0])
    _require(df, ("utilization", "cs2", column), name)
    out = pd.DataFrame(
        {
            "utilization": df["utilization"].astype(float).to_numpy(),
            "cs2": df["cs2"].astype(float).to_numpy(),
            "wait_s": df[column].astype(float).to_numpy(),
        }
    )
    if "distribution" in df.columns:
        out["distribution"] = df["distribution"].astype(str).to_numpy()
    keep = np.isfinite(out["wait_s"]) & (out["wait_s"] > 0) & (out["utilization"] < 1)
    return out[keep].reset_index(drop=True)


def _per_configuration(df: pd.DataFrame, latency: str, cost: str) -> pd.DataFrame:
    """One row per configuration, its fastest (then cheapest); ``batch`` becomes the range evaluated."""
    keys = [c for c in _CONFIGURATION if c in df.columns]
    if not keys:
        return df
    best = df.sort_values([latency, cost], kind="stable").drop_duplicates(keys)
    if "batch" in df.columns:
        span = df.groupby(keys, as_index=False, dropna=False)["batch"].agg(["min", "max"])
        best = best.drop(columns="batch").merge(span, on=keys, how="left")
        best["batch"] = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(best.pop("min"), best.pop("max"))]
    return best


def _latency_column(df: pd.DataFrame) -> str:
    found = [c for c in df.columns if re.fullmatch(r"e2e_p\d+(\.\d+)?_ms", str(c))]
    if not found:
        raise ValueError(f"candidates lacks an e2e_p<pct>_ms latency column; it has {list(df.columns)}")
    return found[0]


def _axis_title(column: str) -> str:
    m = re.fullmatch(r"e2e_p(\d+(?:\.\d+)?)_ms", column)
    if m:
        return f"end-to-end p{m.group(1)} latency (ms)"
    return {"cost_usd_month": "cost (USD/month)", "cost_usd_per_1m_tokens": "USD per 1M tokens"}.get(column, column)


def _pick_label(row: pd.Series) -> str:
    parts = [str(row[c]) for c in ("model", "gpu", "quant") if c in row]
    if "replicas" in row:
        parts.append(f"x{int(row['replicas'])}")
    return f"{row['pick']}: " + " ".join(parts)

"""The pieces the charts are built from: colours and sizes, panels, column checks and labels, and saving a chart."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

__all__: list[str] = []


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

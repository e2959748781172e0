"""Chart of the serving model's predictions against published measurements, one panel per family."""

from __future__ import annotations

import altair as alt
import pandas as pd

from toolkit._report.panels import BAR_COLOR, WIDTH, _require

__all__ = ["published_accuracy_chart"]


def published_accuracy_chart(accuracy: pd.DataFrame, *, title: str = "Predicted against published") -> alt.FacetChart:
    """Log-log scatter of predicted against measured, one panel per family, with the y = x line.

    Each family's panel has its own scales (latencies in ms and throughputs in tokens/s differ by
    orders of magnitude). Rows below the physical floor are drawn hollow; rows without a prediction
    are left out.

    Parameters
    ----------
    accuracy : pandas.DataFrame
        :func:`toolkit.accuracy_against_published` output (``id``, ``family``, ``metric``,
        ``split``, ``predicted``, ``measured``, ``signed_err``, ``below_floor``).
    title : str
        Overall title.

    Returns
    -------
    altair.FacetChart
        The chart; its data are the predicted rows.
    """
    _require(accuracy, ("id", "family", "metric", "split", "predicted", "measured", "signed_err"), "accuracy")
    df = accuracy[accuracy["predicted"].notna() & (accuracy["predicted"] > 0) & (accuracy["measured"] > 0)]
    df = df[["id", "family", "metric", "split", "predicted", "measured", "signed_err", "below_floor"]].copy()
    low, high = df[["predicted", "measured"]].min(axis=1), df[["predicted", "measured"]].max(axis=1)
    df["line_lo"], df["line_hi"] = (
        low.groupby(df["family"]).transform("min"),
        high.groupby(df["family"]).transform("max"),
    )
    scale = alt.Scale(type="log")
    points = (
        alt.Chart()
        .mark_point(size=30, color=BAR_COLOR)
        .encode(
            x=alt.X("measured:Q", title="measured", scale=scale),
            y=alt.Y("predicted:Q", title="predicted", scale=scale),
            shape=alt.Shape("split:N", title="split"),
            fill=alt.condition("datum.below_floor", alt.value("transparent"), alt.value(BAR_COLOR)),
            tooltip=[
                "id",
                "metric",
                "split",
                alt.Tooltip("measured", format=".4g"),
                alt.Tooltip("predicted", format=".4g"),
                alt.Tooltip("signed_err", format="+.1%"),
            ],
        )
    )
    diagonal = (
        alt.Chart()
        .mark_rule(color="#757575", strokeDash=[4, 4])
        .encode(x="min(line_lo):Q", y="min(line_lo):Q", x2="max(line_hi):Q", y2="max(line_hi):Q")
    )
    return (
        alt.layer(diagonal, points, data=df)
        .properties(width=WIDTH * 2 // 3, height=WIDTH * 2 // 3)
        .facet(column=alt.Column("family:N", title=None))
        .resolve_scale(x="independent", y="independent")
        .properties(title=title)
    )

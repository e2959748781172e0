"""The report's building blocks: a section, a chart embedded with its static copies, a folded table."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pandas as pd

from toolkit._report import panels as _panels

__all__: list[str] = []


# The page's parts, in order: the measured server first, then what holds whatever the server.
PARTS = {
    "measured": "The measured server",
    "model": "About the model",
    "appendix": "Appendix",
}


@dataclass
class _Section:
    title: str
    body: str  # HTML, already escaped
    part: str = "measured"  # a key of PARTS


def _chart_html(chart: alt.TopLevelMixin, slug: str, out: Path) -> str:
    _panels.save_chart(chart, out / f"{slug}.png", out / f"{slug}.svg")
    spec = json.dumps(chart.to_dict()).replace("<", "\\u003c")  # no "</script>" can end the block
    return (
        f'<figure><div class="chart" data-chart="{slug}"></div>'
        f'<script type="application/json" id="spec-{slug}">{spec}</script>'
        f'<figcaption>Static copies: <a href="{slug}.png">PNG</a>, <a href="{slug}.svg">SVG</a>'
        "</figcaption></figure>"
    )


def _table_html(df: pd.DataFrame, summary: str, csv_name: str, *, open_: bool = False) -> str:
    table = df.to_html(index=False, escape=True, na_rep="", float_format=_number, border=0)
    link = f'<a href="{html.escape(csv_name)}">CSV</a>'
    return (
        f"<details{' open' if open_ else ''}><summary>{html.escape(summary)} ({link})</summary>"
        f'<div class="table">{table}</div></details>'
    )


def _number(value: float) -> str:
    """A table cell: whole numbers with thousands separators from 1,000 up, four significant digits below."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.4g}"

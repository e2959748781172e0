"""Summary tiles and the time-decomposition note of a sweep's levels."""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["decomposition_note", "stat_tiles"]


def stat_tiles(levels: pd.DataFrame) -> str:
    """Headline stat tiles of a sweep as HTML: time for all lanes, decode gain, prefix-cache hits.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``lanes``, ``wall_s`` (s), ``dec_tok_s`` (tokens/s) and
        optionally ``prefix_hit_rate`` (0..1).

    Returns
    -------
    str
        A ``<div class="tiles">`` of three tiles: wall clock at the top limit against the first,
        decode tokens/s gain from the first to the top limit, prefix-cache hit range (or n/a). A
        figure that cannot be known reads "n/a" with the reason; when no lane succeeded at all
        (``lanes_ok`` all 0) a single tile says so instead.
    """
    df = levels.sort_values("in_flight")
    first, last = df.iloc[0], df.iloc[-1]
    if "lanes_ok" in df and not (df["lanes_ok"].fillna(0) > 0).any():
        total = int(df["lanes"].sum()) if "lanes" in df else "all"
        return _cards([("no lane succeeded", f"{total} lanes failed at every level: see the lanes' errors")])
    lanes = f"for {int(last['lanes'])} lanes " if "lanes" in df else ""
    gain = last["dec_tok_s"] / first["dec_tok_s"] if first["dec_tok_s"] > 0 else float("nan")
    tiles = [
        (
            _seconds(last["wall_s"]),
            f"{lanes}at {int(last['in_flight'])} in flight, against {_seconds(first['wall_s'])} at"
            f" {int(first['in_flight'])}",
        ),
        (
            f"{gain:.1f}x" if gain == gain else "n/a",
            f"decode throughput ({first['dec_tok_s']:,.0f} to {last['dec_tok_s']:,.0f} tokens/s)"
            if gain == gain
            else "decode throughput gain: no successful lane at the first or the top limit",
        ),
    ]
    hits = df["prefix_hit_rate"].dropna() if "prefix_hit_rate" in df else pd.Series(dtype=float)
    if len(hits):
        lo, hi = round(100 * hits.min()), round(100 * hits.max())
        tiles.append((f"{lo}%" if lo == hi else f"{lo}-{hi}%", "prefix cache hits (server /metrics)"))
    else:
        tiles.append(("n/a", "prefix cache hits: the server exposed no counter"))
    return _cards(tiles)


def _seconds(value: float) -> str:
    if value != value:
        return "n/a"
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


# Inline layout so the tiles are cards in a notebook too, where the report's stylesheet is absent;
# the report's stylesheet adds its colours on top.
_GRID = "display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:1rem;margin:1rem 0"
_TILE = "border:1px solid rgba(128,128,128,.35);border-radius:8px;padding:.8rem 1rem"


def _cards(tiles: list[tuple[str, str]]) -> str:
    cards = "".join(
        f'<div class="tile" style="{_TILE}"><div class="value" style="font-size:2rem;font-weight:700">'
        f'{html.escape(value)}</div><div class="label" style="opacity:.75">{html.escape(label)}</div></div>'
        for value, label in tiles
    )
    return f'<div class="tiles" style="{_GRID}">{cards}</div>'


def decomposition_note(levels: pd.DataFrame) -> str:
    """What a sweep's decomposition says, in one sentence of its measured numbers.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``wall_s`` (s), optionally ``llm_sum_s``, ``slot_wait_s`` (s)
        and ``verdict``.

    Returns
    -------
    str
        Wall clock and summed lane time from the first to the top limit, their ratio, the sweep's
        verdict and the slot wait's share of wall clock, where recorded.
    """
    df = levels.sort_values("in_flight")
    first, last = df.iloc[0], df.iloc[-1]
    span = f"from {int(first['in_flight'])} to {int(last['in_flight'])} in flight"
    wall = f"wall clock {first['wall_s']:,.1f} s to {last['wall_s']:,.1f} s"
    if "llm_sum_s" not in df or df["llm_sum_s"].isna().all():
        return f"{span}, {wall}; summed lane time was not recorded, so batching and queueing cannot be told apart."
    growth = last["llm_sum_s"] / first["llm_sum_s"]
    lane_time = f"summed lane time went {first['llm_sum_s']:,.1f} s to {last['llm_sum_s']:,.1f} s ({growth:.1f}x)"
    note = f"{span}, {wall}, while {lane_time}"
    if "verdict" in df and pd.notna(last["verdict"]):
        note += f": the sweep's verdict is {last['verdict']}"
    if "slot_wait_s" in df and pd.notna(last["slot_wait_s"]):
        share = last["slot_wait_s"] / last["wall_s"]
        note += f"; slot wait at the top limit {last['slot_wait_s']:,.2f} s ({share:.0%} of wall clock)"
    return note + "."

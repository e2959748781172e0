"""Summary tiles and the time-decomposition note of a sweep's levels."""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["decomposition_note", "stat_tiles"]


def stat_tiles(levels: pd.DataFrame) -> str:
    """Headline stat tiles of a sweep as HTML: time for all lanes, peak decode gain, prefix-cache hits.

    Parameters
    ----------
    levels : pandas.DataFrame
        Sweep levels: ``in_flight``, ``lanes``, ``wall_s`` (s), ``dec_tok_s`` (tokens/s) and
        optionally ``prefix_hit_rate`` (0..1) and ``predicted_prefix_hit_rate`` (the model's, 0..1; or
        why it is missing in ``attrs["prefix_prediction"]``).

    Returns
    -------
    str
        A ``<div class="tiles">`` of three tiles: wall clock at the top limit against the first;
        the peak decode tokens/s over the first level's, labelled with the peak's limit and every
        level where throughput fell; the prefix-cache hit rate at the highest limit that reports
        one, against the first (or n/a), beside the model's where given. A figure that cannot be known reads "n/a" with the reason;
        when no lane succeeded at all (``lanes_ok`` all 0) a single tile says so instead.
    """
    df = levels.sort_values("in_flight")
    first, last = df.iloc[0], df.iloc[-1]
    if "lanes_ok" in df and not (df["lanes_ok"].fillna(0) > 0).any():
        total = int(df["lanes"].sum()) if "lanes" in df else "all"
        return _cards([("no lane succeeded", f"{total} lanes failed at every level: see the lanes' errors")])
    lanes = f"for {int(last['lanes'])} lanes " if "lanes" in df else ""
    tiles = [
        (
            _seconds(last["wall_s"]),
            f"{lanes}at {int(last['in_flight'])} in flight, against {_seconds(first['wall_s'])} at"
            f" {int(first['in_flight'])}",
        ),
        _gain_tile(df),
        _cache_tile(df),
    ]
    return _cards(tiles)


def _gain_tile(df: pd.DataFrame) -> tuple[str, str]:
    """The peak decode throughput over the first level's, where it peaks and how the curve got there."""
    first = df.iloc[0]
    if not first["dec_tok_s"] > 0:
        return "n/a", "decode throughput gain: no successful lane at the first limit"
    peak = _peak(df)
    if peak is None:
        return "n/a", "decode throughput gain: no successful lane above the first limit"
    gain = peak["dec_tok_s"] / first["dec_tok_s"]
    label = (
        f"peak decode throughput, {_tok(peak['dec_tok_s'])} tokens/s at {int(peak['in_flight'])} in flight,"
        f" against {_tok(first['dec_tok_s'])} at {int(first['in_flight'])}; {_throughput_shape(df)}"
    )
    return f"{gain:.1f}x", label


def _cache_tile(df: pd.DataFrame) -> tuple[str, str]:
    """The prefix-cache hit rate at the highest limit that has one, and at the first for comparison."""
    hits = df.dropna(subset=["prefix_hit_rate"]) if "prefix_hit_rate" in df else df.iloc[:0]
    if not len(hits):
        return "n/a", "prefix cache hits: the server exposed no counter"
    low, top = hits.iloc[0], hits.iloc[-1]
    label = f"of prompt tokens hit the prefix cache at {int(top['in_flight'])} in flight (server /metrics)"
    if len(hits) > 1:
        label += f", against {low['prefix_hit_rate']:.0%} at {int(low['in_flight'])}"
    how = df.attrs.get("prefix_prediction")
    predicted = top.get("predicted_prefix_hit_rate", float("nan"))
    if predicted == predicted:
        label += f"; the model predicts {predicted:.0%} there" + (f" ({how})" if how else "")
    elif how:
        label += f"; the model's prediction: {how}"
    return f"{top['prefix_hit_rate']:.0%}", label


def _peak(levels: pd.DataFrame) -> pd.Series | None:
    """The level of highest decode throughput (the lowest limit among ties), None when none has one."""
    df = levels.sort_values("in_flight")
    finite = df[df["dec_tok_s"].notna()]
    return finite.loc[finite["dec_tok_s"].idxmax()] if len(finite) else None


def _throughput_shape(levels: pd.DataFrame) -> str:
    """How decode throughput moves with the limit, in words: every dip, and every level without one.

    ``levels``: ``in_flight`` and ``dec_tok_s`` (tokens/s). Returns "it rises at every step", or each
    level whose throughput fell below the finite level before it ("it falls at 2 in flight (40
    tokens/s after 50)"), followed by the levels where no request completed (NaN throughput).
    """
    df = levels.sort_values("in_flight")
    missing = [str(int(n)) for n in df.loc[df["dec_tok_s"].isna(), "in_flight"]]
    none = f"; no request completed at {', '.join(missing)} in flight" if missing else ""
    df = df[df["dec_tok_s"].notna()]
    if len(df) < 2:
        return "one level only" + none
    before = df["dec_tok_s"].shift()
    dips = df[df["dec_tok_s"] < before]
    if not len(dips):
        return "it rises at every step" + none
    falls = [
        f"{int(row['in_flight'])} in flight ({_tok(row['dec_tok_s'])} tokens/s after {_tok(prev)})"
        for (_, row), prev in zip(dips.iterrows(), before[dips.index], strict=True)
    ]
    return "it falls at " + " and at ".join(falls) + none


def _tok(value: float) -> str:
    """A throughput in tokens/s: whole tokens from 100 up, three significant digits below."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


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

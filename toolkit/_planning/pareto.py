"""The Pareto frontier of a candidate table: the rows no other row beats on every objective.

A row *dominates* another when it is no worse on every objective and strictly better on at least
one. Dominance is evaluated with numpy over blocks of rows (memory ``block x n x objectives``
booleans), so a few thousand planner candidates take milliseconds.

Missing values: a NaN objective ranks as the worst possible value on its axis (tied with other
NaNs and with an infinite value in the bad direction). An unknown quality therefore never beats a
known one, but two rows of unknown quality still compete on cost and latency. An axis that is NaN
in every row is then constant and so drops out of the comparison, exactly as if it were not asked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["pareto"]

# booleans per block of the dominance cube; bounds memory at about 16 MiB
_BLOCK_ELEMENTS = 1 << 24


def pareto(
    df: pd.DataFrame,
    minimize: Sequence[str] = ("cost_usd_month", "e2e_p95_ms"),
    maximize: Sequence[str] = ("quality",),
) -> pd.DataFrame:
    """Return the non-dominated rows of ``df`` with a ``pick`` column.

    Parameters
    ----------
    df : pandas.DataFrame
        Candidates, for instance the output of :func:`toolkit.plan`. Objective columns must be
        numeric; other columns are carried through unchanged.
    minimize : sequence of str
        Columns where smaller is better (default monthly cost in USD and end-to-end p95 in ms).
    maximize : sequence of str
        Columns where larger is better (default the quality score). NaN ranks as worst.

    Returns
    -------
    pandas.DataFrame
        The non-dominated input rows, index preserved, exact ties all kept, ordered by the
        objectives in the order given (minimize first). Added column ``pick`` (str): ``cheapest``
        for the best row on a ``cost*`` column, ``fastest`` on a ``*_ms``/``*_s`` column,
        ``best quality`` on ``quality`` (otherwise ``lowest <col>`` / ``highest <col>``); a row best
        on several objectives carries them joined by ``", "``; ``""`` for the rest. The best row
        on an objective is the lexicographic best (ties broken by the other objectives in order),
        together with any row exactly equal to it on every objective.
    """
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    minimize, maximize = list(minimize), list(maximize)
    objectives = minimize + maximize
    if not objectives:
        raise ValueError("minimize and maximize must name at least one column between them")
    if len(set(objectives)) != len(objectives):
        raise ValueError(f"minimize and maximize must not repeat a column, got {objectives}")
    for col in objectives:
        if col not in df.columns:
            raise ValueError(f"column {col!r} (in minimize/maximize) is not in df; columns are {list(df.columns)}")
        if not (pd.api.types.is_numeric_dtype(df[col]) or df[col].isna().all()):
            raise ValueError(f"column {col!r} (in minimize/maximize) must be numeric, got dtype {df[col].dtype}")

    costs = _as_costs(df, minimize, maximize)
    keep = ~_dominated(costs)
    front = df.loc[keep].copy()
    front_costs = costs[keep]
    order = np.lexsort(front_costs.T[::-1]) if len(front) else np.arange(0)
    front = front.iloc[order]
    front_costs = front_costs[order]
    front["pick"] = _picks(front_costs, objectives, maximize)
    return front


def _as_costs(df: pd.DataFrame, minimize: list[str], maximize: list[str]) -> np.ndarray:
    """Objectives as an (n, k) float array where smaller is better on every axis and NaN is +inf."""
    cols = [df[c].to_numpy(dtype=float, na_value=np.nan) for c in minimize]
    cols += [-df[c].to_numpy(dtype=float, na_value=np.nan) for c in maximize]
    costs = np.column_stack(cols) if len(df) else np.empty((0, len(cols)))
    return np.where(np.isnan(costs), np.inf, costs)


def _dominated(costs: np.ndarray) -> np.ndarray:
    """Boolean mask: row i is dominated by some row j (j <= i everywhere and < somewhere)."""
    n, k = costs.shape
    out = np.zeros(n, dtype=bool)
    block = max(1, _BLOCK_ELEMENTS // max(1, n * k))
    for start in range(0, n, block):
        rows = costs[start : start + block, None, :]  # (b, 1, k): the rows under test
        no_worse = (costs[None, :, :] <= rows).all(axis=2)  # (b, n): j no worse than i
        better = (costs[None, :, :] < rows).any(axis=2)  # (b, n): j strictly better somewhere
        out[start : start + block] = (no_worse & better).any(axis=1)
    return out


def _label(col: str, maximized: bool) -> str:
    if col == "quality":
        return "best quality"
    if col.startswith("cost"):
        return "cheapest"
    if col.endswith(("_ms", "_s")) and not maximized:
        return "fastest"
    return f"{'highest' if maximized else 'lowest'} {col}"


def _picks(costs: np.ndarray, objectives: list[str], maximize: list[str]) -> list[str]:
    tags: list[list[str]] = [[] for _ in range(len(costs))]
    for axis, col in enumerate(objectives):
        column = costs[:, axis]
        if np.isposinf(column).all():
            continue  # nothing known (or finite) on this axis: no best row to name
        keys = [column] + [costs[:, a] for a in range(costs.shape[1]) if a != axis]
        best = np.lexsort(keys[::-1])[0]
        for i in np.flatnonzero((costs == costs[best]).all(axis=1)):
            tags[i].append(_label(col, col in maximize))
    return [", ".join(t) for t in tags]

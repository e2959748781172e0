"""The Pareto frontier of a candidate table: the rows no other row beats on every objective.

A row *dominates* another when it is no worse on every objective and strictly better on at least
one. The skyline is computed on the distinct objective vectors (exact copies share a verdict: a
copy never dominates its twin). Sorted lexicographically, a vector's dominators all come before it,
so with the objective of fewest distinct values as the "level" axis (the quality score, typically)
a vector ``p`` is dominated exactly when some earlier vector at a level no worse than ``p``'s is no
worse on the remaining axis: one running minimum per level, ``O(n x levels)`` numpy work. With four
or more objectives, or too many levels, the sorted vectors are checked in blocks against the
frontier found so far (sort-filter skyline: a frontier vector is final once reached), which costs
``O(n x (frontier + block))``.

Missing values: a NaN objective ranks as the worst possible value on its axis (tied with other
NaNs and with an infinite value in the bad direction). An unknown quality therefore never beats a
known one, but two rows of unknown quality still compete on cost and latency. An axis that is NaN
in every row is then constant and so drops out of the comparison, exactly as if it were not asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the command line's frontier needs no pandas
    import pandas as pd

__all__ = ["pareto"]

# booleans per block of the dominance cube; bounds memory at about 16 MiB
_BLOCK_ELEMENTS = 1 << 24
# rows checked at once by the sort-filter skyline
_SFS_BLOCK = 1024
# above this many distinct values on the level axis the running minima cost more than the blocks
_MAX_LEVELS = 2048


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
    import pandas as pd  # the command line's frontier (_front) needs no pandas

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

    numbers = lambda names: [df[c].to_numpy(dtype=float, na_value=np.nan) for c in names]
    rows, picks = _front(numbers(minimize), numbers(maximize), objectives)
    front = df.iloc[rows].copy()
    front["pick"] = picks
    return front


def _front(
    minimize: list[np.ndarray], maximize: list[np.ndarray], objectives: list[str]
) -> tuple[np.ndarray, list[str]]:
    """(the positions of the non-dominated rows, ordered by the objectives; their ``pick``) given the
    objective columns as float arrays (NaN worst) and the objectives' names, minimized first."""
    cols = [*minimize, *(-c for c in maximize)]
    costs = np.column_stack(cols) if cols[0].size else np.empty((0, len(cols)))
    costs = np.where(np.isnan(costs), np.inf, costs)
    keep = np.flatnonzero(~_dominated(costs))
    rows = keep[np.lexsort(costs[keep].T[::-1])] if keep.size else keep
    names = objectives[len(minimize) :]
    return rows, _picks(costs[rows], objectives, names)


def _dominated(costs: np.ndarray) -> np.ndarray:
    """Boolean mask: row i is dominated by some row j (j <= i everywhere and < somewhere)."""
    n, k = costs.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    unique, inverse = np.unique(costs, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    levels = [np.unique(unique[:, a]).size for a in range(k)]
    level_axis = int(np.argmin(levels))
    if k == 1:
        dominated = unique[:, 0] > unique[0, 0]  # np.unique sorts: row 0 is the minimum
    elif k == 2:
        dominated = _dominated_by_levels(unique, None)
    elif k == 3 and levels[level_axis] <= _MAX_LEVELS:
        others = [a for a in range(k) if a != level_axis]
        dominated = _dominated_by_levels(unique[:, others], unique[:, level_axis])
    else:
        dominated = _dominated_by_blocks(unique)
    return dominated[inverse]


def _dominated_by_levels(plane: np.ndarray, level: np.ndarray | None) -> np.ndarray:
    """Distinct vectors (first, second[, level]): dominated iff an earlier vector in lexicographic
    order of (first, second) with a level no worse has a second value no worse (the first is no
    worse by the order; being distinct, it is better somewhere)."""
    n = len(plane)
    level = np.zeros(n) if level is None else level
    order = np.lexsort((level, plane[:, 1], plane[:, 0]))
    second = plane[order, 1]
    lev = level[order]
    out = np.zeros(n, dtype=bool)
    for value in np.unique(lev):
        eligible = lev <= value
        before = np.concatenate(([np.inf], np.minimum.accumulate(np.where(eligible, second, np.inf))[:-1]))
        # +inf is also a real objective value (NaN ranks as +inf): count who is eligible before
        any_before = np.concatenate(([0], np.cumsum(eligible)[:-1])) > 0
        at = lev == value
        out[order[at]] = any_before[at] & (before[at] <= second[at])
    return out


def _dominated_by_blocks(unique: np.ndarray) -> np.ndarray:
    """Sort-filter skyline over lexicographically sorted distinct vectors, a block at a time."""
    n, k = unique.shape  # np.unique returns them in lexicographic order
    out = np.zeros(n, dtype=bool)
    frontier = np.empty((0, k))
    block = max(1, min(_SFS_BLOCK, _BLOCK_ELEMENTS // max(1, k * (n // 8 + 1))))
    for start in range(0, n, block):
        rows = unique[start : start + block]
        against = np.concatenate([frontier, rows])
        # distinct vectors: j <= i everywhere with j != i means j dominates i
        no_worse = (against[None, :, :] <= rows[:, None, :]).all(axis=2)
        no_worse[:, len(frontier) :] &= ~np.eye(len(rows), dtype=bool)
        dom = no_worse.any(axis=1)
        out[start : start + block] = dom
        frontier = np.concatenate([frontier, rows[~dom]])
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

"""The search itself: bracket the capacity geometrically, bisect the bracket, confirm its lower end.

It knows nothing of servers or simulators: ``measure(rate_rps, phase)`` runs one step and returns its
row (with a boolean ``passed``), or None when the time budget cannot hold another step, or raises
:class:`StopSearch` with its reason when the search cannot go on. So the logic is tested against a fake
step, and the measured and predicted searches are the same search.

1. Bracket: from ``rate_low_rps`` double the rate (up to ``rate_high_rps``) until a step fails; if
   the first step fails, halve instead until one passes (at most ``MAX_HALVINGS`` times).
2. Bisect: while the first failing rate is more than ``1 + rel_tolerance`` times the last passing
   one, measure their geometric mean.
3. Confirm: run the last passing rate again until it has ``repeats`` steps. A rate passes only when
   every step at it passed, so a confirmation that fails makes it the first failing rate and the
   bisection goes on below it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__: list[str] = []

BUDGET_SPENT = "budget_s spent: stopped before the next step; every step measured so far is kept"

MAX_HALVINGS = 6
MAX_DOUBLINGS = 40


class StopSearch(Exception):
    """The search cannot go on (its message says why); the steps measured so far are kept."""


@dataclass
class Outcome:
    """The search's steps in the order run, its bracket and how it ended."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    capacity_rps: float = math.nan  # the last rate that passed every step
    failed_rps: float = math.nan  # the first rate that failed a step
    stopped_early: bool = False
    reason: str = ""


def search(
    measure: Callable[[float, str], dict[str, Any] | None],
    *,
    rate_low_rps: float,
    rate_high_rps: float | None,
    rel_tolerance: float,
    repeats: int,
) -> Outcome:
    """Run the search (see the module docstring); every step measured is kept, even when it stops early."""
    out = Outcome()
    verdicts: dict[float, list[bool]] = {}

    def run(rate: float, phase: str) -> bool:
        row = measure(rate, phase)
        if row is None:
            raise StopSearch(BUDGET_SPENT)
        out.rows.append({"phase": phase, **row, "rate_rps": rate})
        verdicts.setdefault(rate, []).append(bool(row["passed"]))
        return bool(row["passed"])

    low: float | None = None
    high: float | None = None
    try:
        low, high = _bracket(run, rate_low_rps, rate_high_rps)
        while low is not None:
            while high is not None and high > low * (1 + rel_tolerance):
                mid = math.sqrt(low * high)
                if run(mid, "bisect"):
                    low = mid
                else:
                    high = mid
            if all(run(low, "repeat") for _ in range(repeats - len(verdicts[low]))):
                break
            high = low
            below = [r for r, v in verdicts.items() if r < high and all(v)]
            low = max(below) if below else _halve(run, high)[0]
        out.reason = _ending(low, high, rate_low_rps, rate_high_rps, rel_tolerance)
    except StopSearch as stop:
        out.stopped_early = True
        out.reason = str(stop)
        passing = [r for r, v in verdicts.items() if all(v)]
        failing = [r for r, v in verdicts.items() if not all(v)]
        low = max([r for r in passing if not failing or r < min(failing)], default=None)
        high = min(failing, default=None)
    out.capacity_rps = math.nan if low is None else low
    out.failed_rps = math.nan if high is None else high
    return out


def _bracket(run, rate_low: float, rate_high: float | None) -> tuple[float | None, float | None]:
    if not run(rate_low, "bracket"):
        return _halve(run, rate_low)
    rate = rate_low
    for _ in range(MAX_DOUBLINGS):
        if rate_high is not None and rate >= rate_high:
            return rate, None
        step = 2 * rate if rate_high is None else min(2 * rate, rate_high)
        if not run(step, "bracket"):
            return rate, step
        rate = step
    return rate, None


def _halve(run, failed: float) -> tuple[float | None, float]:
    rate = failed
    for _ in range(MAX_HALVINGS):
        rate /= 2
        if run(rate, "bracket"):
            return rate, failed
        failed = rate
    return None, failed


def _ending(low, high, rate_low, rate_high, rel_tolerance) -> str:
    if low is None:
        return f"no rate passed: the lowest tried, {high:.4g} req/s, failed (rate_low_rps was {rate_low:g})"
    if high is None:
        top = "rate_high_rps" if rate_high is not None else "the largest rate tried"
        return f"{top} ({low:.4g} req/s) passed: the capacity is at least that"
    return f"bracketed: the first failing rate is within {rel_tolerance:g} of the last passing one"

"""The profile passes that bracket a held-out replay in time, and what they say about the server's
drift across it (:func:`toolkit._validation.trust.trust_check` predicts the replay from them).

On an idle 2-core host the server's speed moves by about 10% between minutes (profile passes a few
minutes apart), and at the replay's load a queue amplifies it: an
M/M/1 queue's mean time in system ``S / (1 - rho)``, with ``rho = lambda S``, moves ``1 / (1 - rho)``
times as much as its service time ``S`` (2.5 times at the replay's 60% busy). A profile spread over
the run before the replay measures a server of a few minutes earlier; the passes right before and
right after it measure the one it ran on. Predicted from each alone, the replay's error shows how
far that speed moved: far apart, the replay cannot tell the model's error from the drift; close
together, the server held its speed and the miss is the model's (say 21% and 25% with the cells 2%
apart; ``tests/benchmarks/bench_trust.py`` records such runs in reports/bench/trust.json).
"""

from __future__ import annotations

import pandas as pd

from toolkit._sweep.profile_cells import combine_passes, profile_cells

__all__: list[str] = []


def bracket(passes: tuple[pd.DataFrame, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The profiles the replay is predicted from: the pass before it, the pass after, and both."""
    before, after = passes
    return {"pass before": before, "pass after": after, "both": combine_passes([before, after])}


def cell_change(before: pd.DataFrame, after: pd.DataFrame) -> float:
    """The median over the profile's cells of the pass after's median time over the pass before's, minus 1."""
    keys = ["cell", "batch", "prompt_tokens"]
    both = profile_cells(before).merge(profile_cells(after), on=keys, suffixes=("_before", "_after"))
    return float((both["median_ms_after"] / both["median_ms_before"]).median() - 1)


def drift_clause(drift: pd.DataFrame | None) -> str:
    """The replay's errors calibrated on the pass before it and on the pass after it alone, or empty."""
    if drift is None:
        return ""
    errors = drift.set_index("calibrated_on")["median_abs_error"]
    return (
        f"; predicted from the profile passes right before and after it, {errors['pass before']:.0%} from the"
        f" one before alone and {errors['pass after']:.0%} from the one after"
    )

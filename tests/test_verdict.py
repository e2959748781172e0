"""The sweep's verdict says "inconclusive" where its repeats cannot support a reading."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit._sweep.levels import RUN_COLUMNS, _inconclusive, aggregate, disagree


def _runs(per_repeat_ms_per_token: dict[int, list[float]], dec_tok_s: dict[int, list[float]]) -> pd.DataFrame:
    """Closed-loop runs of 8 lanes: level 1's lane time per token is 10 ms in every repeat."""
    rows = []
    for limit, values in per_repeat_ms_per_token.items():
        for repeat, (u, tok_s) in enumerate(zip(values, dec_tok_s[limit], strict=True)):
            row = dict.fromkeys(RUN_COLUMNS, math.nan)
            row.update(in_flight=limit, lanes=8, wall_s=1.0, dec_tok_s=tok_s, llm_ms_per_token=u, repeat=repeat)
            row.update(attempts=8, lanes_ok=8, lanes_failed=0, lanes_unfinished=0, verdict="", reason="")
            rows.append(row)
    runs = pd.DataFrame(rows)
    # each repeat's elasticity against level 1 of the same repeat, as the runner computes it
    base = runs[runs["in_flight"] == 1].set_index("repeat")["llm_ms_per_token"]
    ratio = runs["llm_ms_per_token"] / runs["repeat"].map(base)
    runs["elasticity"] = np.log(ratio) / np.log(runs["in_flight"].astype(float))
    return runs


def _verdicts(runs: pd.DataFrame) -> dict[int, str]:
    lanes = pd.DataFrame(columns=["in_flight", "rate_rps", "outcome"])
    levels = aggregate(runs, lanes, closed_loop=True)
    return dict(zip(levels["in_flight"], levels["verdict"]))


def test_repeats_on_both_sides_of_a_threshold_are_inconclusive():
    # at 4 in flight: 4**0.65 and 4**0.75 times the 10 ms of level 1 -> elasticities 0.65 and 0.75,
    # mixed in one repeat and queueing in the other; at 2 both repeats read batching (0.1, 0.15)
    u = {1: [10.0, 10.0], 2: [10 * 2**0.1, 10 * 2**0.15], 4: [10 * 4**0.65, 10 * 4**0.75]}
    tok = {1: [100.0, 100.0], 2: [180.0, 182.0], 4: [200.0, 204.0]}
    verdicts = _verdicts(_runs(u, tok))
    assert verdicts == {1: "baseline", 2: "batching", 4: "inconclusive"}


def test_a_noisy_level_is_inconclusive_whatever_its_elasticity():
    # both repeats read batching at 2 in flight, but their throughputs are 150 and 200 tokens/s:
    # a spread of 50 / 175 = 29% > 25%
    u = {1: [10.0, 10.0], 2: [10 * 2**0.05, 10 * 2**0.1]}
    tok = {1: [100.0, 100.0], 2: [150.0, 200.0]}
    assert _verdicts(_runs(u, tok))[2] == "inconclusive"


def test_one_repeat_near_a_threshold_is_inconclusive_far_from_it_is_not():
    assert _inconclusive("mixed", False, 0.68, 0.68, 1) == "inconclusive"
    assert _inconclusive("queueing", False, 0.72, 0.72, 1) == "inconclusive"
    assert _inconclusive("mixed", False, 0.5, 0.5, 1) == "mixed"
    assert _inconclusive("batching", False, 0.1, 0.1, 1) == "batching"
    assert _inconclusive("baseline", True, math.nan, math.nan, 1) == "baseline"


@pytest.mark.parametrize(
    ("values", "noisy"),
    [([100, 118], False), ([100, 130], True), ([100], False), ([100, math.nan], False), ([80, 100, 110], True)],
)
def test_disagree_is_a_spread_of_more_than_25_percent_of_the_median(values, noisy):
    assert disagree(pd.Series(values, dtype=float)) is noisy

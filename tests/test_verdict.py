"""The sweep's verdict says "inconclusive" where its repeats cannot support a reading."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from toolkit._sweep.levels import RUN_COLUMNS, _inconclusive, aggregate, disagree
from toolkit._sweep.result import SweepResult, combine_passes, from_runs


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
    # mixed in one repeat and queueing in the other; at 8, 0.9 and 0.92: queueing. The host's drift
    # that moved level 4 by 4**0.1 = 15% between its repeats moves every level, so level 2 (0.0 and
    # 0.1 and 0.12, both batching by their own repeats) is inconclusive too: ln u spreads by 0, 0.02 ln 2,
    # 0.1 ln 4 and 0.02 ln 8 over the pairs, pooled s = sqrt(sum(d^2 / 2) / 4) = 0.0514 (df 4), and
    # level 2's half-width is t(0.975, 4) s sqrt(1/2 + 1/2) / ln 2 = 2.776 * 0.0514 / 0.693 = 0.206,
    # so 0.11 + 0.206 > 0.3; level 8's is 2.776 * 0.0514 / ln 8 = 0.069: 0.91 - 0.069 > 0.7
    u = {
        1: [10.0, 10.0],
        2: [10 * 2**0.1, 10 * 2**0.12],
        4: [10 * 4**0.65, 10 * 4**0.75],
        8: [10 * 8**0.9, 10 * 8**0.92],
    }
    tok = {1: [100.0, 100.0], 2: [180.0, 182.0], 4: [200.0, 204.0], 8: [210.0, 212.0]}
    runs = _runs(u, tok)
    levels = aggregate(runs, pd.DataFrame(columns=["in_flight", "rate_rps", "outcome"]), closed_loop=True)
    half = dict(zip(levels["in_flight"], levels["elasticity_ci95"]))
    pooled = math.sqrt(sum(d**2 / 2 for d in (0.0, 0.02 * math.log(2), 0.1 * math.log(4), 0.02 * math.log(8))) / 4)
    assert pooled == pytest.approx(0.0514, abs=1e-4)
    assert half[2] == pytest.approx(2.776 * pooled / math.log(2), rel=1e-3)
    assert half[8] == pytest.approx(2.776 * pooled / math.log(8), rel=1e-3)
    assert math.isnan(half[1])
    assert _verdicts(runs) == {1: "baseline", 2: "inconclusive", 4: "inconclusive", 8: "queueing"}


@pytest.mark.parametrize(("drift", "verdict"), [(1.04, "mixed"), (1.08, "inconclusive")])
def test_a_verdict_whose_interval_crosses_a_threshold_is_inconclusive(drift, verdict):
    # both repeats read e = 0.5 exactly (level 2 is 2**0.5 times level 1 in each repeat), but the
    # host ran `drift` times slower in the second repeat. ln u spreads by ln(drift) in both levels:
    # s = ln(drift) / sqrt(2) (df 2), half-width t(0.975, 2) s / ln 2 = 4.303 s / 0.693: 0.17 at
    # 4% (0.33-0.67, mixed), 0.34 at 8% (0.16-0.84: both thresholds inside)
    u = {1: [10.0, 10.0 * drift], 2: [10 * 2**0.5, 10 * 2**0.5 * drift]}
    tok = {1: [100.0, 100.0 / drift], 2: [141.0, 141.0 / drift]}
    assert _verdicts(_runs(u, tok))[2] == verdict


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


def _pass(ms_per_token: dict[int, float]) -> SweepResult:
    """One closed-loop pass over the levels (one repeat each), as a sweep with ``repeats=1`` returns it."""
    runs = _runs({k: [u] for k, u in ms_per_token.items()}, {k: [100.0] for k in ms_per_token})
    lanes = pd.DataFrame(columns=["in_flight", "rate_rps", "outcome", "repeat"])
    return from_runs(lanes, runs, closed_loop=True, params={"limits": list(ms_per_token), "rates": []}, stopped="")


def test_passes_spread_over_a_run_carry_the_drift_between_them_into_the_verdict():
    # A server with elasticity 0.8 at every level, its host 10% slower for the second pass, minutes
    # later. Two repeats back to back agree to 1%: s = ln(1.01) / sqrt(2) (df 4) and the half-width at
    # 2 in flight is 2.776 s / ln 2 = 0.03, so 0.8 reads queueing. The two passes combined: s =
    # ln(1.1) / sqrt(2) = 0.0674, half-widths 2.776 s / ln x: 0.27 at 2 and 0.135 at 4 (both cross
    # 0.7: inconclusive) and 0.09 at 8 (0.71 > 0.7: queueing).
    first = {x: 10.0 * x**0.8 for x in (1, 2, 4, 8)}
    back_to_back = _runs({x: [u, u * 1.01] for x, u in first.items()}, {x: [100.0, 99.0] for x in first})
    assert _verdicts(back_to_back) == {1: "baseline", 2: "queueing", 4: "queueing", 8: "queueing"}
    combined = combine_passes([_pass(first), _pass({x: u * 1.1 for x, u in first.items()})])
    assert combined.runs["repeat"].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert combined.levels["repeats"].tolist() == [2, 2, 2, 2]
    s = math.log(1.1) / math.sqrt(2)
    half = dict(zip(combined.levels["in_flight"], combined.levels["elasticity_ci95"]))
    for x in (2, 4, 8):
        assert half[x] == pytest.approx(stats.t.ppf(0.975, 4) * s / math.log(x), rel=1e-6), x
    assert combined.levels["elasticity"].tolist()[1:] == pytest.approx([0.8, 0.8, 0.8])
    verdicts = dict(zip(combined.levels["in_flight"], combined.levels["verdict"]))
    assert verdicts == {1: "baseline", 2: "inconclusive", 4: "inconclusive", 8: "queueing"}
    with pytest.raises(ValueError, match="same parameters"):
        combine_passes([_pass(first), _pass({1: 10.0, 2: 17.0})])

"""The sweep's verdict says "inconclusive" where its repeats cannot support a reading."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from toolkit._sweep import verdict_interval
from toolkit._sweep.levels import RUN_COLUMNS, _inconclusive, aggregate, disagree
from toolkit._sweep.result import SweepResult, combine_passes, from_runs


@pytest.fixture
def no_between_runs(monkeypatch):
    """The verdict's interval from the run's own repeats alone (no spread between runs)."""
    monkeypatch.setattr(verdict_interval, "between_runs_sd", lambda: (0.0, 8))


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


def test_repeats_on_both_sides_of_a_threshold_are_inconclusive(no_between_runs):
    # at 4 in flight: 4**0.65 and 4**0.75 times the 10 ms of level 1 -> elasticities 0.65 and 0.75,
    # mixed in one repeat and queueing in the other; at 2, 0.10 and 0.12; at 8, 0.90 and 0.92. The
    # repeats' elasticities spread by 0.02, 0.10 and 0.02 over the pairs: pooled s = sqrt((0.02**2 +
    # 0.1**2 + 0.02**2) / 2 / 3) = 0.04243 (df 3), half-width t(0.975, 3) s / sqrt(2) = 3.182 *
    # 0.04243 / 1.414 = 0.0955 at every level. Level 2 (e = log2(mean(2**0.1, 2**0.12)) = 0.110)
    # reads batching (0.205 < 0.3), level 8 (0.910) queueing (0.815 > 0.7), level 4 inconclusive.
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
    pooled = math.sqrt((0.02**2 + 0.1**2 + 0.02**2) / 2 / 3)
    assert pooled == pytest.approx(0.04243, abs=1e-5)
    for x in (2, 4, 8):
        assert half[x] == pytest.approx(3.182 * pooled / math.sqrt(2), rel=1e-3), x
    assert math.isnan(half[1])
    assert _verdicts(runs) == {1: "baseline", 2: "batching", 4: "inconclusive", 8: "queueing"}


@pytest.mark.parametrize(("spread", "verdict"), [(0.01, "mixed"), (0.05, "inconclusive")])
def test_a_verdict_whose_interval_crosses_a_threshold_is_inconclusive(no_between_runs, spread, verdict):
    # the repeats read e = 0.5 - spread and 0.5 + spread at 2 in flight, the only level compared:
    # s = spread * sqrt(2) (df 1), half-width t(0.975, 1) s / sqrt(2) = 12.71 spread: 0.13 at 0.01
    # (0.37-0.63, mixed), 0.64 at 0.05 (both thresholds inside; the repeats alone, 0.45-0.55, are not)
    u = {1: [10.0, 10.0], 2: [10 * 2 ** (0.5 - spread), 10 * 2 ** (0.5 + spread)]}
    tok = {1: [100.0, 100.0], 2: [141.0, 141.0]}
    assert _verdicts(_runs(u, tok))[2] == verdict


def test_the_spread_between_runs_widens_every_interval(monkeypatch):
    # repeats 0.49 and 0.51 at 2 in flight: within-run standard error 0.01 (s = 0.01 sqrt(2), n = 2,
    # df 1). With a between-run tau of 0.02 (8 df): variance 0.0001 + 0.0004 = 0.0005, Welch-
    # Satterthwaite nu = 0.0005**2 / (0.0001**2 / 1 + 0.0004**2 / 8) = 8.33, half-width
    # t(0.975, 8.33) sqrt(0.0005) = 0.0512, narrower than the 12.71 * 0.01 = 0.127 of the run alone
    # (one degree of freedom is a wide t), wider than tau's own 2.306 * 0.02 = 0.046.
    monkeypatch.setattr(verdict_interval, "between_runs_sd", lambda: (0.02, 8))
    u = {1: [10.0, 10.0], 2: [10 * 2**0.49, 10 * 2**0.51]}
    runs = _runs(u, {1: [100.0, 100.0], 2: [141.0, 141.0]})
    levels = aggregate(runs, pd.DataFrame(columns=["in_flight", "rate_rps", "outcome"]), closed_loop=True)
    nu = 0.0005**2 / (0.0001**2 + 0.0004**2 / 8)
    assert nu == pytest.approx(8.333, abs=1e-3)
    assert levels["elasticity_ci95"].iloc[1] == pytest.approx(stats.t.ppf(0.975, nu) * math.sqrt(0.0005), rel=1e-6)
    # two passes that agree exactly still carry the spread between runs: t(0.975, 8) * tau
    same = _runs({1: [10.0, 10.0], 2: [10 * 2**0.68, 10 * 2**0.68]}, {1: [100.0, 100.0], 2: [141.0, 141.0]})
    levels = aggregate(same, pd.DataFrame(columns=["in_flight", "rate_rps", "outcome"]), closed_loop=True)
    assert levels["elasticity_ci95"].iloc[1] == pytest.approx(2.306 * 0.02, rel=1e-3)
    assert levels["verdict"].iloc[1] == "inconclusive"  # 0.68 + 0.046 crosses 0.7


def test_dersimonian_laird_by_hand():
    # one group, y = 0 and 2 with standard errors 1 and 0.5: w = 1 and 4, weighted mean 1.6,
    # Q = 1 * 1.6**2 + 4 * 0.4**2 = 3.2, C = 5 - 17 / 5 = 1.6, tau2 = (3.2 - 1) / 1.6 = 1.375
    tau2 = verdict_interval.dersimonian_laird_tau2(np.array([0.0, 2.0]), np.array([1.0, 0.5]), np.array([2, 2]))
    assert tau2 == pytest.approx(1.375)
    # a second group, y = 5 and 5: Q adds 0, C adds 1 - 2 / 2... with w = 1 and 1: C adds 2 - 2 / 2 = 1,
    # one more degree of freedom: (3.2 - 2) / 2.6 = 0.4615; its own mean, so 5 is not "far" from 0-2
    tau2 = verdict_interval.dersimonian_laird_tau2(
        np.array([0.0, 2.0, 5.0, 5.0]), np.array([1.0, 0.5, 1.0, 1.0]), np.array([2, 2, 4, 4])
    )
    assert tau2 == pytest.approx(1.2 / 2.6)
    # runs that agree within their errors: no between-run spread
    assert verdict_interval.dersimonian_laird_tau2(np.array([0.0, 1.0]), np.array([1.0, 1.0]), np.array([2, 2])) == 0.0


def test_a_noisy_level_is_inconclusive_whatever_its_elasticity():
    # both repeats read batching at 2 in flight, but their throughputs are 150 and 200 tokens/s:
    # a standard deviation of 50 / sqrt(2) = 35.4, 20% of their median 175 (> 18%)
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
    # sample standard deviations by hand: |a - b| / sqrt(2) for two values (12.7 of 109, 21.2 of 115);
    # [80, 100, 110]: mean 96.7, squared deviations 277.8 + 11.1 + 177.8 over 2, sd 15.3 of 100;
    # [80, 100, 120]: sd 20 of 100
    [
        ([100, 118], False),
        ([100, 130], True),
        ([100], False),
        ([100, math.nan], False),
        ([80, 100, 110], False),
        ([80, 100, 120], True),
    ],
)
def test_disagree_is_a_standard_deviation_above_18_percent_of_the_median(values, noisy):
    assert disagree(pd.Series(values, dtype=float)) is noisy


def test_disagree_does_not_grow_stricter_with_more_repeats():
    # steady repeats (a true 8% spread): (n - 1) s^2 / sigma^2 is chi-square with n - 1 degrees of
    # freedom, so a share chi2.sf((n - 1) (0.18 / 0.08)^2, n - 1) of them reads noisy: 2.4% of pairs,
    # 0.6% of triples, none of twenty. A spread (max - min) over 25%, the rule before, reads 3% of
    # pairs and 80% of sets of twenty.
    rng = np.random.default_rng(5)
    for n in (2, 3, 20):
        expected = stats.chi2.sf((n - 1) * (0.18 / 0.08) ** 2, n - 1)
        flagged = np.mean([disagree(pd.Series(1000 * (1 + 0.08 * rng.standard_normal(n)))) for _ in range(4000)])
        assert flagged == pytest.approx(expected, abs=0.01), n
    # and where the repeats do disagree (a 40% standard deviation) most sets read noisy, whatever their
    # number: 82% of triples (chi2.sf(2 (0.18 / 0.4)^2, 2)), all sets of twenty
    for n in (3, 20):
        assert np.mean([disagree(pd.Series(1000 * (1 + 0.4 * rng.standard_normal(n)))) for _ in range(400)]) > 0.7


def _pass(ms_per_token: dict[int, float]) -> SweepResult:
    """One closed-loop pass over the levels (one repeat each), as a sweep with ``repeats=1`` returns it."""
    runs = _runs({k: [u] for k, u in ms_per_token.items()}, {k: [100.0] for k in ms_per_token})
    lanes = pd.DataFrame(columns=["in_flight", "rate_rps", "outcome", "repeat"])
    return from_runs(lanes, runs, closed_loop=True, params={"limits": list(ms_per_token), "rates": []}, stopped="")


def test_a_pass_slower_between_its_levels_widens_the_verdict_a_whole_pass_slower_does_not(no_between_runs):
    # A server with elasticity 0.8 at every level. A second pass whose host is 10% slower throughout
    # has the same elasticities (the slowdown cancels against its own first level): half-width 0,
    # queueing everywhere. A second pass whose host slowed by 10% after its first level reads
    # 0.8 + ln(1.1) / ln x: 0.9375, 0.8688, 0.8458 at 2, 4, 8, so the repeats spread by those minus
    # 0.8: s = sqrt((0.1375**2 + 0.0688**2 + 0.0458**2) / 2 / 3) = 0.0655 (df 3), half-width
    # 3.182 s / sqrt(2) = 0.1474. The levels' elasticities (from the mean lane time) are
    # 0.8 + ln(1.05) / ln x = 0.870, 0.835, 0.823: queueing at 2 (0.723 > 0.7), inconclusive at 4
    # and 8.
    first = {x: 10.0 * x**0.8 for x in (1, 2, 4, 8)}
    uniform = combine_passes([_pass(first), _pass({x: u * 1.1 for x, u in first.items()})])
    assert uniform.runs["repeat"].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert uniform.levels["repeats"].tolist() == [2, 2, 2, 2]
    assert uniform.levels["elasticity_ci95"].tolist()[1:] == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    assert uniform.levels["verdict"].tolist() == ["baseline", "queueing", "queueing", "queueing"]
    slowed = combine_passes([_pass(first), _pass({x: u * (1.1 if x > 1 else 1.0) for x, u in first.items()})])
    s = math.sqrt(sum((math.log(1.1) / math.log(x)) ** 2 for x in (2, 4, 8)) / 2 / 3)
    assert s == pytest.approx(0.0655, abs=1e-4)
    half = dict(zip(slowed.levels["in_flight"], slowed.levels["elasticity_ci95"]))
    for x in (2, 4, 8):
        assert half[x] == pytest.approx(stats.t.ppf(0.975, 3) * s / math.sqrt(2), rel=1e-6), x
    assert slowed.levels["elasticity"].tolist()[1:] == pytest.approx(
        [0.8 + math.log(1.05) / math.log(x) for x in (2, 4, 8)]
    )
    verdicts = dict(zip(slowed.levels["in_flight"], slowed.levels["verdict"]))
    assert verdicts == {1: "baseline", 2: "queueing", 4: "inconclusive", 8: "inconclusive"}
    with pytest.raises(ValueError, match="same parameters"):
        combine_passes([_pass(first), _pass({1: 10.0, 2: 17.0})])

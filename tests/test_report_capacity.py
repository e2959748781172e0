"""The report's "Capacity at the SLO" section: the resolved percentile by hand, the error, every step in
capacity.csv, the chart's SLO lines and the sentence the conclusion carries."""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._report.capacity import (
    CSV,
    PAIRED,
    STRICT,
    CapacityRun,
    capacity_error,
    capacity_steps,
    resolved_percentile,
    search_spread_rps,
)
from toolkit._report.capacity_section import capacity_chart, capacity_section, capacity_sentence


class FixedStep:
    """A cost model whose every step takes ``ms``: one request at a time is an M/D/1 queue."""

    def __init__(self, ms: float):
        self.ms, self.kv_budget_tokens, self.request_overhead_ms = ms, 10**7, 0.0

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        kv = np.asarray(kv_tokens, dtype=float)
        return self.ms + 0.0 * kv if kv.ndim else self.ms


def test_resolved_percentile_is_the_median_of_the_order_statistic_read():
    # the p99 of 30 requests is their slowest: P(max <= x) = F(x)^30 = 1/2 at F = 2^(-1/30)
    assert resolved_percentile(99, 30) == pytest.approx(100 * 0.5 ** (1 / 30))
    # the median of 3 is their 2nd, whose median is the distribution's median by symmetry
    assert resolved_percentile(50, 3) == pytest.approx(50)
    # the p99 of 1000 is their 990th: Beta(990, 11), median within a few hundredths of 98.95
    assert resolved_percentile(99, 1000) == pytest.approx(98.95, abs=0.05)


def _search(ms: float, percentile: float, *, min_requests: int = 300, seed: int = 0):
    # one-token answers on fixed steps: one request at a time, an M/D/1 queue
    return toolkit.predict_capacity(
        cost=FixedStep(ms), max_batch=1, slo_ttft_ms=200, slo_tpot_ms=50, percentile=percentile,
        prompt_tokens=1, output_tokens=1, min_requests=min_requests, rel_tolerance=0.05, repeats=1, seed=seed,
    )  # fmt: skip


def _run(measured_ms: float, predicted_ms: float) -> CapacityRun:
    # the "measured" search is a simulated slower server; its design on its own seed predicts it, and
    # three runs with other seeds give the spread
    replicated = [_search(predicted_ms, 99, seed=(r + 1) * 2**32).summary["capacity_rps"].iloc[0] for r in range(3)]
    return CapacityRun(
        measured=_search(measured_ms, 99),
        paired=_search(predicted_ms, 99),
        predicted=_search(predicted_ms, 97.7),
        predicted_strict=_search(predicted_ms, 99),
        slos_ms={"ttft": 200.0, "tpot": 50.0},
        unloaded_ms={"ttft": 50.0, "tpot": 5.0},
        replicated_rps=tuple(float(r) for r in replicated),
    )


def test_a_search_of_short_steps_from_an_idle_server_finds_more_than_the_steady_state():
    # 50 ms deterministic service, TTFT p99 within 200 ms: at steady state the p97.7 a 30-request step
    # resolves meets the SLO up to the closed form's rate; a step of 30 from an empty queue has not
    # reached that state, so the median of such searches lies well above it
    from test_capacity import md1_capacity

    steady = md1_capacity(0.200, resolved_percentile(99, 30) / 100, 0.050, 0.050)
    short = [_search(50, 99, min_requests=30, seed=(r + 1) * 2**32).summary["capacity_rps"].iloc[0] for r in range(21)]
    assert np.median(short) > 1.1 * steady
    cap = _run(50, 50)
    median, low, high = search_spread_rps(cap)
    assert median == pytest.approx(np.median(cap.replicated_rps)) and low <= median <= high
    # the same server on the same seed is the same search: the paired prediction equals the measurement
    assert capacity_error(cap) == 0


def test_a_predicted_search_stops_where_its_budget_would_stop_a_measured_one():
    # near-regular arrivals (gamma, ca2 1e-8) on a 50 ms deterministic service below 20 req/s: each
    # request is answered 50 ms after it arrives, so a step of n = 34 requests (30 measured, 4 warm-up)
    # at rate r has its last arrival at (n - 1) / r and its last answer 0.05 s later; the drain for a
    # 200 ms TTFT and one-token answers is its floor, 2 s; every step also counts its 2 s set-up
    from toolkit._capacity.spec import STEP_SETUP_S

    n, drain = 34, 2.0
    after_two = sum((n - 1) / r + 0.05 + STEP_SETUP_S for r in (1.0, 2.0))
    third_needs = after_two + (n - 1) / 4.0 + drain + STEP_SETUP_S
    for budget, steps in ((third_needs - 0.05, 2), (third_needs + 0.05, 3)):
        result = toolkit.predict_capacity(
            cost=FixedStep(50), max_batch=1, slo_ttft_ms=200, percentile=99, prompt_tokens=1, output_tokens=1,
            arrivals="gamma", ca2=1e-8, min_requests=30, rel_tolerance=0.05, repeats=1, rate_low_rps=1.0,
            budget_s=budget,
        )  # fmt: skip
        s = result.summary.iloc[0]
        assert len(result.steps) == steps and s["stopped_early"] and s["budget_s"] == budget
        assert list(result.steps["rate_rps"]) == [1.0, 2.0, 4.0][:steps] and s["capacity_rps"] == 2.0 ** (steps - 1)
    with pytest.raises(ValueError, match="budget_s"):
        toolkit.predict_capacity(cost=FixedStep(50), max_batch=1, slo_ttft_ms=200, budget_s=0)


def test_the_section_writes_every_step_and_states_measured_against_predicted(tmp_path):
    cap = _run(50, 40)
    measured = cap.measured.summary.iloc[0]["capacity_rps"]
    predicted = float(cap.paired.summary.iloc[0]["capacity_rps"])
    # a deterministic 40 ms service sustains more than a 50 ms one: the error is positive, by hand
    assert predicted > measured and capacity_error(cap) == pytest.approx(predicted / measured - 1)
    section = capacity_section(cap, tmp_path)
    written = pd.read_csv(tmp_path / CSV)
    counts = written["source"].value_counts().to_dict()
    assert counts == {"measured": len(cap.measured.steps), PAIRED: len(cap.paired.steps),
                      "predicted": len(cap.predicted.steps), STRICT: len(cap.predicted_strict.steps)}  # fmt: skip
    assert set(written.loc[written["source"].eq("predicted"), "percentile"]) == {97.7}
    assert written["ttft_q_ms"].notna().all() and "ttft_p99_ms" not in written
    assert (tmp_path / "capacity.png").stat().st_size > 0 and section.title == "Capacity at the SLO"
    sentence = capacity_sentence(cap)
    assert f"measured {measured:.3g} req/s" in sentence and f"predicted {predicted:.3g} req/s" in sentence
    assert f"{capacity_error(cap):+.0%}: outside 15%" in sentence and "TTFT binds first" in sentence
    assert html.escape(sentence) in section.body
    # from a busy host the trust check presents no fit: the prediction is shown, not judged
    busy = capacity_sentence(cap, refused="Measured on a busy host: ...")
    assert "indicative only" in busy and "15%" not in busy and f"predicted {predicted:.3g} req/s" in busy
    assert html.escape(busy) in capacity_section(cap, tmp_path, refused="Measured on a busy host: ...").body


def test_the_chart_draws_each_slo_as_a_rule_on_its_metrics_panel():
    cap = _run(40, 40)
    spec = capacity_chart(capacity_steps(cap), cap.slos_ms).to_dict()
    rules = []
    for panel in spec["hconcat"]:
        for layer in panel["layer"]:
            if layer["mark"]["type"] == "rule":
                rules.append(spec["datasets"][layer["data"]["name"]][0]["slo"])
    assert rules == [200.0, 50.0]
    assert [panel["title"] for panel in spec["hconcat"]] == ["TTFT: SLO 200 ms", "TPOT: SLO 50 ms"]


def test_no_rate_passing_is_said_and_gives_no_error():
    cap = _run(400, 40)  # a 400 ms service cannot meet a 200 ms TTFT at any rate
    assert math.isnan(cap.measured.summary.iloc[0]["capacity_rps"]) and math.isnan(capacity_error(cap))
    assert "no rate passed" in capacity_sentence(cap)


def test_a_report_with_a_capacity_search_shows_it_and_says_it_in_the_conclusion(tmp_path, monkeypatch):
    from toolkit._report import build, measure

    cap = _run(50, 40)
    recorded = measure._recorded_run

    def with_capacity():
        run = recorded()
        run.capacity = cap
        return run

    monkeypatch.setattr(build, "_recorded_run", with_capacity)
    index = toolkit.build_report(tmp_path / "r", recorded=True, execute_notebooks=False, progress=False)
    page = index.read_text()
    assert "Capacity at the SLO" in page and 'data-chart="capacity"' in page
    conclusion = (tmp_path / "r" / "conclusion.txt").read_text()
    assert capacity_sentence(cap) in conclusion
    written = pd.read_csv(tmp_path / "r" / CSV)
    searches = (cap.measured, cap.paired, cap.predicted, cap.predicted_strict)
    assert len(written) == sum(len(result.steps) for result in searches)


def test_a_bracket_wider_than_the_agreement_band_is_said_with_where_the_prediction_lies():
    cap = _run(50, 40)
    m = cap.measured.summary
    m.loc[0, "failed_rps"] = 2 * m.loc[0, "capacity_rps"]  # a coarse search: a bracket of 2x
    predicted = float(cap.paired.summary.iloc[0]["capacity_rps"])
    inside = m.loc[0, "capacity_rps"] <= predicted <= m.loc[0, "failed_rps"]
    sentence = capacity_sentence(cap)
    assert "cannot resolve 15%" in sentence
    assert f"the prediction lies {'inside' if inside else 'outside'} it" in sentence

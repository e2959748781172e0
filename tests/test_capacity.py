"""Capacity at an SLO: the search against fake steps, the percentile rule by hand, the prediction and a
measurement against M/D/1 queues whose capacity the closed form gives, and a server that degrades."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from queue_server import QueueServer
from scipy import optimize

import toolkit
from toolkit._capacity.rule import percentile_with_bounds, rule_requests
from toolkit._capacity.search import search

# --- M/D/1 by hand ---------------------------------------------------------------------------------


def md1_wait_cdf(x: float, rate: float, service: float) -> float:
    """Erlang's M/D/1 waiting-time distribution: P(W <= x) = (1 - rho) sum_{k=0}^{floor(x/D)}
    e^{lambda (x - kD)} (lambda (kD - x))^k / k!. Its alternating terms lose precision past ~15 D."""
    total = 0.0
    for k in range(int(math.floor(x / service)) + 1):
        u = rate * (k * service - x)
        total += math.exp(-u) * u**k / math.factorial(k)
    return (1 - rate * service) * total


def md1_wait_quantile(q: float, rate: float, service: float) -> float:
    if md1_wait_cdf(0.0, rate, service) >= q:
        return 0.0
    return optimize.brentq(lambda x: md1_wait_cdf(x, rate, service) - q, 0.0, 15 * service)


def md1_capacity(slo_s: float, q: float, service: float, fixed_s: float) -> float:
    """The arrival rate at which the ``q`` quantile of wait + ``fixed_s`` equals ``slo_s``."""
    return optimize.brentq(
        lambda rate: md1_wait_quantile(q, rate, service) + fixed_s - slo_s, 0.3 / service, 0.85 / service
    )


def test_md1_formula_matches_a_lindley_recursion():
    # the reference itself, against the textbook FIFO recursion W' = max(0, W + D - gap)
    rng = np.random.default_rng(3)
    rate, service = 20.0, 0.04
    gaps = rng.exponential(1 / rate, 400_000)
    w, waits = 0.0, np.empty(gaps.size)
    for i, gap in enumerate(gaps):
        waits[i] = w
        w = max(0.0, w + service - gap)
    assert np.percentile(waits, 99) == pytest.approx(md1_wait_quantile(0.99, rate, service), rel=0.03)


# --- the percentile rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("percentile", [99, 95, 90])
def test_rule_is_the_smallest_count_whose_upper_bound_is_below_the_slowest(percentile):
    tail = 1 - percentile / 100

    def two_or_more_above(n: int) -> float:  # P(Binomial(n, tail) >= 2), by hand
        return 1 - (1 - tail) ** n - n * tail * (1 - tail) ** (n - 1)

    n = next(k for k in range(2, 10_000) if two_or_more_above(k) >= 0.95)
    assert rule_requests(percentile) == max(n, 30)
    assert rule_requests(99) == 473


def test_percentile_and_its_bounds_are_order_statistics():
    values = np.arange(1.0, 1001.0)  # the k-th smallest is k
    point, low, high = percentile_with_bounds(values, 99)
    assert point == 990  # rank ceil(0.99 * 1000)

    def cdf(k: int) -> float:  # P(Binomial(1000, 0.99) <= k)
        return sum(math.comb(1000, j) * 0.99**j * 0.01 ** (1000 - j) for j in range(k + 1))

    # low: the rank l with P(B <= l - 1) <= 2.5% < P(B <= l); high: P(B <= h - 1) >= 97.5% > P(B <= h - 2)
    assert cdf(int(low) - 1) <= 0.025 < cdf(int(low))
    assert cdf(int(high) - 1) >= 0.975 > cdf(int(high) - 2)
    assert percentile_with_bounds(np.array([1.0, 2.0, math.inf]), 99)[0] == math.inf


# --- the search, against fake steps ----------------------------------------------------------------


def fake(threshold: float, calls: list | None = None):
    def measure(rate, phase):
        if calls is not None:
            calls.append((rate, phase))
        return {"passed": rate <= threshold}

    return measure


def test_search_brackets_by_doubling_then_bisects_within_the_tolerance():
    out = search(fake(37.0), rate_low_rps=10, rate_high_rps=None, rel_tolerance=0.05, repeats=2)
    rates = [r["rate_rps"] for r in out.rows]
    assert rates[:3] == [10, 20, 40]
    assert out.capacity_rps <= 37.0 < out.failed_rps <= out.capacity_rps * 1.05
    lo, hi = 20.0, 40.0
    for row in out.rows[3:]:  # every bisection step lies inside the bracket of its time
        if row["phase"] == "bisect":
            assert lo < row["rate_rps"] < hi
            lo, hi = (row["rate_rps"], hi) if row["passed"] else (lo, row["rate_rps"])
    at_capacity = [r for r in out.rows if r["rate_rps"] == out.capacity_rps]
    assert len(at_capacity) == 2 and all(r["passed"] for r in at_capacity)
    assert out.rows[-1]["phase"] == "repeat" and not out.stopped_early


def test_search_halves_when_the_first_rate_fails_and_stops_when_none_passes():
    out = search(fake(3.0), rate_low_rps=10, rate_high_rps=None, rel_tolerance=0.1, repeats=1)
    assert [r["rate_rps"] for r in out.rows][:3] == [10, 5, 2.5]
    assert 2.5 <= out.capacity_rps <= 3.0 < out.failed_rps <= 5
    none = search(fake(-1.0), rate_low_rps=10, rate_high_rps=None, rel_tolerance=0.1, repeats=1)
    assert math.isnan(none.capacity_rps) and none.failed_rps == 10 / 64
    assert len(none.rows) == 7 and "no rate passed" in none.reason


def test_search_stops_at_rate_high_when_it_passes():
    out = search(fake(1e9), rate_low_rps=10, rate_high_rps=50, rel_tolerance=0.1, repeats=3)
    assert [r["rate_rps"] for r in out.rows] == [10, 20, 40, 50, 50, 50]
    assert out.capacity_rps == 50 and math.isnan(out.failed_rps) and "at least" in out.reason


def test_a_failed_confirmation_moves_the_bracket_below_it():
    seen = {"repeats": 0}

    def flaky(rate, phase):  # the first confirmation fails, whatever the rate
        if phase == "repeat":
            seen["repeats"] += 1
            if seen["repeats"] == 1:
                seen["rate"] = rate
                return {"passed": False}
        return {"passed": rate <= 37.0}

    out = search(flaky, rate_low_rps=10, rate_high_rps=None, rel_tolerance=0.05, repeats=2)
    assert out.capacity_rps < seen["rate"] and out.failed_rps <= seen["rate"]
    assert all(r["passed"] for r in out.rows if r["rate_rps"] == out.capacity_rps)


def test_a_spent_budget_keeps_every_step_measured():
    calls = []
    limit = fake(37.0, calls)

    def budgeted(rate, phase):
        return None if len(calls) >= 4 else limit(rate, phase)

    out = search(budgeted, rate_low_rps=10, rate_high_rps=None, rel_tolerance=0.05, repeats=2)
    assert out.stopped_early and "budget_s" in out.reason
    assert [r["rate_rps"] for r in out.rows] == [rate for rate, _ in calls] and len(out.rows) == 4
    passing = [r["rate_rps"] for r in out.rows if r["passed"]]
    failing = [r["rate_rps"] for r in out.rows if not r["passed"]]
    assert out.capacity_rps == max(passing) and out.failed_rps == min(failing)


def test_find_capacity_within_a_budget_too_short_for_a_step_measures_nothing():
    # the rule's 473 requests at 1 req/s cannot fit in 5 s: no request is sent (nothing listens there)
    result = toolkit.find_capacity("http://127.0.0.1:9", slo_ttft_ms=100, budget_s=5, progress=False)
    s = result.summary.iloc[0]
    assert s["stopped_early"] and len(result.steps) == 0 and math.isnan(s["capacity_rps"])
    assert s["wall_s"] < 5 and any("stopped early" in w for w in result.warnings)


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({}, "slo_ttft_ms"),
        ({"slo_ttft_ms": -1}, "slo_ttft_ms"),
        ({"slo_ttft_ms": 100, "percentile": 100}, "percentile"),
        ({"slo_ttft_ms": 100, "percentile": 10}, "percentile"),
        ({"slo_ttft_ms": 100, "min_requests": 5}, "min_requests"),
        ({"slo_ttft_ms": 100, "rate_low_rps": 0}, "rate_low_rps"),
        ({"slo_ttft_ms": 100, "rate_low_rps": 5, "rate_high_rps": 5}, "rate_high_rps"),
        ({"slo_ttft_ms": 100, "rel_tolerance": 0}, "rel_tolerance"),
        ({"slo_ttft_ms": 100, "repeats": 0}, "repeats"),
        ({"slo_ttft_ms": 100, "arrivals": "uniform"}, "arrivals"),
        ({"slo_ttft_ms": 100, "output_tokens": 0}, "output_tokens"),
        (
            {
                "slo_tpot_ms": 100,
                "prompt_tokens": 8,
                "trace": pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [1, 1], "output_tokens": [1, 1]}),
            },
            "not both",
        ),  # fmt: skip
    ],
)
def test_bad_input_names_the_argument(kwargs, names):
    with pytest.raises(ValueError, match=names):
        toolkit.find_capacity("http://127.0.0.1:9", **kwargs)
    with pytest.raises(ValueError, match=names):
        toolkit.predict_capacity(cost=FixedStep(10), **kwargs)


def test_find_capacity_refuses_a_bad_budget_and_two_targets():
    with pytest.raises(ValueError, match="budget_s"):
        toolkit.find_capacity("http://127.0.0.1:9", slo_ttft_ms=100, budget_s=0)
    with pytest.raises(ValueError, match="not both"):
        toolkit.find_capacity("http://127.0.0.1:9", server=QueueServer(service_ms=1), slo_ttft_ms=100)


# --- the prediction against M/D/1 ------------------------------------------------------------------


class FixedStep:
    """A cost object whose every engine step takes ``ms``: with max_batch=1 a request of one prompt
    token and ``n`` output tokens holds the engine for exactly ``n`` steps (prefill, then decodes)."""

    def __init__(self, ms: float):
        self.ms, self.kv_budget_tokens, self.request_overhead_ms = ms, 10**7, 0.0

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        kv = np.asarray(kv_tokens, dtype=float)
        return self.ms + 0.0 * kv if kv.ndim else self.ms


@pytest.mark.parametrize("percentile", [99, 90])
def test_predicted_capacity_of_an_md1_server_matches_the_closed_form(percentile):
    # one-token answers: service D = 40 ms, TTFT = wait + D
    expected = md1_capacity(0.2, percentile / 100, 0.04, 0.04)
    result = toolkit.predict_capacity(
        cost=FixedStep(40), max_batch=1, slo_ttft_ms=200, percentile=percentile, prompt_tokens=1, output_tokens=1
    )
    s = result.summary.iloc[0]
    assert s["capacity_rps"] == pytest.approx(expected, rel=0.07)
    assert s["capacity_rps"] < s["failed_rps"] <= s["capacity_rps"] * 1.02 + 1e-9
    assert s["binding_slo"] == "ttft" and s["ttft_alone_rps"] == s["capacity_rps"]
    assert math.isnan(s["tpot_alone_rps"]) and not s["stopped_early"]


def test_prediction_gives_each_slo_alone_and_the_one_that_binds():
    # two-token answers on 20 ms steps: service 40 ms, TTFT = wait + 20 ms, E2E = wait + 40 ms
    result = toolkit.predict_capacity(
        cost=FixedStep(20), max_batch=1, slo_ttft_ms=200, slo_e2e_ms=200, prompt_tokens=1, output_tokens=2
    )
    s = result.summary.iloc[0]
    assert s["ttft_alone_rps"] == pytest.approx(md1_capacity(0.2, 0.99, 0.04, 0.02), rel=0.07)
    assert s["e2e_alone_rps"] == pytest.approx(md1_capacity(0.2, 0.99, 0.04, 0.04), rel=0.07)
    assert s["binding_slo"] == "e2e" and s["capacity_rps"] == pytest.approx(s["e2e_alone_rps"], rel=0.05)
    again = toolkit.predict_capacity(
        cost=FixedStep(20), max_batch=1, slo_ttft_ms=200, slo_e2e_ms=200, prompt_tokens=1, output_tokens=2
    )
    pd.testing.assert_frame_equal(result.steps.drop(columns="wall_s"), again.steps.drop(columns="wall_s"))


def test_cached_tokens_and_prefill_breaks_reach_the_simulator():
    # a chunk break at position 1 runs an uncached prompt's first token in a step of its own: service
    # two 20 ms steps; with that token cached, one step
    common = dict(cost=FixedStep(20), max_batch=1, slo_ttft_ms=200, prompt_tokens=4, output_tokens=1,
                  prefill_start_breaks=(1,))  # fmt: skip
    cut = toolkit.predict_capacity(**common).summary.iloc[0]["capacity_rps"]
    cached = toolkit.predict_capacity(**common, cached_tokens=1).summary.iloc[0]["capacity_rps"]
    assert cut == pytest.approx(md1_capacity(0.2, 0.99, 0.04, 0.04), rel=0.07)
    assert cached == pytest.approx(md1_capacity(0.2, 0.99, 0.02, 0.02), rel=0.07)
    with pytest.raises(ValueError, match="cached_tokens"):
        toolkit.predict_capacity(**common, cached_tokens=-1)


def test_an_overloaded_simulated_step_fails_as_unstable_with_its_growth():
    result = toolkit.predict_capacity(
        cost=FixedStep(40), max_batch=1, slo_ttft_ms=200, prompt_tokens=1, output_tokens=1, rate_low_rps=50
    )
    first = result.steps.iloc[0]  # 50 req/s offered to a server of 25: the wait grows ~1 s per s
    assert not first["passed"] and not first["stable"] and first["ttft_growth"] > 0.5
    assert "unstable queue" in first["reason"] and first["clear_fail"]


# --- measured, on a loopback M/D/1 server ----------------------------------------------------------


def test_find_capacity_brackets_an_md1_servers_capacity():
    # 15 ms deterministic service, TTFT p90 within 75 ms: the closed form's capacity is ~50 req/s; 300
    # requests a step, over six times the p90 rule's 46 (with 200, or a faster service for shorter steps,
    # the loopback client's own latency on a busy host moved the answer by more than 10%)
    expected = md1_capacity(0.075, 0.90, 0.015, 0.015)
    with QueueServer(service_ms=15) as server:
        result = toolkit.find_capacity(
            server.base_url, slo_ttft_ms=75, percentile=90, prompt_tokens=8, output_tokens=2, min_requests=300,
            rate_low_rps=30, rel_tolerance=0.1, repeats=2, drain_s=1.0, budget_s=150, progress=False,
        )  # fmt: skip
    s, steps = result.summary.iloc[0], result.steps
    # the bracket (last passing rate, first failing one) holds the closed form's capacity to within 10%
    # at either end; the loopback client shares the server's interpreter and 2 cores, which delays a
    # request's arrival at the queue by a millisecond or two and puts the last passing rate a few
    # percent under the closed form (50.5 against 42.4 to 50.4 over runs)
    assert 0.9 * s["capacity_rps"] <= expected <= 1.1 * s["failed_rps"]
    assert s["capacity_rps"] < s["failed_rps"] <= 1.1 * s["capacity_rps"] + 1e-9
    assert not s["stopped_early"] and s["wall_s"] <= 150
    failed = steps[~steps["passed"]]
    assert len(failed) and failed["failed_metric"].eq("ttft").all() and s["binding_slo"] == "ttft"
    # every step offers its rate: the whole step's arrivals are scaled to it exactly, and its 300 measured
    # requests, the last 300 of 334 arrivals scattered uniformly over that span, take a share of it whose
    # standard deviation is sqrt(0.9 x 0.1 / 334), 1.6%; 8% is five of those, beyond which a step's
    # rate is wrong rather than drawn (at 5% a step at 5.1% failed a full test run)
    assert np.allclose(steps["offered_rps"], steps["rate_rps"], rtol=0.08)


def test_a_server_that_degrades_past_a_load_fails_on_tpot_by_its_margin():
    # tokens every 2 ms, but 40 ms once more than one other answer is streaming: TPOT, not TTFT, fails;
    # 46 requests a step, the p90 rule's minimum
    with QueueServer(service_ms=5, itl_ms=2, degraded_itl_ms=40, degrade_above=1) as server:
        result = toolkit.find_capacity(
            server.base_url, slo_ttft_ms=1000, slo_tpot_ms=20, percentile=90, prompt_tokens=8, output_tokens=6,
            min_requests=46, rate_low_rps=10, rel_tolerance=0.25, repeats=1, drain_s=1.0, budget_s=120,
            progress=False,
        )  # fmt: skip
    s, steps = result.summary.iloc[0], result.steps
    failed = steps[~steps["passed"]]
    assert s["binding_slo"] == "tpot" and len(failed) and failed["failed_metric"].eq("tpot").all()
    assert (failed["ttft_p90_ms"] < 1000).all()
    for _, row in failed.iterrows():
        # the degraded server's 40 ms a token, 20 ms over the SLO: +100% and a little more
        assert 40 <= row["tpot_p90_ms"] < 50 and row["excess"] == pytest.approx(row["tpot_p90_ms"] / 20 - 1)
        assert f"tpot p90 {row['tpot_p90_ms']:.4g} ms > SLO 20 ms (+{row['excess']:.0%})" in row["reason"]


# --- the command line ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--slo-ttft-ms", "100"], "--base-url"),
        (["--predict", "--gpu", "H100 SXM", "--quant", "fp16", "--slo-ttft-ms", "100"], "--model-name"),
        (["--base-url", "http://127.0.0.1:9", "--slo-ttft-ms", "100", "--percentile", "100"], "percentile"),
        (["--base-url", "http://127.0.0.1:9", "--repeats", "2"], "slo_ttft_ms"),
        (["--local", "--base-url", "http://127.0.0.1:9", "--slo-ttft-ms", "100"], "not allowed with"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(args, named):
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "capacity", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], result.stderr


def test_cli_json_predicts_what_the_function_does_and_measures_a_server(capsys):
    from toolkit.__main__ import main

    question = ["--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--prompt-tokens", "512", "--output-tokens", "64"]
    with QueueServer(service_ms=5) as server:
        argv = ["capacity", "--predict", "--model-name", "Llama-3.1-8B", "--gpu", "H100 SXM", "--quant", "fp16",
                "--base-url", server.base_url, "--percentile", "90", "--min-requests", "30", "--rate-low-rps", "20",
                "--rate-high-rps", "40", "--repeats", "1", "--quiet", "--json", *question]  # fmt: skip
        assert main(argv) == 0
        prompts = [r["messages"][0]["content"] for r in server.requests if r.get("stream")]
    assert len(prompts) == 2 * 34 and len(set(prompts)) == len(prompts)  # no step resends another's prompt
    printed = json.loads(capsys.readouterr().out)
    direct = toolkit.predict_capacity(
        "Llama-3.1-8B", "H100 SXM", "fp16", slo_ttft_ms=1000, slo_tpot_ms=60, percentile=90, prompt_tokens=512,
        output_tokens=64, min_requests=30, rate_low_rps=20, rate_high_rps=40, repeats=1,
    )  # fmt: skip
    assert printed["predicted"]["summary"]["capacity_rps"] == pytest.approx(direct.summary["capacity_rps"].iloc[0])
    assert len(printed["predicted"]["steps"]) == len(direct.steps)
    # the loopback server serves 5 ms a request: 20 and then rate_high_rps, 40 req/s, both pass
    measured = printed["measured"]
    assert [s["rate_rps"] for s in measured["steps"]] == [20, 40]
    assert measured["summary"]["capacity_rps"] == 40 and measured["summary"]["failed_rps"] is None
    assert any("30 requests" in w for w in measured["warnings"])  # below the p90 rule's 46


class VanishingServer(QueueServer):
    """A QueueServer whose prompt-length calibration (two unstreamed requests a replay) fails after the
    first replay: the second step cannot start."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calibrations = 0

    async def _chat(self, writer, body):
        if not body.get("stream"):
            self.calibrations += 1
            if self.calibrations > 2:
                await self._send(writer, 500, "{}")
                return
        await super()._chat(writer, body)


def test_a_server_that_stops_answering_ends_the_search_early_keeping_its_steps():
    with VanishingServer(service_ms=2) as server:
        result = toolkit.find_capacity(
            server.base_url, slo_ttft_ms=1000, percentile=90, prompt_tokens=4, output_tokens=2, min_requests=30,
            rate_low_rps=40, drain_s=1.0, budget_s=60, progress=False,
        )  # fmt: skip
    s = result.summary.iloc[0]
    assert s["stopped_early"] and "stopped answering" in s["reason"]
    assert len(result.steps) == 1 and result.steps["passed"].iloc[0] and s["capacity_rps"] == 40


def test_a_trace_is_scaled_to_each_steps_rate_keeping_its_lengths():
    from toolkit._capacity.spec import check_spec, step_trace

    rng = np.random.default_rng(5)
    trace = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 100, 200)),  # 2 req/s over 100 s
            "prompt_tokens": rng.integers(10, 1000, 200),
            "output_tokens": rng.integers(1, 300, 200),
        }
    )
    args = dict(slo_ttft_ms=100, slo_tpot_ms=None, slo_e2e_ms=None, percentile=99, min_requests=None,
                rate_low_rps=1, rate_high_rps=None, rel_tolerance=0.1, repeats=1, prompt_tokens=None,
                output_tokens=None, trace=trace, arrivals="poisson", ca2=1.0, seed=0)  # fmt: skip
    spec = check_spec(args)
    pairs = set(zip(trace["prompt_tokens"], trace["output_tokens"]))
    for rate in (0.5, 7.0):  # thinned, then superposed
        step = step_trace(spec, rate, seed=3)
        assert len(step) == spec.step_requests == 473 + 53
        span = step["arrival_s"].iloc[-1] - step["arrival_s"].iloc[0]
        assert (len(step) - 1) / span == pytest.approx(rate, rel=0.15)
        assert set(zip(step["prompt_tokens"], step["output_tokens"])) <= pairs
    predicted = toolkit.predict_capacity(cost=FixedStep(1), max_batch=8, slo_ttft_ms=500, trace=trace)
    assert predicted.summary["capacity_rps"].iloc[0] > 0


def test_a_traces_cached_tokens_reach_the_simulator():
    # 1,000-token prompts on a cost model charging only for prefilled tokens: a cache hit of 900 of
    # them leaves a tenth of the work, so the predicted capacity grows
    class PrefillCost(FixedStep):
        def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
            return np.asarray(prefill_tokens, dtype=float) * 0.04 + 0.0 * np.asarray(kv_tokens, dtype=float)

    arrival = np.arange(200) * 0.5
    trace = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": 1000, "output_tokens": 1})
    kwargs = dict(cost=PrefillCost(0), max_batch=1, max_num_batched_tokens=1000, slo_ttft_ms=300, percentile=90)
    cold = toolkit.predict_capacity(trace=trace, **kwargs).summary["capacity_rps"].iloc[0]
    warm = toolkit.predict_capacity(trace=trace.assign(cached_tokens=900), **kwargs).summary["capacity_rps"].iloc[0]
    assert warm > 5 * cold


def test_cli_help_is_instant_and_every_option_explained():
    code = (
        "import sys\nfrom toolkit.__main__ import main\ntry:\n    main(['capacity', '--help'])\n"
        "except SystemExit:\n    pass\nprint(sorted(m for m in ('pandas', 'numpy', 'scipy', 'httpx') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "[]", result.stderr
    import argparse

    from toolkit._capacity import cli

    sub = argparse.ArgumentParser().add_subparsers()
    cli.add_cli(sub)
    for action in sub.choices["capacity"]._actions:
        assert action.help or action.dest == "help", action.option_strings

"""compare_runs: differences per level with intervals from the runs' own noise, and what changed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit import compare_runs
from toolkit._interop.frames import lanes_frame, level_from_lanes, levels_frame, make_run


def _run(ttft_ms, *, failed=0, conditions=None, in_flight=4, repeats=None):
    """A one-level run whose requests have the given TTFTs (and E2E = TTFT + 1 s)."""
    records = [
        {"in_flight": in_flight, "rate_rps": math.nan, "ttft_ms": t, "e2e_ms": t + 1000.0, "output_tokens": 11}
        for t in ttft_ms
    ] + [{"in_flight": in_flight, "rate_rps": math.nan, "outcome": "error", "error": "x"} for _ in range(failed)]
    lanes = lanes_frame(records)
    levels = levels_frame([level_from_lanes(lanes, wall_s=10.0, fmt="test")])
    run = make_run(lanes, levels, fmt="test", version="1", conditions=conditions or {}, source="memory")
    if repeats is not None:  # replace the runs table by the given repeats of dec_tok_s
        rows = [run.runs.iloc[0].to_dict() | {"repeat": i + 1, "dec_tok_s": v} for i, v in enumerate(repeats)]
        run = type(run)(lanes=run.lanes, levels=run.levels, runs=pd.DataFrame(rows), params=run.params)
    return run


def _row(result, metric):
    return result.metrics.set_index("metric").loc[metric]


def test_a_known_shift_of_the_median_is_found_with_the_interval_the_formula_gives():
    rng = np.random.default_rng(1)
    n, sigma, shift = 400, 10.0, 10.0
    a = _run(rng.normal(100, sigma, n))
    b = _run(rng.normal(100 + shift, sigma, n))
    row = _row(compare_runs(a, b, seed=2), "ttft_p50_ms")
    # the sample median's standard error for a normal: sigma * sqrt(pi / (2 n)); the difference of
    # two independent medians: sqrt(2) times that; 95% half-width 1.96 x -> 1.737 ms
    half = 1.96 * math.sqrt(2) * sigma * math.sqrt(math.pi / (2 * n))
    assert half == pytest.approx(1.737, abs=0.001)
    assert (row["ci_high"] - row["ci_low"]) / 2 == pytest.approx(half, rel=0.25)
    assert row["ci_low"] < shift < row["ci_high"]
    assert row["beyond_noise"] and row["method"] == "bootstrap over requests"
    assert row["diff"] == pytest.approx(row["b"] - row["a"])


def test_two_draws_of_one_distribution_are_rarely_flagged():
    # 50 pairs of runs of 150 requests from one distribution: at 95% confidence about 5% of the
    # medians' differences are flagged by chance (2.5 of 50); 8 or more would happen with
    # probability 0.003 if the rate were 5%, so it would mean the intervals are too narrow
    rng = np.random.default_rng(3)
    flags = 0
    for _ in range(50):
        a, b = (_run(rng.lognormal(5, 0.4, 150)) for _ in range(2))
        result = compare_runs(a, b, n_resamples=1000, seed=int(rng.integers(1 << 30)))
        flags += int(_row(result, "ttft_p50_ms")["beyond_noise"])
    assert flags <= 7


def test_success_rate_interval_is_agresti_caffo():
    a = _run([100.0] * 90, failed=10)
    b = _run([100.0] * 70, failed=30)
    row = _row(compare_runs(a, b), "success_rate")
    # by hand: (90+1)/102 = 0.89216, (70+1)/102 = 0.69608, d = -0.19608,
    # se = sqrt(0.89216*0.10784/102 + 0.69608*0.30392/102) = 0.054929, 1.95996 * se = 0.107659
    assert (row["a"], row["b"]) == (0.9, 0.7)
    assert row["ci_low"] == pytest.approx(-0.30374, abs=1e-4)
    assert row["ci_high"] == pytest.approx(-0.08842, abs=1e-4)
    assert row["beyond_noise"]


def test_throughput_interval_is_welch_over_repeats_and_none_without_repeats():
    a = _run([100.0] * 5, repeats=[10.0, 11.0, 12.0])
    b = _run([100.0] * 5, repeats=[20.0, 21.0, 22.0])
    row = _row(compare_runs(a, b), "dec_tok_s")
    # Welch: difference 10, se sqrt(1/3 + 1/3) = 0.8165, df 4, t(0.975, 4) = 2.7764 -> 10 +- 2.2670
    assert row["ci_low"] == pytest.approx(7.733, abs=1e-3)
    assert row["ci_high"] == pytest.approx(12.267, abs=1e-3)
    alone = _row(compare_runs(_run([1.0, 2.0]), _run([1.0, 2.0])), "dec_tok_s")
    assert math.isnan(alone["ci_low"]) and not alone["beyond_noise"]
    assert alone["method"].startswith("no interval")


def test_conditions_that_differ_come_first_and_levels_are_matched_by_concurrency():
    a = _run([100.0, 110.0], conditions={"engine": "vllm", "engine_version": "0.9", "model": "m"})
    b = _run([100.0, 110.0], conditions={"engine": "vllm", "engine_version": "0.10", "model": "m"})
    other = _run([100.0, 110.0], in_flight=8)
    result = compare_runs(a, b)
    assert result.conditions.to_dict("records") == [{"condition": "engine_version", "a": "0.9", "b": "0.10"}]
    assert result.to_text().splitlines()[:2] == ["Conditions that differ:", "  engine_version: 0.9 -> 0.10"]
    unmatched = compare_runs(a, other)
    assert unmatched.metrics.empty
    assert unmatched.unmatched["run"].tolist() == ["a", "b"]


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"confidence": 1.5}, "confidence"), ({"n_resamples": 5}, "n_resamples")]
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare_runs(_run([1.0, 2.0]), _run([1.0, 2.0]), **kwargs)
    with pytest.raises(ValueError, match="a must be"):
        compare_runs(3, _run([1.0]))


def test_cli_compare_prints_conditions_then_flags_and_exits_2_on_a_bad_path(tmp_path, capsys):
    from pathlib import Path

    from toolkit.__main__ import main

    data = Path(__file__).parent / "data"
    out = tmp_path / "diff.csv"
    assert (
        main(["compare", str(data / "toolkit_sweep"), str(data / "aiperf"), "--resamples", "200", "--csv", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("Conditions that differ:\n")
    assert "  format: toolkit-sweep -> aiperf" in text
    assert "level only in run a: in_flight 1" in text
    assert set(pd.read_csv(out)["in_flight"]) == {2}
    assert main(["compare", str(data / "toolkit_sweep"), str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: path: no such file") and err.count("\n") == 1

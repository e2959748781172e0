"""compare_chart and ``compare --html``: both runs' levels on one chart, and the page that shows them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit import compare_chart, compare_runs
from toolkit._interop.frames import lanes_frame, level_from_lanes, levels_frame, make_run

DATA = Path(__file__).parent / "data"


def _run(ttfts_by_level: dict[int, list[float]], *, wall_s: float = 10.0):
    """A run with one level per in-flight limit; each request has its TTFT, E2E = TTFT + 1 s, 11 output tokens."""
    lanes, levels = [], []
    for in_flight, ttfts in ttfts_by_level.items():
        records = [
            {"in_flight": in_flight, "rate_rps": math.nan, "ttft_ms": t, "e2e_ms": t + 1000.0, "output_tokens": 11}
            for t in ttfts
        ]
        frame = lanes_frame(records)
        lanes.append(frame)
        levels.append(level_from_lanes(frame, wall_s=wall_s, fmt="test"))
    return make_run(
        pd.concat(lanes, ignore_index=True), levels_frame(levels), fmt="test", version="1", conditions={}, source="x"
    )


def _rows(spec: dict) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def test_the_chart_holds_both_runs_values_per_level_and_each_difference_with_its_interval():
    rng = np.random.default_rng(5)
    ttft_a = {1: list(rng.normal(100, 5, 60)), 4: list(rng.normal(200, 5, 80))}
    ttft_b = {1: list(rng.normal(130, 5, 60)), 4: list(rng.normal(200, 5, 40))}
    comparison = compare_runs(_run(ttft_a), _run(ttft_b), n_resamples=500, seed=1)
    spec = compare_chart(comparison, label_a="before", label_b="after").to_dict()
    rows = _rows(spec)
    bars = {(r["level"], r["metric"], r["run"]): r["value"] for r in rows if "run" in r}
    for level in (1, 4):
        for label, ttfts in (("before", ttft_a), ("after", ttft_b)):
            # computed here from the requests: the median TTFT, and 11 tokens per request over 10 s
            assert bars[(level, "ttft_p50_ms", label)] == pytest.approx(float(np.median(ttfts[level])))
            assert bars[(level, "dec_tok_s", label)] == pytest.approx(11 * len(ttfts[level]) / 10.0)
    diffs = {(r["level"], r["metric"]): r for r in rows if "diff" in r}
    shift = diffs[(1, "ttft_p50_ms")]  # a 30 ms shift against a median's noise of about 1 ms
    assert shift["diff"] == pytest.approx(np.median(ttft_b[1]) - np.median(ttft_a[1]))
    assert shift["ci_low"] < shift["diff"] < shift["ci_high"] and shift["ci_low"] > 0 and shift["beyond_noise"]
    assert diffs[(4, "dec_tok_s")]["diff"] == pytest.approx(11 * (40 - 80) / 10.0)
    assert {r["metric"] for r in rows if "diff" in r} == {"dec_tok_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms"}
    text = str(spec)
    assert "before" in text and "after" in text and "lanes in flight" in text


def test_two_runs_may_be_given_instead_of_a_comparison_and_bad_arguments_name_themselves():
    a, b = _run({2: [100.0, 110.0, 120.0]}), _run({2: [150.0, 160.0, 170.0]})
    rows = _rows(compare_chart(a, b, metrics=["ttft_p50_ms"]).to_dict())
    assert sorted(r["value"] for r in rows if "run" in r) == [110.0, 160.0]
    with pytest.raises(ValueError, match="metrics"):
        compare_chart(compare_runs(a, b), metrics=["ttft_p42_ms"])
    with pytest.raises(ValueError, match="b must be left out"):
        compare_chart(compare_runs(a, b), b)
    with pytest.raises(ValueError, match="b is required"):
        compare_chart(a)
    with pytest.raises(ValueError, match="no level matched"):
        compare_chart(compare_runs(a, _run({3: [1.0, 2.0]})))


def test_cli_compare_html_writes_a_page_with_both_runs_the_flagged_metric_and_an_inline_svg(tmp_path, capsys):
    import json

    from toolkit.__main__ import main

    # run B: the committed vLLM bench run with every request's TTFT and latency one second longer
    result = json.loads((DATA / "vllm" / "result_detailed.json").read_text(encoding="utf-8"))
    for key in ("ttfts", "latencies"):
        result[key] = [v + 1.0 if v else v for v in result[key]]
    later = tmp_path / "later.json"
    later.write_text(json.dumps(result), encoding="utf-8")
    out = tmp_path / "diff.html"
    base = str(DATA / "vllm" / "result_detailed.json")
    assert main(["compare", base, str(later), "--resamples", "200", "--html", str(out)]) == 0
    assert "ttft_p50_ms" in capsys.readouterr().out  # the text is printed as without --html
    page = out.read_text(encoding="utf-8")
    assert base in page and str(later) in page
    flagged = page.split("Differences beyond the noise")[1].split("Both runs per level")[0]
    assert "ttft_p50_ms" in flagged and "e2e_p50_ms" in flagged and "tpot_p50_ms" not in flagged
    assert "<svg" in page and "<script" not in page

"""A run read from another tool gets the sweep's batching verdicts and is predicted like a local sweep."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from toolkit import accuracy, calibrate, predict_sweep, read_run, run_workload

DATA = Path(__file__).parent / "data"
VLLM = DATA / "vllm" / "result_detailed.json"


def _lane_ms_per_token(result: dict) -> float:
    """The summed latency of the completed requests per output token (ms), from the vLLM result itself."""
    done = [i for i, error in enumerate(result["errors"]) if not error]
    return sum(result["latencies"][i] for i in done) * 1000 / sum(result["output_lens"][i] for i in done)


def test_a_folder_of_vllm_results_is_one_sweep_whose_levels_get_the_batching_verdict(tmp_path):
    # the committed run at concurrency 2; at 4 every request takes twice as long (the time per token grows
    # like the concurrency: e = ln 2 / ln 2 = 1, queueing); at 8 as long as at 4 (against the first level
    # e = ln 2 / ln 4 = 0.5, mixed)
    base = json.loads(VLLM.read_text(encoding="utf-8"))
    for limit, factor in ((2, 1.0), (4, 2.0), (8, 2.0)):
        result = dict(base, max_concurrency=limit)
        result["latencies"] = [v * factor for v in base["latencies"]]
        (tmp_path / f"vllm-c{limit}.json").write_text(json.dumps(result), encoding="utf-8")
    run = read_run(tmp_path)
    levels = run.levels.set_index("in_flight")
    assert list(levels.index) == [2, 4, 8] and run.levels.attrs["format"] == read_run(VLLM).levels.attrs["format"]
    u = _lane_ms_per_token(base)
    assert levels.loc[2, "llm_ms_per_token"] == pytest.approx(u)
    assert levels.loc[4, "llm_ms_per_token"] == pytest.approx(2 * u)
    assert levels.loc[4, "elasticity"] == pytest.approx(1.0)
    assert levels.loc[8, "elasticity"] == pytest.approx(math.log(2) / math.log(4))
    assert list(levels["verdict"]) == ["baseline", "queueing", "mixed"]
    assert len(run.lanes) == 3 * 16 and run.levels.attrs["conditions"]["model"] == "gemma-3-270m"
    assert "workload" not in run.levels.attrs["conditions"]  # each file's max_concurrency differs


def test_a_summary_only_level_has_no_verdict_beyond_the_baseline():
    level = read_run(DATA / "vllm" / "result_summary.json").levels.iloc[0]
    assert level["verdict"] == "baseline" and math.isnan(level["llm_ms_per_token"])


def test_a_read_run_is_predicted_with_its_own_workload_and_checked_against_its_levels():
    # tests/data/vllm/console_detailed.txt, printed by vllm bench serve: 14 successful requests,
    # 1242 input tokens, 448 generated tokens, concurrency 2
    run = read_run(VLLM)
    workload = run_workload(run)
    assert (workload["lanes"], workload["limits"]) == (14, [2])
    assert (sum(workload["prompt_tokens"]), sum(workload["output_tokens"])) == (1242, 448)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit's notes on a run this small
        fit = calibrate(run, "Llama-3.1-8B", "H100 SXM", "fp16")
        predicted = predict_sweep("Llama-3.1-8B", "H100 SXM", "fp16", **workload, calibration=fit)
    assert list(predicted["in_flight"]) == [2]
    assert (predicted.loc[0, "prompt_tokens"], predicted.loc[0, "output_tokens"]) == (1242, 448)
    check = accuracy(predicted, run.levels).set_index("metric")
    assert check.loc["ttft_ms", "measured"] == pytest.approx(run.levels.loc[0, "ttft_p50_ms"])
    assert math.isfinite(check.loc["tpot_ms", "rel_err"])


def test_run_workload_refuses_rate_levels_and_summary_files():
    with pytest.raises(ValueError, match="closed-loop"):
        run_workload(DATA / "inference_perf" / "stage_0_lifecycle_metrics.json")
    with pytest.raises(ValueError, match="prompt_tokens and output_tokens"):
        run_workload(DATA / "vllm" / "result_summary.json")


def test_the_report_draws_a_read_run_without_a_server(tmp_path):
    import pandas as pd

    from toolkit import build_report

    folder = tmp_path / "vllm-sweep"
    folder.mkdir()
    base = json.loads(VLLM.read_text(encoding="utf-8"))
    for limit in (2, 4):
        (folder / f"c{limit}.json").write_text(json.dumps(dict(base, max_concurrency=limit)), encoding="utf-8")
    index = build_report(tmp_path / "report", run=folder, execute_notebooks=False, progress=False)
    levels = pd.read_csv(index.parent / "levels.csv")
    # vllm bench serve printed 448 generated tokens and 14 successful requests for the run at concurrency 2
    assert list(levels["in_flight"]) == [2, 4]
    assert list(levels["output_tokens"]) == [448, 448] and list(levels["lanes_ok"]) == [14, 14]
    page = index.read_text(encoding="utf-8")
    assert "vllm bench serve run (vllm-sweep)" in page and "no server was started" in page

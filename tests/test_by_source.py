"""Accuracy by source: publishers from sources, every term's chosen_on, and the per-publisher and
leave-one-source-out summaries on a frame small enough to check by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import toolkit
from toolkit._data import load_csv

TRT = "https://github.com/NVIDIA/TensorRT-LLM/blob/258c754/docs/source/performance/perf-overview.md (table)"
OTHER = "https://example.org/bench/page.md (table 2)"


def test_publisher_is_the_repository_or_the_site_section():
    assert toolkit.publisher_of(TRT) == "NVIDIA/TensorRT-LLM"
    assert toolkit.publisher_of("https://github.com/ggerganov/llama.cpp/pull/4766") == "ggml-org/llama.cpp"
    assert toolkit.publisher_of("https://docs.nvidia.com/nim/benchmarking/llm/x.md") == "docs.nvidia.com/nim"
    assert toolkit.publisher_of("Zhong et al., DistServe, OSDI 2024") == "Zhong et al., DistServe, OSDI 2024"
    with pytest.raises(ValueError, match="source"):
        toolkit.publisher_of("")


@pytest.mark.parametrize("name", ["efficiency.csv", "engine_efficiency.csv"])
def test_every_default_and_engine_term_records_what_it_was_chosen_on(name):
    publishers = {toolkit.publisher_of(s) for s in load_csv("published_measurements.csv")["source"]}
    table = load_csv(name)
    assert table["chosen_on"].notna().all()
    for chosen in table["chosen_on"]:
        assert chosen == "none" or set(chosen.split(";")) <= publishers, chosen


def test_terms_chosen_on_tensorrt_llm_rows_are_recorded():
    terms = toolkit.term_provenance()
    chosen = {p for row in terms.itertuples() if row.engine is None for p in row.chosen_on}
    # seq_overhead_us (efficiency.csv) was chosen on TensorRT-LLM's offline rows: every row uses it
    assert "NVIDIA/TensorRT-LLM" in chosen
    assert terms.loc[terms["parameter"] == "mbu", "chosen_on"].iloc[0] == ()


def _tiny():
    # three rows of an unseen publisher (vLLM), one TensorRT-LLM row, a row without a prediction and one below
    # the floor (both left out of every summary)
    ids = ["a1", "a2", "a3", "t1", "a4", "a5"]
    measurements = pd.DataFrame({"id": ids, "source": [OTHER, OTHER, OTHER, TRT, OTHER, OTHER]})
    accuracy = pd.DataFrame(
        {
            "id": ids,
            "family": ["ttft", "ttft", "itl", "ttft", "ttft", "itl"],
            "split": ["dev", "holdout", "dev", "dev", "dev", "holdout"],
            "predicted": [1.1, 0.7, 1.2, 1.5, math.nan, 1.0],
            "abs_err": [0.1, 0.3, 0.2, 0.5, math.nan, 0.9],
            "below_floor": [False, False, False, False, False, True],
            "engine": ["vllm", "vllm", "vllm", "trtllm", "vllm", "vllm"],
            "engine_version": ["0.6.0", "0.6.0", "0.6.0", "0.17", "0.6.0", "0.6.0"],
        }
    )
    return toolkit.accuracy_by_source(accuracy, measurements)


def _row(table, view, group, family):
    row = table[(table["view"] == view) & (table["group"] == group) & (table["family"] == family)]
    assert len(row) == 1, (view, group, family)
    return row.iloc[0]


def test_per_publisher_and_engine_medians_by_hand():
    table = _tiny()
    other = _row(table, "publisher", "example.org/bench", "all")
    assert other["rows"] == 3 and other["median_abs_err"] == pytest.approx(0.2)  # median of 0.1, 0.3, 0.2
    assert other["informed"] == 0
    assert _row(table, "publisher", "example.org/bench", "ttft")["median_abs_err"] == pytest.approx(0.2)  # 0.1, 0.3
    trt = _row(table, "publisher", "NVIDIA/TensorRT-LLM", "all")
    assert trt["rows"] == 1 and trt["median_abs_err"] == pytest.approx(0.5) and trt["informed"] == 1
    assert _row(table, "engine", "vllm", "itl")["rows"] == 1  # a5 is below the floor
    assert _row(table, "split", "dev", "all")["median_abs_err"] == pytest.approx(0.2)  # 0.1, 0.2, 0.5


def test_leave_one_source_out_drops_rows_whose_terms_their_publisher_chose():
    table = _tiny()
    held = _row(table, "leave_one_source_out", "all", "all")
    assert held["rows"] == 3 and held["median_abs_err"] == pytest.approx(0.2)
    assert _row(table, "leave_one_source_out", "all", "ttft")["median_abs_err"] == pytest.approx(0.2)
    # TensorRT-LLM's row uses seq_overhead_us, chosen on its own publisher's rows: no held-out figure
    assert not ((table["view"] == "held_out_publisher") & (table["group"] == "NVIDIA/TensorRT-LLM")).any()
    # three rows are too few for a 95% order-statistic interval of the median (it needs six: 2 x 0.5**6 < 0.05)
    assert math.isnan(held["median_abs_err_low"]) and math.isnan(held["median_abs_err_high"])


def test_an_accuracy_row_missing_from_the_measurements_is_refused():
    accuracy = pd.DataFrame({"id": ["zz"], "family": ["ttft"], "split": ["dev"], "predicted": [1.0], "abs_err": [0.1]})
    with pytest.raises(ValueError, match="not in measurements"):
        toolkit.accuracy_by_source(accuracy, pd.DataFrame({"id": ["a"], "source": [OTHER]}))


def test_engine_scheduling_rows_are_cited_and_well_formed():
    table = toolkit.engine_scheduling()
    assert set(table["engine"]) <= set(toolkit.backends()["name"])
    assert {"vllm", "sglang", "tgi", "trtllm", "llamacpp"} <= set(table["engine"])
    assert set(table["prefill_order"]) <= {"prefill_first", "decode_first", "mixed"}
    assert set(table["chunked_prefill"]) <= {"on", "off", "flag"}
    assert set(table["status"]) <= {"read", "to check"}
    assert table["source"].str.len().min() > 40
    budgets = table["token_budget_tokens"].dropna()
    assert (budgets > 0).all() and (budgets == budgets.round()).all()
    # vLLM's V1 scheduler gives running requests their tokens first (vllm/v1/core/sched/scheduler.py)
    v1 = toolkit.engine_scheduling("vllm")
    assert set(v1.loc[v1["versions"].str.startswith("V1"), "prefill_order"]) == {"decode_first"}
    with pytest.raises(ValueError, match="engine"):
        toolkit.engine_scheduling("nope")


def test_source_provenance_names_the_publishers_behind_each_row():
    frame = pd.DataFrame(
        {
            "id": ["t", "x", "v"],
            "source": [TRT, "https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/00/README.md", OTHER],
            "engine": ["trtllm", "llamacpp", "vllm"],
            "engine_version": ["0.17", "build of 2024-05 (not stated)", "0.6.0"],
        }
    )
    table = toolkit.source_provenance(frame).set_index("id")
    # efficiency.csv: mfu and serial_share were chosen beside the dev half of those three publishers, and every
    # row uses every default; a vLLM row uses no engine term, so those three are all that inform it
    everyone = ("NVIDIA/TensorRT-LLM", "XiongjieDai/GPU-Benchmarks-on-LLM-Inference", "ggml-org/llama.cpp")
    assert table.loc["v", "informing"] == everyone and not table.loc["v", "informed"]
    assert table.loc["t", "informed"] and table.loc["x", "informed"]
    assert table.loc["x", "publisher"] == "XiongjieDai/GPU-Benchmarks-on-LLM-Inference"
    with pytest.raises(ValueError, match="engine_version"):
        toolkit.source_provenance(frame.drop(columns="engine_version"))

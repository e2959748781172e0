"""Hostile and careless inputs (issue 39): model configs, traces, sizes read from the input, and
the plan's options. Each test reproduces a defect the issue names: a hang, a raw library exception,
memory that grows with a number in the input, or a figure outside the range its docs state."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._queueing import workload

# Llama-2-7B's published config.json (the fields the architecture needs)
LLAMA = {
    "model_type": "llama",
    "_name_or_path": "meta-llama/Llama-2-7b-hf",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


def _write(tmp_path, config, name="config.json") -> os.PathLike:
    path = tmp_path / name
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return path


def _in_thread(call, seconds: float = 5.0) -> BaseException | None:
    """What ``call()`` raised within ``seconds`` (None when it returned); fails the test if it blocks."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test to inspect
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the call blocked"
    return outcome[0]


# --- model configs -------------------------------------------------------------------------------


def test_a_config_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    error = _in_thread(lambda: toolkit.model_from_hf_config(fifo, name="m"))
    assert isinstance(error, ValueError) and "not a regular file" in str(error) and "config.json" in str(error)


def test_dev_zero_and_an_oversized_config_are_refused_by_size(tmp_path):
    with pytest.raises(ValueError, match="not a regular file"):
        toolkit.model_from_hf_config("/dev/zero", name="m")
    big = tmp_path / "config.json"
    with big.open("wb") as handle:  # sparse: 17 MiB of nothing, above the 16 MiB a config may have
        handle.truncate(17 * 2**20)
    with pytest.raises(ValueError, match=r"config\.json has 17825792 bytes; at most 16777216"):
        toolkit.model_from_hf_config(big, name="m")


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    spec = toolkit.model_from_hf_config(path)
    # Llama-2-7B: 6,738,415,616 parameters (its model card's 6.74B), counted independently in test_hf_config
    assert spec["params_b"] == pytest.approx(6.738415616)


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [
        ("num_hidden_layers", 10_001, "10000"),
        ("num_hidden_layers", 1e9, "10000"),
        ("num_hidden_layers", 1e300, "10000"),
        ("hidden_size", 1e300, "1.04858e\\+06"),
        ("vocab_size", 2**24 + 1, "1.67772e\\+07"),
        ("intermediate_size", 1e12, "4.1943e\\+06"),
        ("max_position_embeddings", 1e300, "1.07374e\\+09"),
    ],
)
def test_size_fields_are_bounded_naming_field_bound_and_file(tmp_path, field, value, bound):
    path = _write(tmp_path, {**LLAMA, field: value})
    with pytest.raises(ValueError, match=rf"config\.json: config '{field}' must be an integer \(>= 1 and <= {bound}\)"):
        toolkit.model_from_hf_config(path)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"layer_types": [{"kind": "sliding"}] * 32}, "'layer_types' may hold sliding_attention and full_attention"),
        ({"model_type": {"nested": 1}}, "'model_type' must be one of"),
        ({"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
          "mlp_only_layers": [{"x": 1}]}, "'mlp_only_layers' must list layer indices"),
        ({"tie_word_embeddings": "maybe"}, "'tie_word_embeddings' must be true or false"),
        ({"attention_bias": 1}, "'attention_bias' must be true or false"),
    ],
)  # fmt: skip
def test_wrongly_typed_fields_are_value_errors_naming_field_and_file(tmp_path, change, words):
    with pytest.raises(ValueError, match=rf"config\.json: .*{words}"):
        toolkit.model_from_hf_config(_write(tmp_path, {**LLAMA, **change}))


def test_deeply_nested_json_is_a_value_error_naming_the_file(tmp_path):
    path = _write(tmp_path, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match=r"config\.json.* nests JSON deeper"):
        toolkit.model_from_hf_config(path, name="m")


def test_string_booleans_read_as_what_they_say(tmp_path):
    untied = toolkit.model_from_hf_config(_write(tmp_path, {**LLAMA, "tie_word_embeddings": "FALSE"}))
    tied = toolkit.model_from_hf_config(_write(tmp_path, {**LLAMA, "tie_word_embeddings": "true"}))
    assert untied["tied_embeddings"] is False and tied["tied_embeddings"] is True
    # tying drops the output head: vocab x hidden = 32,000 x 4,096 parameters
    assert (untied["params_b"] - tied["params_b"]) * 1e9 == pytest.approx(32000 * 4096)


# --- traces --------------------------------------------------------------------------------------


def _csv(tmp_path, text: str, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_mixed_utc_offsets_across_a_daylight_saving_change_are_read_in_utc(tmp_path):
    # 01:59:30 CEST (+02:00) is 23:59:30 UTC; 02:00:30 CET (+01:00), after clocks go back, is 01:00:30 UTC
    path = _csv(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-10-29 01:59:30+02:00,10,5\n2023-10-29 02:00:30+01:00,20,6\n",
    )
    trace = toolkit.load_trace(path)
    assert trace["arrival_s"].tolist() == [0.0, 3660.0]


def test_both_arrival_s_and_timestamp_are_refused_naming_both_and_the_file(tmp_path):
    path = _csv(tmp_path, "arrival_s,TIMESTAMP,prompt_tokens,output_tokens\n0,2023-11-16 18:15:46,10,5\n")
    with pytest.raises(ValueError, match=r"trace\.csv: columns TIMESTAMP and arrival_s both give arrival_s"):
        toolkit.load_trace(path)


def test_a_bad_row_names_the_file(tmp_path):
    path = _csv(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,0,5\n")
    with pytest.raises(ValueError, match=r"trace file .*trace\.csv: trace prompt_tokens must all be integers"):
        toolkit.load_trace(path)


def test_parquet_works_or_says_how_to_enable_it(tmp_path):
    frame = pd.DataFrame({"arrival_s": [0.0, 2.5], "prompt_tokens": [10, 20], "output_tokens": [5, 6]})
    path = tmp_path / "trace.parquet"
    try:
        frame.to_parquet(path)
    except ImportError:  # no engine here: the loader must say how to get one
        path.write_bytes(b"PAR1")
        with pytest.raises(ValueError, match=r"trace\.parquet needs pyarrow: pip install pyarrow"):
            toolkit.load_trace(path)
        return
    assert toolkit.load_trace(path)[["arrival_s", "prompt_tokens"]].to_numpy().tolist() == [[0.0, 10], [2.5, 20]]


def test_a_trace_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    error = _in_thread(lambda: toolkit.load_trace(fifo))
    assert isinstance(error, ValueError) and "not a regular file" in str(error)


def test_token_scale_cannot_push_lengths_past_the_stated_cap(tmp_path):
    path = _csv(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,2000,5\n1,10,5\n")
    # 2,000 x 1e6 = 2e9 tokens, above the 1e9 the loader's docs state
    with pytest.raises(
        ValueError, match=r"prompt_tokens x token_scale=1e\+06 must all be integers \(>= 1 and <= 1e\+09\)"
    ):
        toolkit.load_trace(path, token_scale=1e6)
    scaled = toolkit.load_trace(path, token_scale=1000)
    assert scaled["prompt_tokens"].tolist() == [2_000_000, 10_000]


def test_rate_scale_cannot_build_more_requests_than_the_simulator_takes():
    # the shipped conversation hour has 19,366 requests: x 1000 is 19.4 million, above the 10**7 cap
    with pytest.raises(ValueError, match=r"rate_scale=1000 would make about 1\.94e\+07 requests .* at most 1e\+07"):
        toolkit.load_trace("azure-conv-2023", rate_scale=1000)


# --- sizes read from the input -------------------------------------------------------------------


def test_a_trace_spanning_1e9_s_is_refused_before_any_per_second_array():
    trace = pd.DataFrame({"arrival_s": [0.0, 1e9], "prompt_tokens": [100, 100], "output_tokens": [10, 10]})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"arrival_s must span at most 1e\+07 s"):
            toolkit.plan(
                arrival_rate=1,
                prompt_tokens=100,
                output_tokens=10,
                workload=trace,
                gpus="H100 SXM",
                models="Llama-3.1-8B",
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6  # before: two 8e9-byte arrays of counts per second


def test_dispersion_without_per_window_arrays_matches_the_dense_count():
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.uniform(0, 5000, 400))
    trace = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": 10, "output_tokens": 5})
    row = toolkit.describe_workload(trace, windows_s=[7.0]).dispersion.iloc[0]
    n = int((arrival[-1] - arrival[0]) // 7.0)
    counts = np.histogram(arrival, bins=arrival[0] + 7.0 * np.arange(n + 1))[0]  # every window, empty ones too
    assert row["windows"] == n and row["mean_count"] == pytest.approx(counts.mean())
    assert row["index_of_dispersion"] == pytest.approx(counts.var() / counts.mean())


def test_simulate_applies_the_request_cap_to_a_trace(monkeypatch):
    # the cap is 10**7 rows; a frame that size takes 240 MB, so the test lowers the cap to 10
    monkeypatch.setattr(workload, "MAX_REQUESTS", 10)
    trace = pd.DataFrame({"arrival_s": np.arange(11.0), "prompt_tokens": 10, "output_tokens": 5})
    with pytest.raises(ValueError, match=r"trace must have at most 1e\+01 requests \(as num_requests\), got 11"):
        toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp8", trace=trace)
    assert len(toolkit.simulate("Llama-3.1-8B", "H100 SXM", "fp8", trace=trace.iloc[:10]).requests) == 10


# --- smaller -------------------------------------------------------------------------------------


def test_a_model_larger_than_the_gpu_has_no_negative_kv_budget():
    # Llama-3.1-70B in fp16 on one 80 GB H100: about 141 GB of weights, more than the GPU holds
    row = toolkit.memory("Llama-3.1-70B", "H100 SXM", "fp16", context_tokens=4096).iloc[0]
    assert row["weights_gb"] > row["memory_gb"]
    assert row["kv_budget_gb"] == 0.0 and row["max_concurrent_seqs"] == 0 and not row["fits"]


def test_plan_top_must_be_positive(capsys):
    from toolkit.__main__ import main

    argv = ["plan", "--prompt-tokens", "512", "--output-tokens", "128", "--rate", "3", "--top", "-5"]
    assert main(argv) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.strip() == "error: --top must be an integer (>= 1), got -5"

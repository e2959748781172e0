"""Replaying a trace: against the real llama-server (lengths checked against its own counters) and,
for the error paths, against the loopback fault server whose token counts are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fault_server import FaultServer

import toolkit
from toolkit._sweep.replay_result import replay_summary


def small_trace(outputs, arrivals=None, prompts=None) -> pd.DataFrame:
    n = len(outputs)
    return pd.DataFrame(
        {
            "arrival_s": np.arange(n) * 0.05 if arrivals is None else arrivals,
            "prompt_tokens": [5 + 3 * i for i in range(n)] if prompts is None else prompts,
            "output_tokens": outputs,
        }
    )


# --- the real server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replayed(llama_server):
    # 11 s of the conversation trace (from minute 10), stretched 3x and lengths divided by 20: ~60
    # requests a 2-core CPU serves in about half a minute
    trace = toolkit.load_trace("azure-conv-2023", start_s=600, duration_s=11, time_scale=3, token_scale=0.05)
    before = toolkit.scrape_metrics(llama_server.metrics_url)
    result = toolkit.replay_trace(trace, server=llama_server, progress=False, extra_body={"temperature": 0.0})
    after = toolkit.scrape_metrics(llama_server.metrics_url)
    delta = after.set_index("name")["value"] - before.set_index("name")["value"]
    return trace, result, delta


@pytest.mark.server
def test_every_trace_row_is_accounted_for(replayed):
    trace, result, _ = replayed
    requests = result.requests
    assert len(trace) >= 40 and len(requests) == len(trace)
    assert list(requests["trace_row"]) == list(range(len(trace)))
    assert (requests["outcome"] == "ok").all(), requests.loc[requests.outcome != "ok", "error"].tolist()
    assert (requests["output_tokens_target"] == trace["output_tokens"]).all()


@pytest.mark.server
def test_output_lengths_are_the_traces(replayed):
    trace, result, delta = replayed
    requests = result.requests
    assert (requests["output_tokens"] == trace["output_tokens"]).mean() >= 0.95
    # the server's own counter: every replayed token plus one from each of the 2 calibration requests
    assert delta["llamacpp:tokens_predicted_total"] == requests["output_tokens"].sum() + 2


@pytest.mark.server
def test_prompt_lengths_are_the_traces_where_the_template_allows(replayed):
    trace, result, _ = replayed
    requests = result.requests
    assert result.params["prompt_method"] == "tokenize"
    floor = result.params["template_tokens"] + 1
    reachable = trace["prompt_tokens"] >= floor
    assert reachable.sum() >= 0.5 * len(trace)
    assert (requests.loc[reachable, "prompt_tokens"] == trace.loc[reachable, "prompt_tokens"]).all()
    # a target below the template's own tokens gets the shortest prompt possible: one word
    assert (requests.loc[~reachable, "prompt_tokens"] == floor).all()
    assert result.summary.loc[0, "prompt_unreachable"] == (~reachable).sum()


@pytest.mark.server
def test_sends_follow_the_trace_clock(replayed):
    trace, result, _ = replayed
    requests = result.requests
    sent = requests["sent_s"].to_numpy()
    assert (sent >= trace["arrival_s"].to_numpy() - 1e-6).all()  # never early
    assert np.all(np.diff(sent) >= -1e-6)  # in trace order
    duration = result.summary.loc[0, "duration_s"]
    assert duration >= trace["arrival_s"].max()
    assert not result.summary.loc[0, "fell_behind"]


# --- error paths and the calibrated fallback (fault server: 1 token per word, no /tokenize) -----


def test_without_tokenize_lengths_come_from_the_calibrated_line():
    # the fault server counts one prompt token per word and produces min(6, max_tokens) tokens
    outputs = [1, 2, 3, 4, 5, 6, 7, 9]
    with FaultServer(tokens=6, token_delay_s=0.0) as srv:
        result = toolkit.replay_trace(small_trace(outputs), srv.root_url, progress=False)
        chat = srv.chat_requests()
    assert result.params["prompt_method"] == "calibrated"
    assert result.params["tokens_per_word"] == 1.0 and result.params["template_tokens"] == 0.0
    assert [r["prompt_tokens"] for r in chat[2:]] == [5 + 3 * i for i in range(8)]  # after 2 calibrations
    assert list(result.requests["output_exact"]) == [n <= 6 for n in outputs]
    assert result.summary.loc[0, "output_exact_share"] == 6 / 8
    assert any("exact output length" in w for w in result.warnings)
    assert any("no /tokenize" in w for w in result.warnings)


def test_a_deadline_leaves_rows_for_requests_cancelled_and_never_sent():
    with FaultServer(schedule=[None, None, "stall", "stall"], stall_s=20) as srv:
        result = toolkit.replay_trace(
            small_trace([3, 3, 3, 3], arrivals=[0.0, 0.1, 5.0, 10.0]), srv.root_url, deadline_s=1.0, progress=False
        )
    requests = result.requests
    assert len(requests) == 4
    assert list(requests["outcome"]) == ["error", "error", "not_sent", "not_sent"]
    assert requests.loc[:1, "error"].str.contains("deadline").all()
    assert requests["output_tokens"].isna().all()  # unknown, never zero
    assert result.summary.loc[0, ["ok", "failed", "not_sent"]].tolist() == [0, 2, 2]


def test_nothing_answering_is_a_connection_error():
    with pytest.raises(ConnectionError, match="nothing answered"):
        toolkit.replay_trace(small_trace([2]), "http://127.0.0.1:9", progress=False)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_lateness_ms": -1}, "max_lateness_ms"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"deadline_s": -2}, "deadline_s"),
        ({"exact_output": "yes"}, "exact_output"),
        ({"base_url": "localhost:8000"}, "base_url"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    kwargs.setdefault("base_url", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match=field):
        toolkit.replay_trace(small_trace([2]), progress=False, **kwargs)


def test_a_trace_without_token_columns_is_refused():
    with pytest.raises(ValueError, match="output_tokens"):
        toolkit.replay_trace(pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [3]}), "http://127.0.0.1:9")


def test_summary_flags_a_client_that_fell_behind():
    # 100 sends: 98 on time, two late by 100 and 200 ms. numpy's linear p99 of that sample is at
    # rank 98.01: 100 + 0.01 * (200 - 100) = 101 ms, above the 50 ms tolerance.
    n = 100
    requests = pd.DataFrame(
        {
            "arrival_s": np.arange(n, dtype=float),
            "sent_s": np.arange(n, dtype=float),
            "end_s": np.arange(n, dtype=float) + 0.5,
            "lateness_ms": [0.0] * 98 + [100.0, 200.0],
            "outcome": ["ok"] * n,
            "ttft_ms": 10.0,
            "tpot_ms": 2.0,
            "e2e_ms": 50.0,
            "output_tokens": 4.0,
            "output_tokens_target": 4,
            "prompt_tokens": 9.0,
            "prompt_tokens_target": 9,
            "output_exact": True,
            "prompt_exact": True,
            "prompt_reachable": True,
        }
    )
    summary, warnings = replay_summary(requests, max_lateness_ms=50, prompt_method="tokenize")
    row = summary.iloc[0]
    assert row["lateness_p99_ms"] == pytest.approx(101.0)
    assert row["late_sends"] == 2 and row["fell_behind"]
    assert row["duration_s"] == pytest.approx(99.5) and row["achieved_rps"] == pytest.approx(100 / 99.5)
    assert any("fell behind" in w for w in warnings)
    assert not math.isnan(row["ttft_p99_ms"])

"""Production traces: the shipped Azure 2023 hours, loaded, sliced, scaled, described and replayed
in the simulator. Expected figures are recomputed from the raw CSV with the csv module and numpy."""

from __future__ import annotations

import csv
import datetime as dt

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._data import data_file

FILES = {
    "azure-conv-2023": "traces/AzureLLMInferenceTrace_conv.csv",
    "azure-code-2023": "traces/AzureLLMInferenceTrace_code.csv",
}


def _raw(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with data_file(FILES[name]).open("r") as handle:
        rows = list(csv.DictReader(handle))
    stamps = [dt.datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]
    seconds = np.array([(s - stamps[0]).total_seconds() for s in stamps])
    prompt = np.array([int(r["ContextTokens"]) for r in rows])
    output = np.array([int(r["GeneratedTokens"]) for r in rows])
    return seconds, prompt, output


# figures measured from the files (the issue that asked for the traces quotes one request fewer per
# file, 19,365 and 8,818: the files' last rows end without a newline)
PUBLISHED = {
    "azure-conv-2023": {
        "requests": 19366,
        "rate_rps": 5.53,
        "ca2": 1.20,
        "prompt_mean": 1155,
        "prompt_p50": 1020,
        "prompt_p95": 4083,
        "output_mean": 211,
        "output_p50": 129,
        "output_p95": 451,
    },
    "azure-code-2023": {
        "requests": 8819,
        "rate_rps": 2.57,
        "ca2": 173,
        "prompt_mean": 2048,
        "prompt_p95": 7303,
        "output_mean": 28,
        "output_p50": 13,
        "output_p95": 90,
        "output_cs2": 4.6,
    },
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_loaded_trace_reproduces_the_files_figures(name):
    seconds, prompt, output = _raw(name)
    trace = toolkit.load_trace(name)
    np.testing.assert_allclose(trace["arrival_s"], np.sort(seconds) - seconds.min(), atol=1e-6)
    np.testing.assert_array_equal(trace["prompt_tokens"], prompt[np.argsort(seconds, kind="stable")])
    summary = toolkit.describe_workload(trace).summary.iloc[0]
    gaps = np.diff(np.sort(seconds))
    independent = {
        "requests": len(seconds),
        "rate_rps": len(seconds) / (seconds.max() - seconds.min()),
        "ca2": gaps.var() / gaps.mean() ** 2,
        "prompt_mean": prompt.mean(),
        "prompt_p50": np.median(prompt),
        "prompt_p95": np.percentile(prompt, 95),
        "output_mean": output.mean(),
        "output_p50": np.median(output),
        "output_p95": np.percentile(output, 95),
        "output_cs2": output.var() / output.mean() ** 2,
    }
    for key, value in PUBLISHED[name].items():
        assert summary[key] == pytest.approx(independent[key], rel=1e-9), key
        # the quoted figure, to its own precision
        assert round(summary[key], 2) == pytest.approx(value, rel=0.005, abs=0.5 if value > 100 else 0.005), key
    assert trace.attrs["rate_scaling"] == "none" and "CC-BY 4.0" in trace.attrs["source"]


def test_slicing_and_time_scaling():
    seconds, _, _ = _raw("azure-conv-2023")
    offsets = seconds - seconds.min()
    expected = np.sort(offsets[(offsets >= 600) & (offsets < 660)]) - 600
    window = toolkit.load_trace("azure-conv-2023", start_s=600, duration_s=60)
    np.testing.assert_allclose(window["arrival_s"], expected, atol=1e-6)
    fast = toolkit.load_trace("azure-conv-2023", start_s=600, duration_s=60, time_scale=0.25)
    np.testing.assert_allclose(fast["arrival_s"], expected * 0.25, atol=1e-6)
    assert fast.attrs["window_s"] == pytest.approx(15.0)


def test_rate_scale_thins_or_superposes():
    base = toolkit.load_trace("azure-conv-2023", duration_s=600)
    n = len(base)
    doubled = toolkit.load_trace("azure-conv-2023", duration_s=600, rate_scale=2.0)
    assert len(doubled) == 2 * n and doubled.attrs["rate_scaling"] == "superposed"
    assert doubled["arrival_s"].max() < 600 and doubled["arrival_s"].is_monotonic_increasing
    # the token mix is kept: every copy carries the same rows
    assert sorted(doubled["output_tokens"]) == sorted(np.repeat(base["output_tokens"].to_numpy(), 2))
    thinned = toolkit.load_trace("azure-conv-2023", duration_s=600, rate_scale=0.3, seed=4)
    # binomial(n, 0.3): within 5 standard deviations
    assert abs(len(thinned) - 0.3 * n) < 5 * np.sqrt(n * 0.3 * 0.7)
    assert thinned.attrs["rate_scaling"] == "thinned"


def test_a_csv_with_the_azure_names_or_ours_loads(tmp_path):
    azure = tmp_path / "azure.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:01.5,100,7\n2023-11-16 18:00:00.0,50,3\n"
    )
    trace = toolkit.load_trace(azure)
    assert list(trace["arrival_s"]) == [0.0, 1.5] and list(trace["output_tokens"]) == [3, 7]
    ours = tmp_path / "ours.csv"
    ours.write_text("arrival_s,prompt_tokens,output_tokens,tenant\n2.0,10,5,a\n4.0,20,6,b\n")
    trace = toolkit.load_trace(ours)
    assert list(trace["arrival_s"]) == [0.0, 2.0] and list(trace["tenant"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name_or_path": "azure-chat-2099"}, "name_or_path"),
        ({"name_or_path": "azure-conv-2023", "time_scale": 0}, "time_scale"),
        ({"name_or_path": "azure-conv-2023", "rate_scale": -1}, "rate_scale"),
        ({"name_or_path": "azure-conv-2023", "duration_s": 0}, "duration_s"),
        ({"name_or_path": 12}, "name_or_path"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        toolkit.load_trace(**kwargs)


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("arrival_s", [0.0, 1.0, np.nan], "trace arrival_s must be finite seconds; 1 of 3 are not"),
        ("prompt_tokens", [5, -2, np.nan], r"trace prompt_tokens must be finite token counts \(>= 0\); 2 of 3"),
        ("output_tokens", ["a", "b", "c"], "trace output_tokens must be numbers"),
    ],
)
def test_describe_workload_names_a_bad_column(column, values, message):
    # a NaN arrival once reached numpy's bincount, whose error named neither the trace nor the column
    trace = pd.DataFrame({"arrival_s": [0.0, 1.0, 3.0], "prompt_tokens": 5, "output_tokens": 2})
    with pytest.raises(ValueError, match=message):
        toolkit.describe_workload(trace.assign(**{column: values}))


def test_bad_files_are_value_errors(tmp_path):
    missing = tmp_path / "m.csv"
    missing.write_text("arrival_s,prompt_tokens\n0,5\n")
    with pytest.raises(ValueError, match="output_tokens"):
        toolkit.load_trace(missing)
    zero = tmp_path / "z.csv"
    zero.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,0\n")
    with pytest.raises(ValueError, match="output_tokens"):
        toolkit.load_trace(zero)


def test_the_code_service_is_burstier_than_any_preset_at_every_scale():
    """A Poisson stream's index of dispersion is 1 at every window; the code trace's grows with it."""
    d = toolkit.describe_workload(toolkit.load_trace("azure-code-2023")).dispersion
    assert (d["index_of_dispersion"] > 5).all() and d["index_of_dispersion"].is_monotonic_increasing
    poisson = np.cumsum(np.random.default_rng(0).exponential(1 / 2.57, 9000))
    frame = pd.DataFrame({"arrival_s": poisson, "prompt_tokens": 1, "output_tokens": 1})
    control = toolkit.describe_workload(frame).dispersion
    assert control["index_of_dispersion"].between(0.6, 1.4).all()


def test_simulate_replays_the_trace_exactly():
    trace = toolkit.load_trace("azure-code-2023", start_s=300, duration_s=120)
    result = toolkit.simulate("Llama-3.1-8B", "H100 SXM", "bf16", trace=trace, replicas=2)
    req = result.requests.sort_values("arrival_s", kind="stable")
    np.testing.assert_array_equal(req["arrival_s"].to_numpy(), trace["arrival_s"].to_numpy())
    np.testing.assert_array_equal(req["prompt_tokens"].to_numpy(), trace["prompt_tokens"].to_numpy())
    np.testing.assert_array_equal(req["output_tokens"].to_numpy(), trace["output_tokens"].to_numpy())

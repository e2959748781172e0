"""A calibration records the range it was measured over; a prediction above it says so (issue 40).

The synthetic profile follows the observation model of a server with known efficiencies exactly:
prefill alone at prompts of 128, 384 and 768 tokens, decode alone at prompts of 128 and 768 tokens
and decode in batches of 2, 4 and 8 at 128 tokens, each with 32 output tokens. By hand its range is
prompts 128-768 (the prefill cells), contexts 160-800 (prompt + output of the decoding cells) and
batches 1-8.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from synthetic_profile import synthetic_profile

import toolkit
from toolkit._model.serving import cost_model
from toolkit._model.validity import extrapolation, peak_running, range_sentence
from toolkit._report.measure import _Run
from toolkit._report.trust_section import range_sentences

MODEL, GPU, QUANT = "Llama-3.1-8B", "H100 SXM", "bf16"
TRUTH = {"mbu": 0.6, "mfu": 0.4, "step_overhead_ms": 6.0, "request_overhead_ms": 90.0}
CELLS = [("prefill", 1, p, 1) for p in (128, 384, 768)]
CELLS += [("decode", 1, p, 32) for p in (128, 768)]
CELLS += [("batch", b, 128, 32) for b in (2, 4, 8)]


def _profile() -> pd.DataFrame:
    return synthetic_profile(cost_model(MODEL, GPU, QUANT, **TRUTH), CELLS, seed=3, wave_sd=0.0)


@pytest.fixture(scope="module")
def calibration() -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the fit holds is not this test's concern
        return toolkit.calibrate(_profile(), MODEL, GPU, QUANT, fit=("mbu", "step_overhead_ms"))


def _extrapolation_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "extrapolates" in str(w.message)]


def test_the_calibration_records_the_range_it_was_measured_over(calibration):
    row = calibration.iloc[0]
    assert (row["valid_prompt_tokens_min"], row["valid_prompt_tokens_max"]) == (128, 768)
    assert (row["valid_context_tokens_min"], row["valid_context_tokens_max"]) == (128 + 32, 768 + 32)
    assert (row["valid_batch_min"], row["valid_batch_max"]) == (1, 8)


def test_peak_running_counts_overlaps_by_hand():
    # [0, 2), [1, 3), [2, 4), [5, 6): at most two at once ([1, 2) and [2, 3)); touching ends do not overlap
    assert peak_running(np.array([0.0, 1, 2, 5]), np.array([2.0, 3, 4, 6])) == 2
    assert peak_running(np.array([0.0, 0, 0]), np.array([1.0, 1, 1])) == 3
    assert peak_running(np.array([]), np.array([])) == 0


def test_extrapolation_names_the_quantity_the_range_and_the_value(calibration):
    assert extrapolation(calibration, prompt_tokens=768, context_tokens=800, batch=8) == (False, "")
    assert extrapolation(calibration, prompt_tokens=2000) == (True, "prompt_tokens 2000 above the measured 128-768")
    assert extrapolation(calibration, batch=32) == (True, "batch 32 above the measured 1-8")
    # within 10% of a maximum is inside (a sweep's lanes spread a few percent about their level's mean)
    assert extrapolation(calibration, prompt_tokens=768 * 1.1) == (False, "")
    assert extrapolation(calibration, prompt_tokens=846)[0] and extrapolation(calibration, batch=9)[0]
    # the default efficiencies have no measured range: nothing is flagged
    assert extrapolation(None, prompt_tokens=10**6, batch=10**4) == (False, "")
    with pytest.raises(ValueError, match="unknown quantity"):
        extrapolation(calibration, prompts=3)


def _simulate(calibration, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = toolkit.simulate(MODEL, GPU, QUANT, calibration=calibration, seed=1, **kwargs)
    return result.summary.iloc[0], _extrapolation_warnings(caught)


def test_simulate_flags_a_prompt_or_a_batch_above_the_range_and_nothing_inside(calibration):
    # inside: 512-token prompts and 64 outputs (context 576), at most 8 running
    inside, said = _simulate(calibration, prompt_tokens=512, output_tokens=64, num_requests=40, concurrency=8)
    assert not inside["extrapolated"] and inside["extrapolated_reason"] == "" and said == []
    long, said = _simulate(calibration, prompt_tokens=2000, output_tokens=16, num_requests=20, concurrency=2)
    assert long["extrapolated"]
    assert long["extrapolated_reason"].split("; ")[0] == "prompt_tokens 2000 above the measured 128-768"
    assert (
        said[0]
        == "simulate: prompt_tokens 2000 above the measured 128-768 of the calibration: the prediction extrapolates"
    )
    # 32 clients that all start at once keep 32 sequences running: the batch reached, not the cap, counts
    wide, said = _simulate(
        calibration, prompt_tokens=256, output_tokens=32, num_requests=64, concurrency=32, max_batch=32
    )
    assert wide["extrapolated"] and wide["extrapolated_reason"] == "batch 32 above the measured 1-8"
    assert len(said) == 1 and "batch 32 above the measured 1-8" in said[0]
    capped, _ = _simulate(
        calibration, prompt_tokens=256, output_tokens=32, num_requests=16, concurrency=4, max_batch=32
    )
    assert not capped["extrapolated"]
    # without a calibration there is no measured range and no column
    plain = toolkit.simulate(MODEL, GPU, QUANT, prompt_tokens=2000, output_tokens=16, num_requests=5, concurrency=1)
    assert "extrapolated" not in plain.summary.columns


def test_predict_sweep_flags_the_levels_above_the_range(calibration):
    common = {"output_tokens": 32, "lanes": 32, "calibration": calibration}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inside = toolkit.predict_sweep(MODEL, GPU, QUANT, prompt_tokens=256, limits=(1, 8), **common)
    assert not inside["extrapolated"].any() and _extrapolation_warnings(caught) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wide = toolkit.predict_sweep(MODEL, GPU, QUANT, prompt_tokens=256, limits=(8, 32), **common)
    assert wide["extrapolated"].tolist() == [False, True]
    assert wide["extrapolated_reason"].tolist() == ["", "batch 32 above the measured 1-8"]
    assert _extrapolation_warnings(caught) == [
        "predict_sweep: batch 32 above the measured 1-8 of the calibration: the prediction extrapolates"
    ]
    with pytest.warns(UserWarning, match="prompt_tokens 2000 above the measured 128-768"):
        long = toolkit.predict_sweep(MODEL, GPU, QUANT, prompt_tokens=2000, limits=(1,), **common)
    assert long["extrapolated"].all() and long["extrapolated_reason"].str.startswith("prompt_tokens 2000 ").all()


def _plan(calibration, prompt_tokens: int):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = toolkit.plan(
            arrival_rate=2,
            prompt_tokens=prompt_tokens,
            output_tokens=128,
            models=MODEL,
            gpus=GPU,
            quants=QUANT,
            backends="vLLM",
            tensor_parallel=(1,),
            calibration=calibration,
        )
    return table, _extrapolation_warnings(caught)


def test_plan_flags_each_candidate_by_its_batch_and_the_workloads_lengths(calibration):
    table, said = _plan(calibration, 512)  # context 640: only the batch can leave the range
    assert len(table) and (table["batch"] > 8).any() and (table["batch"] <= 8).any()
    assert table["extrapolated"].tolist() == (table["batch"] > 8).tolist()
    big = table[table["batch"] > 8].iloc[0]
    assert big["extrapolated_reason"] == f"batch {big['batch']:g} above the measured 1-8"
    assert (table.loc[table["batch"] <= 8, "extrapolated_reason"] == "").all()
    assert len(said) == 1 and said[0].startswith(f"plan: batch {table['batch'].max():g} above the measured 1-8")
    long, said = _plan(calibration, 2000)
    assert long["extrapolated"].all()
    assert long["extrapolated_reason"].str.startswith("prompt_tokens 2000 above the measured 128-768").all()
    assert any(s.startswith("plan: prompt_tokens 2000 above") for s in said)
    plain, _ = _plan(None, 2000)
    assert "extrapolated" not in plain.columns


def test_the_report_says_when_the_held_out_runs_leave_the_range(calibration):
    lanes = pd.DataFrame({"in_flight": [1, 8], "prompt_tokens": [256, 256], "output_tokens": [32, 32]})
    # three replayed requests, two of them in flight together; the last one's prompt is 2000 tokens
    replay = pd.DataFrame(
        {
            "sent_s": [0.0, 0.5, 3.0],
            "end_s": [1.0, 2.0, 4.0],
            "prompt_tokens": [300, 400, 2000],
            "output_tokens": [20] * 3,
        }
    )
    run = _Run(pd.DataFrame(), lanes, "synthetic", replay=type("Replay", (), {"requests": replay})())
    sweep, replayed = range_sentences(calibration, run)
    assert sweep == ""
    assert replayed.startswith("The held-out replay goes beyond the range the calibration was measured over")
    assert "prompt_tokens 2000 above the measured 128-768" in replayed and "batch" not in replayed
    wide = lanes.assign(in_flight=[1, 32])
    sweep, _ = range_sentences(calibration, _Run(pd.DataFrame(), wide, "synthetic"))
    assert sweep == ""  # the sweep's batch is at most its 8 lanes
    assert "batch 32 above the measured 1-8" in range_sentence(calibration, "A sweep", batch=32)

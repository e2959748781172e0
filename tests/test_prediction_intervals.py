"""Predictive intervals carry the calibration's uncertainty through the simulation (issue 40).

The synthetic profile follows the observation model of a server with known efficiencies (``TRUTH``)
times a factor per wave (2%) and per request (0.5%), so that the fit has standard errors of a few
percent. Near saturation a small error in service time is a large error in waiting: the interval of
a waiting-dominated percentile must widen, relative to the prediction, as the load rises.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from synthetic_profile import synthetic_profile

import toolkit
from toolkit._calibration import intervals
from toolkit._calibration.intervals import parameter_draws
from toolkit._model.serving import cost_model

MODEL, GPU, QUANT = "Llama-3.1-8B", "H100 SXM", "bf16"
TRUTH = {"mbu": 0.6, "mfu": 0.4, "step_overhead_ms": 6.0, "request_overhead_ms": 90.0}
CELLS = [("decode", 1, 64, 32), ("decode", 1, 32768, 32)] + [("batch", b, 64, 32) for b in (2, 8, 16)]
CELLS += [("prefill", 1, p, 1) for p in (256, 1024, 4096)]
WORKLOAD = {"prompt_tokens": 512, "output_tokens": 128, "num_requests": 400, "max_batch": 8}


@pytest.fixture(scope="module")
def calibration() -> pd.DataFrame:
    rows = synthetic_profile(cost_model(MODEL, GPU, QUANT, **TRUTH), CELLS, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return toolkit.calibrate(rows, MODEL, GPU, QUANT, fit=tuple(TRUTH))


def test_the_draws_follow_the_fits_standard_errors(calibration, monkeypatch):
    row = calibration.iloc[0]
    assert row["fitted"] == "mbu,mfu,step_overhead_ms,request_overhead_ms"
    monkeypatch.setattr(intervals, "HOST_DRIFT", 0.0)  # the fit's part alone
    drawn = pd.DataFrame(list(parameter_draws(calibration, draws=2000, seed=3)))
    for name in TRUTH:
        # mean within 4 standard errors of the mean of 2000 draws, spread within 10% of the fit's
        assert abs(drawn[name].mean() - row[name]) < 4 * row[f"{name}_fit_se"] / np.sqrt(2000)
        assert drawn[name].std() == pytest.approx(row[f"{name}_fit_se"], rel=0.1)
    assert not any(str(c).startswith("valid_") for c in drawn.columns)  # the point prediction flags, once


def test_the_host_drift_adds_to_the_fits_spread(calibration):
    # an overhead is multiplied by 1 + HOST_DRIFT z, independent of its fitted draw: the variances add
    row = calibration.iloc[0]
    drawn = pd.DataFrame(list(parameter_draws(calibration, draws=2000, seed=3)))
    for name in ("step_overhead_ms", "request_overhead_ms"):
        spread = np.hypot(row[f"{name}_fit_se"], intervals.HOST_DRIFT * row[name])
        assert drawn[name].std() == pytest.approx(spread, rel=0.1)


def test_the_interval_holds_the_prediction_and_widens_with_the_load(calibration):
    light = toolkit.simulate_intervals(MODEL, GPU, QUANT, calibration=calibration, arrival_rate=0.5, **WORKLOAD)
    heavy = toolkit.simulate_intervals(MODEL, GPU, QUANT, calibration=calibration, arrival_rate=3.0, **WORKLOAD)
    point = toolkit.simulate(MODEL, GPU, QUANT, calibration=calibration, arrival_rate=3.0, **WORKLOAD).summary
    assert heavy["ttft_p95_s"].iloc[0] == pytest.approx(point["ttft_p95_s"].iloc[0])  # the same seed, the same run
    for summary in (light, heavy):
        row = summary.iloc[0]
        assert row["interval_draws"] == 20 and row["interval_level"] == 0.9
        for metric in ("queue_wait", "ttft", "tpot", "e2e"):
            for p in ("p50", "p95", "p99"):
                figure = f"{metric}_{p}_s"
                assert row[f"{figure}_low"] <= row[figure] <= row[f"{figure}_high"], figure

    def width(summary: pd.DataFrame, figure: str) -> float:
        row = summary.iloc[0]
        return (row[f"{figure}_high"] - row[f"{figure}_low"]) / row[figure]

    # the queue turns a few percent of service time into much more of waiting
    assert width(heavy, "ttft_p95_s") > 3 * width(light, "ttft_p95_s") > 0


def test_a_sweeps_levels_get_intervals_too(calibration):
    levels = toolkit.predict_sweep_intervals(
        MODEL, GPU, QUANT, calibration=calibration, prompt_tokens=512, output_tokens=64, lanes=16, limits=(1, 8)
    )
    for column in ("wall_s", "dec_tok_s", "ttft_p50_ms", "tpot_p50_ms"):
        assert (levels[f"{column}_low"] <= levels[column]).all() and (levels[column] <= levels[f"{column}_high"]).all()
        assert (levels[f"{column}_high"] > levels[f"{column}_low"]).all()


def test_bad_arguments_name_themselves(calibration):
    with pytest.raises(ValueError, match="draws"):
        toolkit.simulate_intervals(MODEL, GPU, QUANT, calibration=calibration, draws=1, arrival_rate=1.0, **WORKLOAD)
    with pytest.raises(ValueError, match="level"):
        toolkit.simulate_intervals(MODEL, GPU, QUANT, calibration=calibration, level=1.0, arrival_rate=1.0, **WORKLOAD)
    with pytest.raises(ValueError, match="no fitted parameter"):
        list(parameter_draws({"mbu": 0.5, "fitted": ""}, draws=2, seed=0))

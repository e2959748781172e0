"""A calibration cell far off the fit is flagged by name, and a robust fit leaves it out (issue 39).

The synthetic profiles follow the documented observation model of a server with known efficiencies
(``TRUTH``) exactly, times a factor per wave (2%) and per request (0.5%). In one of them every
repeat of one prefill cell takes 10x as long: the repeats agree, so the cell is not noisy, and the
ordinary fit bends toward it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from synthetic_profile import synthetic_profile

from toolkit._calibration.calibrate import calibrate
from toolkit._model.serving import cost_model

MODEL, GPU, QUANT = "Llama-3.1-8B", "H100 SXM", "bf16"
TRUTH = {"mbu": 0.6, "mfu": 0.4, "step_overhead_ms": 6.0, "request_overhead_ms": 90.0}
FIT = tuple(TRUTH)
# (cell, batch, prompt tokens, output tokens); the long decode context tells mbu from the step overhead
CELLS = [("decode", 1, 64, 32), ("decode", 1, 32768, 32)]
CELLS += [("batch", b, 64, 32) for b in (2, 8, 16)]
CELLS += [("prefill", 1, p, 1) for p in (256, 512, 1024, 2048, 4096, 8192)]
SLOW = ("prefill", 1024)
SLOW_CELL = "prefill b=1 p=1024 ttft"


def _profile(seed: int, slow: float) -> pd.DataFrame:
    """Three passes over ``CELLS``; the TTFT of the ``SLOW`` cell times ``slow`` in every one."""
    return synthetic_profile(cost_model(MODEL, GPU, QUANT, **TRUTH), CELLS, seed=seed, slow=(*SLOW, slow))


@pytest.fixture(scope="module")
def slow_profile() -> pd.DataFrame:
    return _profile(1, slow=10.0)


def _misses(row: pd.Series) -> dict[str, float]:
    """How many standard errors each fitted parameter lies from the truth."""
    return {name: abs(row[name] - value) / row[f"{name}_se"] for name, value in TRUTH.items()}


def test_the_ordinary_fit_flags_the_slow_cell_by_name(slow_profile):
    with pytest.warns(UserWarning, match=rf"1 cell\(s\) lie more than 5 standard deviations .*{SLOW_CELL} \+?-"):
        row = calibrate(slow_profile, MODEL, GPU, QUANT, fit=FIT)
    result = row.iloc[0]
    assert result["outlier_cells"] == SLOW_CELL and not result["robust"]
    cells = pd.DataFrame(row.attrs["cell_residuals"]).set_index("cell")
    assert cells["outlier"].sum() == 1 and cells.loc[SLOW_CELL, "outlier"]
    # 10x slower: predicted / measured - 1 = 1/10 - 1 at the truth
    assert cells.loc[SLOW_CELL, "residual_mean"] == pytest.approx(-0.9, abs=0.02)
    assert cells.loc[SLOW_CELL, "z"] < -5 and (cells.drop(index=SLOW_CELL)["z"].abs() < 5).all()
    # the defect the flag warns of: the ordinary fit is pulled many standard errors off the truth
    assert np.nanmax(list(_misses(result).values())) > 5


def test_the_robust_fit_recovers_the_truth_within_its_standard_errors(slow_profile):
    with pytest.warns(UserWarning, match=f"{SLOW_CELL}.*the fit leaves them out"):
        row = calibrate(slow_profile, MODEL, GPU, QUANT, fit=FIT, robust=True)
    result = row.iloc[0]
    assert result["robust"] and result["outlier_cells"] == SLOW_CELL
    assert all(miss < 3 for miss in _misses(result).values()), _misses(result)
    cells = pd.DataFrame(row.attrs["cell_residuals"]).set_index("cell")
    assert cells.loc[SLOW_CELL, "weight"] == 0 and (cells.drop(index=SLOW_CELL)["weight"] == 1).all()


def test_a_profile_without_an_outlier_flags_nothing_and_fits_alike_either_way():
    clean = _profile(2, slow=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = calibrate(clean, MODEL, GPU, QUANT, fit=FIT).iloc[0]
        robust = calibrate(clean, MODEL, GPU, QUANT, fit=FIT, robust=True).iloc[0]
    assert plain["outlier_cells"] == "" and robust["outlier_cells"] == ""
    assert all(miss < 3 for miss in _misses(plain).values()), _misses(plain)
    for name in TRUTH:
        assert robust[name] == plain[name]


def test_robust_must_be_a_bool(slow_profile):
    with pytest.raises(ValueError, match="robust must be True or False"):
        calibrate(slow_profile, MODEL, GPU, QUANT, fit=FIT, robust="yes")


def test_the_report_names_a_flagged_cell(slow_profile):
    from toolkit._report.trust_section import _outlier_sentence

    with pytest.warns(UserWarning):
        row = calibrate(slow_profile, MODEL, GPU, QUANT, fit=FIT).iloc[0]
    assert _outlier_sentence(row) == (
        f" Cells far off the fit (over 5 standard deviations from the others), kept in it: {SLOW_CELL}."
    )
    assert _outlier_sentence(pd.Series({"outlier_cells": "", "robust": False})) == ""

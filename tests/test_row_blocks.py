"""A server whose matrix kernels run rows in blocks of four: the profile's batch of 6 identifies it.

The loopback engine of tests/engine_server.py takes ``a + b n + c K`` ms per decode step (the
coefficients derived by hand in tests/test_profile.py) plus ``REMAINDER_MS`` in a step of more than four
sequences that is not a multiple of four, as llama.cpp's CPU backend does when it multiplies the
output matrix in tiles of four rows and the remainder in a second pass (``logit_remainder_reads``). Calibrated on a profile with a batch of 6 the cost model must put those
milliseconds back at 5, 6 and 7 sequences and not at 4 or 8; calibrated without it, it cannot.
"""

from __future__ import annotations

import pytest
from engine_server import EngineServer
from test_profile import DEVICE, MODEL, QUANT, TRUE, _coefficients

import toolkit as tk

REMAINDER_MS = 40.0


def _remainder(n: int) -> float:
    return REMAINDER_MS if n > 4 and n % 4 else 0.0


@pytest.fixture(scope="module")
def profiles():
    truth = _coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0)
    design = {"repeats": 1, "context_tokens": (64, 2048), "prompt_tokens": (64, 192, 384), "mixed_prompt_tokens": (),
              "output_tokens": 16, "progress": False}  # fmt: skip
    with EngineServer(**truth, extra_ms=_remainder) as server:
        with_six = tk.profile(server.base_url, "test-model", batch_sizes=(1, 2, 4, 6, 8), **design)
        without = tk.profile(server.base_url, "test-model", batch_sizes=(1, 2, 4, 8), **design)
    return truth, with_six, without


def _step(truth: dict, n: int, kv: int) -> float:
    """The engine's decode step by hand (ms)."""
    return truth["a_ms"] + truth["b_ms"] * n + truth["c_ms"] * kv + _remainder(n)


def test_a_batch_of_six_identifies_the_blocks_of_four(profiles):
    truth, with_six, _ = profiles
    fit = tk.calibrate(with_six, MODEL, DEVICE, QUANT)
    assert "logit_remainder_reads" in fit["fitted"].iloc[0].split(","), fit["held_reason"].iloc[0]
    cm = tk.cost_model(MODEL, DEVICE, QUANT, calibration=fit)
    for n in (4, 5, 6, 7, 8):
        assert cm.step_ms(n, n * 100) == pytest.approx(_step(truth, n, n * 100), rel=0.05), n


def test_without_a_batch_above_four_the_calibration_misses_them(profiles):
    truth, _, without = profiles
    fit = tk.calibrate(without, MODEL, DEVICE, QUANT)
    assert fit["logit_remainder_reads"].iloc[0] == 0
    cm = tk.cost_model(MODEL, DEVICE, QUANT, calibration=fit)
    # 4 and 8 are still right; 6 misses by nearly the whole REMAINDER_MS
    for n in (4, 8):
        assert cm.step_ms(n, n * 100) == pytest.approx(_step(truth, n, n * 100), rel=0.05), n
    assert _step(truth, 6, 600) - cm.step_ms(6, 600) > 0.8 * REMAINDER_MS

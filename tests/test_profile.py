"""profile() and calibrate(): a designed experiment recovers a server's known timing.

The loopback engine (tests/engine_server.py) takes ``a + b n + c K + e P`` ms per step (``n``
sequences decoding, holding ``K`` tokens, and ``P`` prompt tokens prefilled) and lets each request
wait ``request_ms`` before it queues, so a prompt alone gets its first token after ``d + e P`` ms with
``d = request_ms + a``. The synthetic model and device below are chosen so that the cost model can
express exactly that; the efficiencies that do are derived by hand here (not by the toolkit), and the
fitted model's own coefficients, read back from ``CostModel.step_ms`` and ``ttft_ms``, must match the
server's within 5%.
"""

from __future__ import annotations

import os

import pytest
from engine_server import EngineServer

import toolkit as tk
from toolkit._sweep.profile_cells import mark_noisy

# One layer, one head of width 1: 4 KV bytes per token (K and V, fp16) and 4 attention FLOPs per
# (query, key) pair, so attention is a rounding error beside 2e5 FLOPs of weights per token.
MODEL = {
    "name": "synthetic",
    "params_b": 100_256e-9,
    "active_params_b": 100_256e-9,
    "layers": 1,
    "hidden_size": 4,
    "attention_heads": 1,
    "kv_heads": 1,
    "head_dim": 1,
    "intermediate_size": 4,
    "vocab_size": 64,  # 256 tied embedding parameters: body 100,000, logits 512 FLOPs per token
    "tied_embeddings": True,
    "max_context": 65536,
}
QUANT = {"name": "synthetic-0.4bit", "bits_per_weight": 0.4, "compute": "fp16"}  # 5,012.8 weight bytes
TRUE = {"mbu": 0.5, "mfu": 0.4, "step_overhead_ms": 4.936, "request_overhead_ms": 60.0, "serial_share": 1.0}
BANDWIDTH_B_S = 2e5 / TRUE["mbu"]  # effective 2e5 B/s
FLOPS = 1.005e8 / TRUE["mfu"]  # effective 1.005e8 FLOP/s
DEVICE = {
    "name": "synthetic-device",
    "memory_gb": 8.0,
    "bandwidth_gb_s": BANDWIDTH_B_S / 1e9,
    "fp16_tflops": FLOPS / 1e12,
    "interconnect_gb_s": 1.0,
}


def _coefficients(
    eff_bw: float, eff_flops: float, step_ms: float, request_ms: float, serial: float, kv_bytes: float = 4.0
) -> dict:
    """The server's a..e (ms) for these effective rates, by hand from the step formula: memory
    (weights 5,012.8 B, ``kv_bytes`` per held token and per new token) plus, as ``serial`` of it,
    compute (200,000 FLOPs per token, 512 per decoded token's logits, 4 per attended key)."""
    weights_ms = 5_012.8 / eff_bw * 1e3
    kv_ms = kv_bytes / eff_bw * 1e3
    return {
        "a_ms": step_ms + weights_ms,
        "b_ms": kv_ms + serial * (200_000 + 512) / eff_flops * 1e3,
        "c_ms": kv_ms + serial * 4 / eff_flops * 1e3,
        "e_ms": kv_ms + 200_000 / eff_flops * 1e3,
        "request_ms": request_ms,
    }


def _seen(server: dict, transport_ms: float = 0.0) -> dict:
    """a..e as a client reads them: ``d`` is the request's own cost, the loopback and ``a``."""
    return {
        **{k: server[k] for k in ("a_ms", "b_ms", "c_ms", "e_ms")},
        "d_ms": server["request_ms"] + server["a_ms"] + transport_ms,
    }


def _read_back(cm) -> dict:
    """a..e of a fitted cost model, from its own step_ms and ttft_ms; ``b`` from steps of two and
    three sequences, so that a ``batched_mbu_factor`` off 1 shows in ``a`` and the factor, not in ``b``."""
    c = (cm.step_ms(1, 2000) - cm.step_ms(1, 500)) / 1500
    b = cm.step_ms(3, 3 * 500) - cm.step_ms(2, 2 * 500) - 500 * c
    e = (cm.ttft_ms(400) - cm.ttft_ms(200)) / 200
    return {
        "a_ms": cm.step_ms(1, 500) - b - 500 * c,
        "b_ms": b,
        "c_ms": c,
        "d_ms": cm.ttft_ms(200) - 200 * e,
        "e_ms": e,
    }


def _small_profile(server: EngineServer, **overrides):
    """A quick profile: short prompts, few tokens, one repeat unless overridden."""
    design = {"repeats": 1, "context_tokens": (8, 16), "prompt_tokens": (8, 16, 24), "batch_sizes": (1, 2, 3),
              "mixed_prompt_tokens": ()}  # fmt: skip
    return tk.profile(server.base_url, "test-model", **{**design, "output_tokens": 4, "progress": False, **overrides})


@pytest.fixture(scope="module")
def transport_ms() -> float:
    """What a client measures as TTFT from a server that takes no time: loopback HTTP, parsing and
    event-loop wake-ups. It is part of every TTFT the client sees, so of the ``d`` it recovers."""
    with EngineServer(a_ms=0, b_ms=0, c_ms=0, e_ms=0, request_ms=0) as server:
        frame = _small_profile(server, repeats=3, output_tokens=2)
    return float(frame.loc[frame["cell"].eq("prefill"), "ttft_ms"].median())


@pytest.fixture(scope="module")
def profiled():
    """The standard profile of the server with every coefficient in play, and that server's a..e."""
    truth = _coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0)
    with EngineServer(**truth) as server:
        return _profile(server), truth


def _profile(server: EngineServer):
    return tk.profile(
        server.base_url,
        "test-model",
        repeats=3,
        context_tokens=(64, 2048),
        prompt_tokens=(64, 192, 384),
        batch_sizes=(1, 2, 4, 8),
        mixed_prompt_tokens=(),
        output_tokens=16,
        progress=False,
    )


def test_the_hand_derived_coefficients_are_round_numbers():
    # the synthetic specs were chosen for a = 30 ms, b = e = 2 ms, c = 0.02 ms, d = 90 ms
    want = _seen(_coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0))
    assert want["a_ms"] == pytest.approx(30.0, rel=1e-3)
    assert want["b_ms"] == pytest.approx(2.0, rel=1e-2)
    assert want["c_ms"] == pytest.approx(0.02, rel=5e-3)
    assert want["d_ms"] == pytest.approx(90.0, rel=1e-3)
    assert want["e_ms"] == pytest.approx(2.0, rel=1e-2)


def test_profile_then_calibrate_recovers_every_coefficient_within_5_percent(profiled, transport_ms):
    frame, server = profiled
    assert frame["outcome"].eq("ok").all()
    assert set(frame["cell"]) == {"decode", "batch", "prefill"}
    assert frame.groupby("wave")["batch"].size().sum() == len(frame)
    # the server counts one token per word: every prompt and output is exact
    assert (frame["prompt_tokens"] == frame["prompt_tokens_target"]).all()
    assert (frame["output_tokens"] == frame["output_tokens_target"]).all()
    fit = tk.calibrate(frame, MODEL, DEVICE, QUANT)
    row = fit.iloc[0]
    # the server's serial_share and batched_mbu_factor are 1, the top of their ranges: a fit that lands
    # there is held there, with the reason, and is then exact; with no batch above four that is not a
    # multiple of four, logit_remainder_reads is not exercised and stays at its default 0; its output
    # matrix is 256 of its 100,256 parameters, too little for a profile to see the output matrix's own
    # reads, so logit_batched_reads lands wherever noise puts it (held at its default or a bound, or
    # fitted with no effect on any step); nothing else is held
    held = set(filter(None, row["held"].split(",")))
    unseen = {"logit_remainder_reads", "logit_batched_reads"}
    assert held <= {"serial_share", "batched_mbu_factor", *unseen}, row["held_reason"]
    for name in held - unseen:
        assert f"{name} held at its upper bound 1: it fitted there" in row["held_reason"]
    assert row["logit_remainder_reads"] == 0
    got = _read_back(tk.cost_model(MODEL, DEVICE, QUANT, calibration=fit))
    truth = _seen(server, transport_ms)
    for name, value in truth.items():
        assert got[name] == pytest.approx(value, rel=0.05), (name, got, truth)
    for name in ("mbu", "mfu", "serial_share"):
        assert row[name] == pytest.approx(TRUE[name], rel=0.05), name
    # the engine reads its weights as fast in a step of many tokens as in a step of one
    assert row["batched_mbu_factor"] == pytest.approx(1.0, rel=0.05)


def test_a_coefficient_the_server_does_not_exercise_is_reported_and_held(transport_ms):
    # a server whose step time does not grow with the context (c = 0; its KV format is all but free):
    # bandwidth then shows only in a = step overhead + weights / bandwidth, so the data cannot tell
    # mbu from step_overhead_ms, and calibrate must say so rather than trade one against the other
    kv = {"name": "synthetic-kv", "bits_per_element": 1e-4}  # 2.5e-5 bytes per token
    truth = _coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0, kv_bytes=0.0)
    with EngineServer(**truth) as server:
        frame = _profile(server)
    fit = tk.calibrate(frame, MODEL, DEVICE, QUANT, kv_dtype=kv)
    row = fit.iloc[0]
    held = set(row["held"].split(","))
    assert held & {"mbu", "step_overhead_ms"}, row["held_reason"]
    assert not {"mbu", "step_overhead_ms"} <= set(row["fitted"].split(","))
    # what the data do show is still recovered
    got = _read_back(tk.cost_model(MODEL, DEVICE, QUANT, kv_dtype=kv, calibration=fit))
    truth = _seen(truth, transport_ms)
    for name in ("a_ms", "b_ms", "d_ms", "e_ms"):
        assert got[name] == pytest.approx(truth[name], rel=0.05), (name, got, truth)


def test_profile_records_the_conditions_of_each_wave():
    truth = _coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0)
    with EngineServer(**truth) as server:
        frame = _small_profile(server)
    waves = frame.groupby("wave").first()
    assert len(waves) == 2 + 2 + 3  # two decode, two batch (2 and 3), three prefill cells
    assert (waves["wave_s"] > 0).all()
    assert waves["client_cpu_s"].gt(0).all()
    if os.path.exists("/proc/stat"):
        assert waves["steal_share"].between(0, 1).all()
    # a remote server's process is unknown: its CPU time and the others' share are NaN, never 0
    assert waves["server_cpu_s"].isna().all() and waves["other_cpu_share"].isna().all()
    assert (frame["server_version"] == "unknown").all() and (frame["server_flags"] == "unknown").all()


def test_a_budget_spent_in_set_up_measures_nothing_and_says_so():
    # budget_s counts from the call: one too short for the probe and the calibration is a TimeoutError
    # naming it (the waves the budget stops are rows of their own, see test_setup_deadline.py)
    truth = _coefficients(2e5, 1.005e8, TRUE["step_overhead_ms"], TRUE["request_overhead_ms"], 1.0)
    with EngineServer(**truth) as server, pytest.raises(TimeoutError, match=r"budget_s=1e-06 s ran out during set-up"):
        _small_profile(server, repeats=2, batch_sizes=(1, 2, 4), budget_s=1e-6)


def test_noisy_cells_are_marked_and_left_out_of_the_fit(profiled):
    frame = profiled[0]
    assert not frame["noisy"].any()
    shaken = frame.copy()
    batch8 = shaken["batch"].eq(8) & shaken["repeat"].eq(0)
    shaken.loc[batch8, ["tpot_ms", "itl_ms_p50"]] *= 3  # one repeat three times slower
    marked = mark_noisy(shaken.drop(columns="noisy"))
    assert set(marked.loc[marked["noisy"], "batch"]) == {8}
    clean = tk.calibrate(frame, MODEL, DEVICE, QUANT).iloc[0]
    without = tk.calibrate(marked, MODEL, DEVICE, QUANT).iloc[0]
    assert without["n_tpot"] == clean["n_tpot"] - 3 * 8


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("repeats", 0, "repeats"),
        ("context_tokens", (64,), "context_tokens must hold at least 2"),
        ("prompt_tokens", (64, 64, 128), "prompt_tokens must hold at least 3"),
        ("batch_sizes", (1, 2, 512), r"batch_sizes\[2\]"),
        ("output_tokens", 1, "output_tokens"),
        ("budget_s", 0, "budget_s"),
        ("progress", "yes", "progress"),
    ],
)
def test_bad_arguments_name_the_field(argument, value, message):
    with pytest.raises(ValueError, match=message):
        tk.profile("http://127.0.0.1:9", "m", **{argument: value})

"""Prefill breaks: a server that prefills the last tokens of a prompt in steps of their own.

llama-server on a sliding-window model (Gemma 3) stops filling a prompt into the batch when 4 + n_ubatch
and when 4 tokens remain, to checkpoint the slot's state before them
(``toolkit._sweep.llama_server.SCHEDULING``). The simulator and the calibration follow it when given
``prefill_breaks``; the step counts below are derived by hand from that rule.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import toolkit as tk
from toolkit._calibration.fit import predict_ms
from toolkit._calibration.observations import observations
from toolkit._calibration.step_model import prefill_chunks
from toolkit._sweep.llama_server import SCHEDULING

BREAKS = (4, 516)
STEP_MS = 10.0


class _Flat:
    """Every step takes 10 ms, whatever it holds: a request's times count its steps."""

    kv_budget_tokens = 10**6
    request_overhead_ms = 0.0
    kv_block_tokens = 1

    def step_ms(self, n, kv, p, c):
        return STEP_MS + 0 * np.asarray(kv, dtype=float)


def _lone(prompt: int, output: int, breaks=BREAKS, budget: int = 512) -> pd.Series:
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [prompt], "output_tokens": [output]})
    result = tk.simulate(
        trace=trace,
        cost=_Flat(),
        max_batch=8,
        max_num_batched_tokens=budget,
        warmup_fraction=0.0,
        prefill_breaks=breaks,
    )
    return result.requests.iloc[0]


@pytest.mark.parametrize(
    ("prompt", "steps"),
    [
        (4, 1),  # nothing before the last 4
        (5, 2),  # 1, then 4
        (29, 2),  # 25, then 4 (what the server's log showed for a 29-token prompt)
        (516, 2),  # 512, then 4
        (600, 3),  # 84, 512, 4
        (1100, 4),  # 512 (the budget), 72, 512, 4
    ],
)
def test_a_lone_prompt_takes_one_step_per_chunk_between_the_breaks(prompt, steps):
    row = _lone(prompt, 3)
    assert row["ttft_s"] * 1e3 == pytest.approx(steps * STEP_MS)
    assert row["e2e_s"] * 1e3 == pytest.approx((steps + 2) * STEP_MS)
    # without breaks only the token budget cuts a prompt
    plain = _lone(prompt, 3, breaks=())
    assert plain["ttft_s"] * 1e3 == pytest.approx(-(-prompt // 512) * STEP_MS)


def test_the_running_decodes_take_a_token_in_every_step_of_a_broken_prefill():
    # A: 5 tokens of prompt (steps 1 and 2 at 10 and 20 ms), then 10 tokens. B arrives at 25 ms with
    # 29 tokens: its prefill is steps 4 (25 tokens) and 5 (4 tokens), which also decode A; A's
    # first token came at 20 ms and its tenth at 20 + 9 x 10 ms.
    trace = pd.DataFrame({"arrival_s": [0.0, 0.025], "prompt_tokens": [5, 29], "output_tokens": [10, 2]})
    result = tk.simulate(
        trace=trace, cost=_Flat(), max_batch=8, max_num_batched_tokens=512, warmup_fraction=0.0, prefill_breaks=BREAKS
    )
    a, b = result.requests.iloc[0], result.requests.iloc[1]
    assert a["ttft_s"] * 1e3 == pytest.approx(20.0)
    assert a["e2e_s"] * 1e3 == pytest.approx(110.0)
    assert b["ttft_s"] * 1e3 == pytest.approx(50.0 - 25.0)  # steps ending at 40 and 50 ms
    assert result.config["prefill_breaks"] == BREAKS


def test_prefill_chunks_by_hand():
    # step by step, first step first: 3 = 3 (no break below 3); 29 = 25 + 4; 600 = 84 + 512 + 4
    chunks = prefill_chunks(np.array([3.0, 29.0, 600.0]), BREAKS, 512)
    sizes = np.array([c for c, _ in chunks])
    before = np.array([d for _, d in chunks])
    np.testing.assert_array_equal(sizes, [[3, 25, 84], [0, 4, 512], [0, 0, 4]])
    np.testing.assert_array_equal(before[:, 2], [0, 84, 596])
    np.testing.assert_array_equal(before[:2, 1], [0, 25])


class _Recording(_Flat):
    """:class:`_Flat`, noting the prompt tokens and earlier tokens of every step that prefills."""

    def __init__(self):
        self.prefills = []

    def step_ms(self, n, kv, p, c):
        if np.ndim(p) == 0 and p > 0:
            self.prefills.append((int(p), int(c)))
        return super().step_ms(n, kv, p, c)


# By hand from the rule, a budget of 512 and breaks 4 and 516: a step takes at most 512 tokens and at
# most (left - 516) while more than 516 are left, at most (left - 4) while more than 4 are.
HAND_CHUNKS = {
    4: [4],
    5: [1, 4],
    30: [26, 4],
    516: [512, 4],
    1000: [484, 512, 4],
    1100: [512, 72, 512, 4],
    2000: [512, 512, 460, 512, 4],  # 1484 before the break at 516 is more than the budget: 512, 512, 460
}


@pytest.mark.parametrize("prompt", sorted(HAND_CHUNKS))
def test_the_engine_and_the_calibration_cut_a_prompt_into_the_same_chunks(prompt):
    expected = HAND_CHUNKS[prompt]
    before = list(np.cumsum([0, *expected[:-1]]))
    cost = _Recording()
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [prompt], "output_tokens": [1]})
    tk.simulate(
        trace=trace, cost=cost, max_batch=8, max_num_batched_tokens=512, warmup_fraction=0.0, prefill_breaks=BREAKS
    )
    assert cost.prefills == list(zip(expected, before, strict=True))
    chunks = [(c[0], d[0]) for c, d in prefill_chunks(np.array([float(prompt)]), BREAKS, 512)]
    assert chunks == list(zip(expected, before, strict=True))


def _profile(cm, breaks) -> pd.DataFrame:
    """A profile whose every request takes exactly what ``cm`` says, prefilled as ``breaks`` cut it."""
    rows = []
    for _ in range(3):
        for context in (64, 1024):
            rows.append(("decode", 1, context, 32, np.nan, float(cm.step_ms(1, context + 16))))
        for batch in (2, 4, 8):
            rows += [("batch", batch, 64, 32, np.nan, float(cm.step_ms(batch, batch * (64 + 16))))] * batch
        for prompt in (32, 128, 384, 768):
            chunks = prefill_chunks(np.array([prompt - 1.0]), breaks, cm.max_num_batched_tokens)
            steps = [float(cm.step_ms(0, 0, c[0], 1 + d[0], c[0] + d[0] >= prompt - 1)) for c, d in chunks if c[0] > 0]
            rows.append(("prefill", 1, prompt, 1, sum(steps) + cm.request_overhead_ms, np.nan))
    frame = pd.DataFrame(rows, columns=["cell", "batch", "prompt_tokens", "output_tokens", "ttft_ms", "step"])
    frame["wave"] = np.arange(len(frame))  # each request its own wave: no clustering
    frame["prompt_tokens_target"] = frame["prompt_tokens"]
    frame["cached_tokens"] = 1.0  # the template's first token, restored from a checkpoint
    frame["tpot_ms"] = frame["step"]
    frame["itl_ms_p50"] = frame["step"]
    frame["outcome"] = "ok"
    frame["noisy"] = False
    return frame.drop(columns="step")


HOST = {"name": "cpu-like", "memory_gb": 64.0, "bandwidth_gb_s": 24.0, "fp16_tflops": 0.19, "interconnect_gb_s": 1.0}
TRUTH = {"mbu": 0.4, "mfu": 0.35, "serial_share": 1.0, "batched_mbu_factor": 0.5, "request_overhead_ms": 30.0}


def test_calibrating_with_the_servers_breaks_recovers_its_parameters_and_without_them_does_not():
    cm = tk.cost_model("Gemma-3-270M", HOST, "q4_k_m", **TRUTH)
    profile = _profile(cm, BREAKS)
    obs = observations(profile)
    ttft = obs["kind"].eq("ttft").to_numpy()
    # the calibration's own prediction of a broken prefill is the sum of its steps, as built above
    np.testing.assert_allclose(predict_ms(cm, obs, BREAKS), obs["measured_ms"], rtol=1e-9)
    fitted = tk.calibrate(profile, "Gemma-3-270M", HOST, "q4_k_m", prefill_breaks=BREAKS).iloc[0]
    for name in ("mbu", "mfu", "batched_mbu_factor", "request_overhead_ms"):
        assert fitted[name] == pytest.approx(TRUTH[name], rel=0.02), name
    assert fitted["prefill_breaks"] == "4,516"
    # One step per prompt fits these TTFTs too, but only by reading what the split adds (the last 4
    # tokens' second pass over the weights, less the output matrix the chunk before them does not read)
    # as request overhead: time the simulator spends off the engine, where running decodes do not wait
    # for it.
    plain = tk.calibrate(profile, "Gemma-3-270M", HOST, "q4_k_m").iloc[0]
    plain_cm = tk.cost_model("Gemma-3-270M", HOST, "q4_k_m", calibration=plain)
    assert np.abs(predict_ms(plain_cm, obs) / obs["measured_ms"] - 1)[ttft].max() < 0.02
    own = np.array([31.0, 127.0, 383.0, 767.0])  # the profile's prompts less their cached first token
    split = cm.step_ms(0, 0, own - 4, 1, 0) + cm.step_ms(0, 0, 4, own - 3, 1) - cm.step_ms(0, 0, own, 1)
    assert plain["request_overhead_ms"] - TRUTH["request_overhead_ms"] == pytest.approx(split.mean(), rel=0.15)


def test_the_llama_server_scheduling_is_its_batch_ubatch_and_breaks():
    # llama.cpp's defaults: --batch-size 2048, --ubatch-size 512; breaks at 4 and 4 + n_ubatch
    assert SCHEDULING == {
        "max_num_batched_tokens": 2048,
        "ubatch_tokens": 512,
        "prefill_breaks": (4, 516),
        "prefill_start_breaks": (1,),
    }


@pytest.mark.parametrize("value", ["4", [0], [4.5], None])
def test_bad_breaks_name_the_argument(value):
    with pytest.raises(ValueError, match="prefill_breaks"):
        tk.simulate(
            trace=pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [4], "output_tokens": [2]}),
            cost=_Flat(),
            prefill_breaks=value,
        )


# The start break: llama-server stops filling a prompt where its last user message starts (position
# 1, after BOS, in a chat of one user message), so a prompt found in no cache runs its first token
# alone. Chunks seen in the server's debug log (-lv 5) on this project's host, 2026-12-04 22:45
# (Gemma-3-270M, profile then held-out replay): (prompt tokens, tokens restored from the cache) ->
# the chunks each ran as.
LOGGED_CHUNKS = {
    (384, 0): [1, 379, 4],  # profile prefill cell, nothing cached
    (768, 0): [1, 251, 512, 4],
    (128, 1): [123, 4],  # BOS restored from a checkpoint: no start break
    (204, 0): [1, 199, 4],  # replay
    (54, 0): [1, 49, 4],
    (25, 20): [1, 4],  # 20 restored, 5 left: the end breaks alone
    (50, 1): [45, 4],
}
STARTS = (1,)


@pytest.mark.parametrize(("prompt", "cached"), sorted(LOGGED_CHUNKS))
def test_the_engine_and_the_calibration_cut_prompts_as_the_servers_log_shows(prompt, cached):
    expected = LOGGED_CHUNKS[(prompt, cached)]
    before = list(np.cumsum([0, *expected[:-1]]))
    cost = _Recording()
    trace = pd.DataFrame(
        {"arrival_s": [0.0], "prompt_tokens": [prompt], "cached_tokens": [cached], "output_tokens": [1]}
    )
    tk.simulate(
        trace=trace,
        cost=cost,
        max_batch=8,
        max_num_batched_tokens=512,
        warmup_fraction=0.0,
        prefill_breaks=BREAKS,
        prefill_start_breaks=STARTS,
    )
    # each step attends to the cached tokens and the chunks before it
    assert cost.prefills == [(c, cached + d) for c, d in zip(expected, before, strict=True)]
    got = prefill_chunks(np.array([prompt - cached + 0.0]), BREAKS, 512, np.array([cached + 0.0]), STARTS)
    assert [(c[0], d[0]) for c, d in got if c[0] > 0] == list(zip(expected, before, strict=True))


class _PerToken(_Flat):
    """A step takes 10 ms plus 1 ms per prompt token it prefills."""

    def step_ms(self, n, kv, p, c):
        return STEP_MS + np.asarray(p, dtype=float) + 0 * np.asarray(kv, dtype=float)


def _two(cached: int, starts) -> pd.DataFrame:
    trace = pd.DataFrame(
        {"arrival_s": [0.0, 0.005], "prompt_tokens": [105, 55], "cached_tokens": [cached] * 2, "output_tokens": [2, 2]}
    )
    return tk.simulate(
        trace=trace,
        cost=_PerToken(),
        max_batch=8,
        max_num_batched_tokens=512,
        warmup_fraction=0.0,
        prefill_breaks=BREAKS,
        prefill_start_breaks=starts,
    ).requests


def test_a_start_break_puts_a_new_prompts_bulk_beside_the_first_prompts_and_its_last_tokens_beside_little():
    # By hand, nothing cached, A (105 tokens) at 0 and B (55 tokens) at 5 ms, 2 output tokens each:
    # step 1, 0-11 ms: A's BOS (1 token); step 2, 11-122: A's 100 (up to its last 4) and B's BOS;
    # step 3, 122-186: A's last 4 and B's 50 (A's first token); step 4, 186-200: A's decode and B's
    # last 4 (A done, B's first token); step 5, 200-210: B's decode.
    a, b = _two(0, STARTS).itertuples()
    assert (a.ttft_s * 1e3, a.e2e_s * 1e3) == pytest.approx((186.0, 200.0))
    assert (b.ttft_s * 1e3, b.e2e_s * 1e3) == pytest.approx((195.0, 205.0))
    # Without the start break: step 1, 0-111: A's 101; step 2, 111-176: A's last 4 and B's 51;
    # step 3, 176-190: A's decode and B's last 4; step 4, 190-200: B's decode.
    a, b = _two(0, ()).itertuples()
    assert (a.ttft_s * 1e3, a.e2e_s * 1e3) == pytest.approx((176.0, 190.0))
    assert (b.ttft_s * 1e3, b.e2e_s * 1e3) == pytest.approx((185.0, 195.0))
    # BOS found in the cache: the prefills start past position 1, so the start break cuts nothing:
    # step 1, 0-110: A's 100; step 2, 110-174: A's last 4 and B's 50; step 3, 174-188; step 4, 188-198
    a, b = _two(1, STARTS).itertuples()
    assert (a.ttft_s * 1e3, a.e2e_s * 1e3) == pytest.approx((174.0, 188.0))
    assert (b.ttft_s * 1e3, b.e2e_s * 1e3) == pytest.approx((183.0, 193.0))


@pytest.mark.parametrize("cached", [[-1], [4], [1.5]])
def test_bad_cached_tokens_name_the_column(cached):
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [4], "cached_tokens": cached, "output_tokens": [2]})
    with pytest.raises(ValueError, match="cached_tokens"):
        tk.simulate(trace=trace, cost=_Flat())


@pytest.mark.parametrize("value", ["1", [0], None])
def test_bad_start_breaks_name_the_argument(value):
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [4], "output_tokens": [2]})
    with pytest.raises(ValueError, match="prefill_start_breaks"):
        tk.simulate(trace=trace, cost=_Flat(), prefill_start_breaks=value)
    with pytest.raises(ValueError, match="prefill_start_breaks"):
        tk.calibrate(_profile(tk.cost_model("Gemma-3-270M", HOST, "q4_k_m"), BREAKS), "Gemma-3-270M", HOST,
                     "q4_k_m", prefill_start_breaks=value)  # fmt: skip

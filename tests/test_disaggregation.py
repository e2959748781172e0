"""Disaggregated prefill/decode (xPyD): the KV transfer, the two pools of the simulator, bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from toolkit import Disaggregation, kv_links, kv_transfer_ms, simulate

# OPT-66B (facebook/opt-66b config.json: 64 layers, hidden 9216 in 72 heads of 128, FFN 36864, vocab 50272)
OPT_66B = {
    "name": "OPT-66B",
    "params_b": 65.7,
    "layers": 64,
    "hidden_size": 9216,
    "attention_heads": 72,
    "kv_heads": 72,
    "head_dim": 128,
    "intermediate_size": 36864,
    "vocab_size": 50272,
    "max_context": 2048,
}


class LinearStep:
    """Step = ``base_ms`` + ``per_prefill_ms`` per prefilled token; no request overhead; KV bytes stated."""

    def __init__(self, kv_budget_tokens: int = 10**6, base_ms: float = 10.0, per_prefill_ms: float = 0.01):
        self.kv_budget_tokens = kv_budget_tokens
        self.request_overhead_ms = 0.0
        self.kv_bytes_per_token = 1e6
        self.base_ms, self.per_prefill_ms = base_ms, per_prefill_ms

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        step = self.base_ms + self.per_prefill_ms * np.asarray(prefill_tokens, dtype=float)
        return step + 0.0 * np.asarray(kv_tokens, dtype=float)  # broadcast over kv_tokens


def _trace(rng: np.random.Generator, n: int, rate: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
            "prompt_tokens": rng.integers(10, 400, n),
            "output_tokens": rng.integers(1, 40, n),
        }
    )


FREE_LINK = {"link_gb_s": math.inf, "link_latency_us": 0.0}


def test_ttft_is_the_prefill_pools_own_queue_with_a_free_link():
    trace = _trace(np.random.default_rng(3), 300, rate=300.0)  # busy enough that prefills queue
    pools = Disaggregation(prefill_replicas=2, decode_replicas=1, **FREE_LINK)
    res = simulate(trace=trace, cost=LinearStep(), max_batch=2, disaggregation=pools)
    alone = simulate(trace=trace.assign(output_tokens=1), cost=LinearStep(), max_batch=2, replicas=2)
    assert alone.requests["queue_wait_s"].max() > 0.02  # the prefill pool does queue (steps of >= 10 ms)
    np.testing.assert_array_equal(res.requests["ttft_s"].to_numpy(), alone.requests["ttft_s"].to_numpy())
    np.testing.assert_array_equal(res.requests["transfer_s"].to_numpy(), 0.0)
    one = res.requests["output_tokens"] == 1
    np.testing.assert_array_equal(res.requests.loc[one, "e2e_s"], res.requests.loc[one, "ttft_s"])


def test_one_request_by_hand_waits_for_its_kv():
    # prompt 100, output 5. Prefill: 10 + 0.01 x 100 = 11 ms (first token). Transfer: 100 tokens x 1e6 B
    # / (10 GB/s x 0.5) = 20 ms, + 1,000 us = 21 ms. Decode pool: one step feeding the first token
    # (10 + 0.01 ms), then 3 decode steps of 10 ms: 4 more tokens. E2E 11 + 21 + 40.01 = 72.01 ms.
    trace = pd.DataFrame({"arrival_s": [0.5], "prompt_tokens": [100], "output_tokens": [5]})
    link = {"link_gb_s": 10.0, "link_efficiency": 0.5, "link_latency_us": 1000.0}
    pools = {"prefill_replicas": 1, "decode_replicas": 1, **link}
    row = simulate(trace=trace, cost=LinearStep(), disaggregation=pools, warmup_fraction=0.0).requests.iloc[0]
    assert row["ttft_s"] == pytest.approx(0.011, rel=1e-12)
    assert row["transfer_s"] == pytest.approx(0.021, rel=1e-12)
    assert row["e2e_s"] == pytest.approx(0.07201, rel=1e-12)
    assert row["tpot_s"] == pytest.approx((0.07201 - 0.011) / 4, rel=1e-12)
    assert row["decode_wait_s"] == 0.0


def test_decode_admission_waits_for_decode_memory():
    # Two requests of prompt 100, output 5, both prefilled in one 11 ms step... the second arrives with
    # the first's; the decode pool's KV holds 150 tokens, one request (105). The second waits for the
    # first's 4 decode steps (40.01 ms) in the decode pool.
    trace = pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [100, 100], "output_tokens": [5, 5]})
    pools = {"prefill_replicas": 2, "decode_replicas": 1, **FREE_LINK}
    res = simulate(trace=trace, cost=LinearStep(kv_budget_tokens=150), disaggregation=pools, warmup_fraction=0.0)
    waits = sorted(res.requests["decode_wait_s"])
    assert waits[0] == 0.0
    assert waits[1] == pytest.approx(0.04001, rel=1e-9)
    assert sorted(res.requests["e2e_s"]) == pytest.approx([0.011 + 0.04001, 0.011 + 2 * 0.04001], rel=1e-9)


def test_transfer_time_by_hand_for_opt_66b():
    # 2 (K, V) x 64 layers x 72 heads x 128 x 2 bytes = 2,359,296 B per token; a 512-token prompt moves
    # 1.208e9 B, DistServe's "approximately 1.13GB" (GiB) for OPT-66B (arXiv 2401.09670 section 3.3).
    per_token = 2 * 64 * 72 * 128 * 2
    assert per_token * 512 / 2**30 == pytest.approx(1.13, abs=0.005)
    # A100 80GB NVLink: 300 GB/s per direction (gpus.csv), efficiency 0.84 and 10 us (kv_links.csv)
    expected = per_token * 512 / (300e9 * 0.84) * 1e3 + 0.010
    assert kv_transfer_ms(OPT_66B, 512, gpu="A100 80GB") == pytest.approx(expected, rel=1e-12)
    # InfiniBand: 50 GB/s at 0.87; tensor parallel 4 moves a quarter per GPU, in parallel
    ib = per_token * 512 / 4 / (50e9 * 0.87) * 1e3 + 0.010
    assert kv_transfer_ms(OPT_66B, 512, gpu="A100 80GB", link="infiniband", tensor_parallel=4) == pytest.approx(ib)
    assert set(kv_links()["link"]) == {"nvlink", "infiniband", "pcie"}
    # an L4 has PCIe only: 32 GB/s at 0.78 (kv_links.csv); NVLink is refused
    pcie = per_token * 512 / (32e9 * 0.78) * 1e3 + 0.010
    assert kv_transfer_ms(OPT_66B, 512, gpu="L4", link="pcie") == pytest.approx(pcie, rel=1e-12)
    with pytest.raises(ValueError, match="NVLink-class GPU"):
        kv_transfer_ms(OPT_66B, 512, gpu="L4")


@pytest.mark.parametrize(
    ("pools", "match"),
    [
        ({"prefill_replicas": 0, "decode_replicas": 1}, "prefill_replicas must be"),
        ({"prefill_replicas": 1, "decode_replicas": 10**5}, "decode_replicas must be"),
        ({"prefill_replicas": 1}, "needs decode_replicas"),
        ({"prefill_replicas": 1, "decode_replicas": 1, "prefill_pool": 2}, "unknown fields.*allowed"),
        ({"prefill_replicas": 1, "decode_replicas": 1, "link": "ethernet"}, "link must be one of"),
        ({"prefill_replicas": 1, "decode_replicas": 1, "link_efficiency": 1.5}, "link_efficiency must be"),
        ({"prefill_replicas": 1, "decode_replicas": 1, "decode_max_batch": 0}, "decode_max_batch must be"),
        ("2P1D", "disaggregation must be a Disaggregation"),
    ],
)
def test_bad_disaggregation_names_the_field(pools, match):
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [3]})
    with pytest.raises(ValueError, match=match):
        simulate(trace=trace, cost=LinearStep(), disaggregation=pools)


def test_disaggregation_needs_an_open_loop_and_bad_transfer_input():
    pools = Disaggregation(prefill_replicas=1, decode_replicas=1)
    with pytest.raises(ValueError, match="open loop"):
        simulate(
            cost=LinearStep(), prompt_tokens=10, output_tokens=3, num_requests=5, concurrency=2, disaggregation=pools
        )
    with pytest.raises(ValueError, match="prompt_tokens must be"):
        kv_transfer_ms(OPT_66B, 0)
    with pytest.raises(ValueError, match="link_gb_s must be"):
        kv_transfer_ms(OPT_66B, 10, link_gb_s=-1.0)
    assert pools.layout == "1P1D"


def test_each_pool_runs_on_its_own_gpu():
    # the prefill pool on H100s, the decode pool on A100s: TTFT is the H100 engine's on the prompt-only
    # workload; the decode pool's KV budget is the A100's (its own cost model)
    trace = _trace(np.random.default_rng(5), 120, rate=10.0)
    pools = {"prefill_replicas": 1, "decode_replicas": 1, "prefill_gpu": "H100 SXM", "decode_gpu": "A100 80GB"}
    res = simulate("Llama-3.1-8B", "L4", "fp16", trace=trace, disaggregation=pools)
    alone = simulate("Llama-3.1-8B", "H100 SXM", "fp16", trace=trace.assign(output_tokens=1))
    np.testing.assert_array_equal(res.requests["ttft_s"].to_numpy(), alone.requests["ttft_s"].to_numpy())
    a100 = simulate("Llama-3.1-8B", "A100 80GB", "fp16", trace=trace)
    assert res.config["decode"]["kv_budget_tokens"] == a100.config["kv_budget_tokens"]
    assert res.config["layout"] == "1P1D"


def test_speculation_runs_in_the_decode_pool_only():
    trace = _trace(np.random.default_rng(7), 80, rate=5.0)
    pools = {"prefill_replicas": 1, "decode_replicas": 1}
    spec = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.8}
    plain = simulate("Llama-3.1-8B", "H100 SXM", "fp16", trace=trace, disaggregation=pools)
    fast = simulate("Llama-3.1-8B", "H100 SXM", "fp16", trace=trace, disaggregation=pools, speculation=spec)
    np.testing.assert_array_equal(fast.requests["ttft_s"].to_numpy(), plain.requests["ttft_s"].to_numpy())
    assert fast.config["decode"]["speculation"] == spec and fast.config["prefill"]["speculation"] is None
    assert fast.summary["tpot_p50_s"].iloc[0] < plain.summary["tpot_p50_s"].iloc[0]  # light load: it pays

"""plan(workload=<trace with prefix_blocks>): each candidate's prefix hit rate from its own free KV memory."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._workload.prefix import reuse_curve

SETUP = {"models": "Llama-3.1-8B", "gpus": "H100 SXM", "quants": "bf16", "backends": "vllm", "tensor_parallel": (1,)}
PROMPT, OUTPUT, BLOCK = 2560, 100, 512


def shared_prefix_trace(n: int = 600, seed: int = 1) -> pd.DataFrame:
    """``n`` requests at 4 req/s: one of 20 system prompts (4 blocks of 512 tokens) then a block of their own."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, 20, n)
    trace = pd.DataFrame(
        {
            "arrival_s": np.arange(n) / 4.0,
            "prompt_tokens": PROMPT,
            "output_tokens": OUTPUT,
            "prefix_blocks": [(s * 10, s * 10 + 1, s * 10 + 2, s * 10 + 3, 1000 + i) for i, s in enumerate(system)],
        }
    )
    trace.attrs["prefix_block_tokens"] = BLOCK
    return trace


def test_each_candidates_hit_rate_is_the_curve_at_the_memory_its_batch_leaves():
    trace = shared_prefix_trace()
    table = toolkit.plan(arrival_rate=4.0, prompt_tokens=PROMPT, output_tokens=OUTPUT, workload=trace, **SETUP)
    curve = reuse_curve(trace)
    capacity = np.concatenate(([0.0], curve["capacity_tokens"]))
    rate = np.concatenate(([0.0], curve["hit_rate"]))
    cm = toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "bf16", backend="vllm")
    # a running sequence of mean context prompt + output / 2 holds whole blocks of 16 tokens
    held = math.ceil((PROMPT + OUTPUT / 2) / cm.kv_block_tokens) * cm.kv_block_tokens
    for batch, hit in zip(table["batch"], table["prefix_hit_rate"]):
        free = max(cm.kv_budget_tokens - batch * held, 0)
        assert hit == pytest.approx(np.interp(free, capacity, rate), abs=2e-3), batch
    # the hit rates span the curve: a small batch finds the reuse an ample cache holds, the largest almost none
    assert table["prefix_hit_rate"].max() > 0.7 and table["prefix_hit_rate"].min() < 0.2
    # a prefix found is not prefilled: with the hit rates off, the same fleets wait as long and prefill more, by
    # the cost model's difference in prefill for each row's hit
    plain = toolkit.plan(
        arrival_rate=4.0,
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        workload=trace.drop(columns="prefix_blocks"),
        **SETUP,
    )
    both = table.merge(plain, on=["batch", "replicas"], suffixes=("", "_plain"))
    assert len(both) >= 3
    saved = cm.ttft_ms(PROMPT) - cm.ttft_ms(PROMPT, cached_tokens=both["prefix_hit_rate"].to_numpy() * PROMPT)
    assert np.all(both["ttft_ms_plain"] - both["ttft_ms"] >= 0.999 * saved)
    assert np.all(saved[both["prefix_hit_rate"].to_numpy() > 0.5] > 0)


def test_without_prefix_blocks_the_constant_applies():
    trace = shared_prefix_trace().drop(columns="prefix_blocks")
    table = toolkit.plan(
        arrival_rate=4.0,
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        workload=trace,
        prefix_cache_hit_rate=0.25,
        **SETUP,
    )
    assert np.allclose(table["prefix_hit_rate"], 0.25)


def test_a_constant_beside_prefix_blocks_is_refused():
    with pytest.raises(ValueError, match="prefix_cache_hit_rate"):
        toolkit.plan(
            arrival_rate=4.0,
            prompt_tokens=PROMPT,
            output_tokens=OUTPUT,
            workload=shared_prefix_trace(),
            prefix_cache_hit_rate=0.25,
            **SETUP,
        )

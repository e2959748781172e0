"""The exact LRU reuse curve (stack distances) against hand-derived hit rates and a naive LRU cache,
to the request, on small traces and on the whole Mooncake conversation trace."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from importlib import resources

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._workload.prefix import prefix_blocks_of, request_hit_tokens, reuse_curve, stack_distances

BLOCK = 4


def _frame(prompts, blocks, block=BLOCK):
    frame = pd.DataFrame(
        {
            "arrival_s": np.arange(len(prompts), dtype=float),
            "prompt_tokens": prompts,
            "output_tokens": 1,
            "prefix_blocks": [tuple(b) for b in blocks],
        }
    )
    frame.attrs["prefix_block_tokens"] = block
    return frame


# r0: blocks 1, 2 (8 tokens); r1: 1, 2 and a partial 3 of 2 tokens (10 tokens); r2: block 1 (4 tokens)
HAND = _frame([8, 10, 4], [(1, 2), (1, 2, 3), (1,)])


@pytest.mark.parametrize(
    ("capacity_tokens", "hits"),
    [
        (0, [0, 0, 0]),
        # one block: every reference finds the previous block in the cache, never its own
        (4, [0, 0, 0]),
        # two blocks: r1 finds 1 and 2 (8 tokens); inserting 3 evicts 1, so r2 misses
        (8, [0, 8, 0]),
        (11, [0, 8, 0]),  # whole blocks count: 11 tokens hold two
        # three blocks: 1 was last used before 2 and 3, so it is still cached for r2
        (12, [0, 8, 4]),
        (None, [0, 8, 4]),
    ],
)
def test_hand_made_trace_hits_what_lru_by_hand_hits(capacity_tokens, hits):
    assert request_hit_tokens(HAND, capacity_tokens=capacity_tokens).tolist() == hits


def test_the_curve_gives_hit_tokens_over_all_prompt_tokens():
    curve = reuse_curve(HAND, capacity_tokens=[0, 4, 8, 12, 100])
    assert curve["hit_tokens"].tolist() == [0, 0, 8, 12, 12]
    assert curve["hit_rate"].tolist() == pytest.approx([0, 0, 8 / 22, 12 / 22, 12 / 22])


def test_requests_are_taken_in_arrival_order_not_row_order():
    shuffled = HAND.iloc[[2, 0, 1]].copy()
    assert request_hit_tokens(shuffled, capacity_tokens=12).tolist() == [4, 0, 8]


def test_stack_distances_match_counting_distinct_blocks_between_references():
    ids = np.random.default_rng(5).integers(0, 40, 3000)
    last: dict[int, int] = {}
    expected = []
    for t, block in enumerate(ids.tolist()):
        expected.append(len(set(ids[last[block] + 1 : t].tolist())) + 1 if block in last else 0)
        last[block] = t
    assert stack_distances(ids).tolist() == expected


def _random_conversations(seed, requests=400, block=8):
    """Requests that continue a random earlier request's prefix with new blocks, prompts ending in
    partial blocks, arrivals shuffled against the rows."""
    rng = np.random.default_rng(seed)
    chains, prompts, fresh = [], [], 0
    for _ in range(requests):
        base = list(chains[rng.integers(len(chains))][: rng.integers(0, 6)]) if chains and rng.random() < 0.8 else []
        new = int(rng.integers(1, 5))
        chains.append(tuple(base + list(range(fresh, fresh + new))))
        fresh += new
        prompts.append(len(chains[-1]) * block - int(rng.integers(0, block)))
    frame = _frame(prompts, chains, block=block)
    frame["arrival_s"] = rng.permutation(len(frame)).astype(float)
    return frame


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_conversations_hit_what_a_naive_lru_cache_hits(seed):
    frame = _random_conversations(seed)
    records = [
        {"hash_ids": list(b), "input_length": p}
        for b, p in zip(frame["prefix_blocks"], frame["prompt_tokens"], strict=True)
    ]
    order = np.argsort(frame["arrival_s"].to_numpy(), kind="stable")
    for capacity_blocks in (1, 3, 10, 40, 10_000):
        expected, prefixes = _ordered_dict_lru([records[i] for i in order], capacity_blocks, block=8)
        got = request_hit_tokens(frame, capacity_tokens=capacity_blocks * 8)
        np.testing.assert_array_equal(got[order], expected)
        assert prefixes


def test_blocks_that_do_not_cover_the_prompt_are_refused():
    with pytest.raises(ValueError, match="row 1 has 2 for 10 prompt tokens"):
        prefix_blocks_of(_frame([8, 10], [(1, 2), (1, 2)]))
    with pytest.raises(ValueError, match="integer block ids"):
        prefix_blocks_of(_frame([4], [("a",)]))
    bare = HAND.copy()
    bare.attrs = {}
    with pytest.raises(ValueError, match="prefix_block_tokens"):
        reuse_curve(bare)
    with pytest.raises(ValueError, match="capacity_tokens"):
        reuse_curve(HAND, capacity_tokens=-1)


def _raw(name):
    text = resources.files("toolkit._data").joinpath(f"traces/mooncake/{name}_trace.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _ordered_dict_lru(records, capacity_blocks, block=512):
    """A plain LRU cache of whole blocks: per request the tokens of the blocks found, and whether
    each request's hits formed a prefix of its blocks."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits, prefixes = [], True
    for record in records:
        ids, prompt = record["hash_ids"], record["input_length"]
        found, flags = 0, []
        for i, block_id in enumerate(ids):
            flags.append(block_id in cache)
            if flags[-1]:
                cache.move_to_end(block_id)
                found += block if i < len(ids) - 1 else prompt - (len(ids) - 1) * block
            else:
                cache[block_id] = None
                if len(cache) > capacity_blocks:
                    cache.popitem(last=False)
        prefixes &= flags == sorted(flags, reverse=True)
        hits.append(found)
    return np.array(hits), prefixes


@pytest.mark.parametrize("capacity_blocks", [1_000, 8_000, 40_000, 120_000])
def test_conversation_trace_per_request_hits_equal_a_naive_lru_cache(capacity_blocks):
    records = _raw("conversation")
    expected, prefixes = _ordered_dict_lru(records, capacity_blocks)
    trace = toolkit.load_trace("mooncake-conversation")
    got = request_hit_tokens(trace, capacity_tokens=capacity_blocks * 512 + 511)
    np.testing.assert_array_equal(got, expected)
    # touched first to last, a request's hits are a prefix of its blocks: pure block LRU is
    # what an engine reusing only the cached prefix gets
    assert prefixes
    curve = reuse_curve(trace, capacity_tokens=capacity_blocks * 512)
    assert curve["hit_tokens"].iloc[0] == expected.sum()


def test_the_conversation_curve_takes_under_a_second_of_cpu():
    trace = toolkit.load_trace("mooncake-conversation")
    start = time.process_time()
    curve = reuse_curve(trace)
    assert time.process_time() - start < 1.0
    assert np.all(np.diff(curve["hit_rate"]) >= 0)


def test_describe_workload_reports_reuse_and_the_curve():
    records = _raw("synthetic")
    seen: set[int] = set()
    hit_tokens = references = repeats = 0
    for record in records:
        ids, prompt = record["hash_ids"], record["input_length"]
        for i, block_id in enumerate(ids):
            references += 1
            if block_id in seen:
                repeats += 1
                hit_tokens += 512 if i < len(ids) - 1 else prompt - (len(ids) - 1) * 512
        seen.update(ids)
    total = sum(r["input_length"] for r in records)
    described = toolkit.describe_workload(toolkit.load_trace("mooncake-synthetic"))
    row = described.summary.iloc[0]
    assert row["reuse_hit_rate"] == pytest.approx(hit_tokens / total, rel=1e-12)
    assert row["reuse_block_share"] == pytest.approx(repeats / references, rel=1e-12)
    assert row["reuse_working_set_tokens"] == len(seen) * 512
    curve = described.reuse_curve
    assert curve["capacity_tokens"].iloc[-1] == len(seen) * 512
    assert curve["hit_tokens"].iloc[-1] == hit_tokens
    assert curve["capacity_tokens"].iloc[0] == 512


def test_describe_workload_without_prefix_blocks_has_no_reuse():
    described = toolkit.describe_workload(toolkit.load_trace("azure-code-2023", duration_s=600))
    assert described.reuse_curve.empty
    assert "reuse_hit_rate" not in described.summary.columns

"""The simulator's prefix caches (toolkit._queueing.prefix_cache), checked against hand-worked traces and
an independent LRU of blocks."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit._queueing.prefix_cache import _BlockCache
from toolkit._queueing.prefix_segments import blocks_of, segments
from toolkit._queueing.simulator import simulate
from toolkit._queueing.slot_cache import _SlotCache

MOONCAKE = Path("/work/shared/traces/mooncake/conversation_trace.jsonl")


def rows_blocks(rows, prompt, block):
    """The caches' view of requests given as rows of block ids (hits in whole tokens)."""
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    ids = np.array([b for r in rows for b in r], dtype=np.int64)
    return blocks_of(ids, offsets, np.asarray(prompt, dtype=np.int64), block, 1)


class StepCost:
    """A step of ``base_ms`` plus ``per_token_ms`` per prefilled token; optional KV blocks of ``block`` tokens."""

    def __init__(self, kv_budget_tokens=10**6, base_ms=1.0, per_token_ms=0.0, block=None):
        self.kv_budget_tokens = kv_budget_tokens
        self.request_overhead_ms = 0.0
        self.base_ms, self.per_token_ms = base_ms, per_token_ms
        if block is not None:
            self.kv_block_tokens = block

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        kv = np.asarray(kv_tokens, dtype=float)
        return self.base_ms + self.per_token_ms * np.asarray(prefill_tokens, dtype=float) + 0.0 * kv


def frame(rows, block, gap_s=1.0):
    """A trace of (prompt_tokens, output_tokens, block ids) rows, ``gap_s`` apart."""
    out = pd.DataFrame(
        {
            "arrival_s": np.arange(len(rows)) * gap_s,
            "prompt_tokens": [r[0] for r in rows],
            "output_tokens": [r[1] for r in rows],
            "prefix_blocks": [tuple(r[2]) for r in rows],
        }
    )
    out.attrs["prefix_block_tokens"] = block
    return out


def run(trace, **kw):
    kw.setdefault("cost", StepCost())
    return simulate(trace=trace, warmup_fraction=0.0, **kw)


# ---- vLLM's block cache, end to end, by hand ------------------------------------------------------------------
def test_second_identical_request_reuses_all_but_the_last_token():
    # prompt 10 in blocks of 4: 4 + 4 + 2; the second finds all 10, vLLM recomputes the last one
    trace = frame([(10, 1, (1, 2, 3)), (10, 1, (1, 2, 3))], block=4)
    res = run(trace, cost=StepCost(base_ms=1.0, per_token_ms=0.1))
    assert res.requests["cached_tokens"].tolist() == [0, 9]
    # TTFT: one step prefilling 10 tokens (1 + 1.0 ms), then one prefilling 1 token (1 + 0.1 ms)
    assert res.requests["ttft_s"].to_numpy() == pytest.approx([2.0e-3, 1.1e-3])
    s = res.summary.iloc[0]
    assert s["prefix_hit_rate"] == pytest.approx(9 / 20)
    assert s["prefill_tokens_saved"] == 9
    assert res.config["prefix_cache"] == "BlockCache"


def test_hits_are_whole_engine_blocks():
    # engine blocks of 4 tokens: a hit of min(10, 10 - 1) = 9 tokens reuses 8 (two whole blocks)
    trace = frame([(10, 1, (1, 2, 3)), (10, 1, (1, 2, 3)), (10, 1, (1, 2, 7))], block=4)
    res = run(trace, cost=StepCost(block=4))
    assert res.requests["cached_tokens"].tolist() == [0, 8, 8]


def test_capacity_evicts_least_recently_freed_blocks_tail_first():
    # KV budget 20 tokens, one request at a time, one output token each (a request holds its prompt)
    a, b, d = (8, 1, (1, 2)), (8, 1, (3, 4)), (12, 1, (5, 6, 7))
    trace = frame([a, b, d, b, a], block=4)
    res = run(trace, max_batch=1, cost=StepCost(kv_budget_tokens=20))
    # after a, b: cached 1, 2, 3, 4 (16 tokens); d holds 12, so 8 may stay cached: a's (freed first) go;
    # b again finds 7 of its 8; a again finds nothing
    assert res.requests["cached_tokens"].tolist() == [0, 0, 0, 7, 0]
    # tail first: x's last block goes first, so x's first two blocks survive y
    x, y = (12, 1, (1, 2, 3)), (12, 1, (8, 9, 10))
    res = run(frame([x, y, x], block=4), max_batch=1, cost=StepCost(kv_budget_tokens=20))
    assert res.requests["cached_tokens"].tolist() == [0, 0, 8]


def test_without_prefix_blocks_nothing_changes():
    trace = frame([(10, 1, (1, 2, 3)), (10, 1, (1, 2, 3))], block=4).drop(columns="prefix_blocks")
    res = run(trace)
    assert res.requests["cached_tokens"].tolist() == [0, 0]
    assert res.config["prefix_cache"] is None
    assert res.summary.iloc[0]["prefix_hit_rate"] == 0


def test_a_preempted_request_frees_its_blocks_to_the_cache_and_finds_them_again():
    # KV budget 40: a and b decode until their 2 x 8 prompt tokens and generated ones fill it, and b (admitted
    # last) is preempted; its blocks stay cached in the memory a leaves (at most 27 tokens of 40), so back in
    # it finds its whole prompt (8 tokens: fewer than the 8 + generated tokens it recomputes, less one). Then c
    # (36 tokens) leaves room for 4 cached: of the freed blocks only b's first (freed last) stays, and b's prompt
    # again finds 4 tokens, where it would find all 8 (and reuse 7) had b's preemption left its blocks held.
    a, b, c = (8, 20, (1, 2)), (8, 20, (3, 4)), (36, 1, tuple(range(5, 14)))
    trace = frame([a, b, c, b], block=4)
    trace["arrival_s"] = [0.0, 0.0005, 1.0, 2.0]
    res = run(trace, max_batch=2, cost=StepCost(kv_budget_tokens=40))
    assert res.requests["preempted"].tolist() == [0, 1, 0, 0]
    assert res.requests["cached_tokens"].tolist() == [0, 8, 0, 4]


def test_segments_group_blocks_always_used_together():
    # blocks 1, 2 open two prompts, then 3 or 4; 5, 6 appear once, together: 4 segments of 2, 1, 1, 2 blocks
    rows = [(1, 2, 3), (1, 2, 4), (5, 6)]
    offsets = np.array([0, 3, 6, 8])
    seg, seg_offsets, seg_blocks = segments(np.array([b for r in rows for b in r]), offsets)
    assert seg_offsets.tolist() == [0, 2, 4, 5]
    per_row = [seg[seg_offsets[r] : seg_offsets[r + 1]].tolist() for r in range(3)]
    assert [[int(seg_blocks[s]) for s in row] for row in per_row] == [[2, 1], [2, 1], [2]]
    assert per_row[0][0] == per_row[1][0] and len({per_row[0][1], per_row[1][1], per_row[2][0]}) == 3


def test_running_requests_blocks_are_never_evicted():
    blocks = rows_blocks([(1, 2), (5, 6, 7), (1, 2, 3)], [8, 12, 12], block=4)
    cache = _BlockCache(blocks)
    # a KV budget of 20 tokens
    assert cache.admit(0, room=12, need=8) == 0  # request 0 runs, holding blocks 1, 2
    assert cache.admit(1, room=0, need=12) == 0  # request 1 takes the rest of the memory
    cache.release(1, room=0)  # its blocks are cached in the memory it frees
    assert cache.size_tokens() == 12
    assert cache.admit(2, room=0, need=12) == 8  # request 0's blocks, held, are found; request 1's evicted
    assert cache.size_tokens() == 0
    # held per segment: blocks 1 and 2 (always together) by requests 0 and 2, 3 by request 2, 5 to 7 by none
    assert [cache.held[s] for s in blocks.seg] == [2, 0, 2, 1]


# ---- llama.cpp's slots ------------------------------------------------------------------------------------
def slot_blocks():
    rows = [(1, 2, 3), (7, 8), (1, 2, 9), (1, 50, 51), (1, 2, 3)]
    return rows_blocks(rows, [4 * len(r) for r in rows], block=4)


@pytest.mark.parametrize("similarity, r3_cached", [(0.1, 4), (0.5, 0)])
def test_llama_slot_rule(similarity, r3_cached):
    cache = _SlotCache(slot_blocks(), slots=2, similarity=similarity)
    room = 10**6
    assert cache.admit(0, room, 12) == 0 and cache.slot_of[0] == 1  # every slot unused: the last
    cache.release(0, room)
    assert cache.admit(1, room, 8) == 0 and cache.slot_of[1] == 0  # no prefix in common: LRU slot 0
    cache.release(1, room)
    assert cache.admit(2, room, 12) == 8 and cache.slot_of[2] == 1  # 8/12 of it in slot 1
    cache.release(2, room)
    # 4/12 = 0.33 in slot 1: above 0.1 it goes there; not above 0.5, so the LRU slot 0 (request 1's prompt)
    assert cache.admit(3, room, 12) == r3_cached
    cache.release(3, room)


def test_llama_slot_whole_prompt_and_unified_purge():
    cache = _SlotCache(slot_blocks(), slots=2, similarity=0.1)
    cache.admit(0, 100, 12)
    cache.release(0, 100)
    assert cache.admit(4, 100, 12) == 11  # the same prompt: all but its last token
    cache.release(4, 100)
    cache.admit(1, 100, 8)
    cache.release(1, 100)  # slots hold 12 (slot 1) and 8 (slot 0) tokens
    cache.trim(12)  # a new sequence needs the memory: idle slots purged in slot order
    assert cache.prompt == [-1, 4]
    cache.trim(5)
    assert cache.prompt == [-1, -1]


def host_blocks():
    rows = [(1, 2, 3), (7, 8), (1, 2, 9)]  # A (12 tokens), B (8), C (12): C shares A's first 8
    return rows_blocks(rows, [4 * len(r) for r in rows], block=4)


@pytest.mark.parametrize(
    "host_tokens, c_cached, host_after",
    [
        (0, 0, []),  # no host cache: the one slot held B when C came
        (-1, 8, [1]),  # A and B saved as the slot moved on; C loads A (8/12 of each) and B stays
        (20, 8, [1]),  # A (12) and B (8) fit in 20 tokens
        (19, 0, [1]),  # saving B evicts A, the oldest
        (8, 0, [1]),  # A alone is over the limit: never saved
    ],
)
def test_llama_host_prompt_cache(host_tokens, c_cached, host_after):
    cache = _SlotCache(host_blocks(), slots=1, similarity=0.1, host_tokens=host_tokens)
    room = 10**6
    for rid, need in ((0, 12), (1, 8)):
        assert cache.admit(rid, room, need) == 0
        cache.release(rid, room)
    assert cache.admit(2, room, 12) == c_cached
    assert cache.host == host_after


def test_llama_host_cache_takes_idle_slots_at_each_launch():
    # two slots: A finishes; B starts in the other slot, which saves A to the host cache and clears its slot;
    # C then finds no slot holding anything and loads A from the cache
    cache = _SlotCache(host_blocks(), slots=2, similarity=0.1, host_tokens=-1)
    room = 10**6
    cache.admit(0, room, 12)
    cache.release(0, room)
    assert cache.admit(1, room, 8) == 0
    assert cache.prompt == [1, -1] and cache.host == [0]
    assert cache.match(2) == 8  # a router sees the cached prompt
    assert cache.admit(2, room, 12) == 8 and cache.host == []
    # a slot picked by similarity that keeps less than half its prompt saves it first: X (20 tokens) shares
    # 4 with D, so D (4/12 > 0.1) takes X's slot, X is saved, and D loads A, which D holds whole
    rows = [(1, 2, 3), (1, 50, 51, 52, 53), (1, 2, 3)]
    cache = _SlotCache(rows_blocks(rows, [12, 20, 12], block=4), slots=1, similarity=0.1, host_tokens=-1)
    cache.admit(0, room, 12)
    cache.release(0, room)
    cache.admit(1, room, 20)
    cache.release(1, room)
    assert cache.host == [0]
    assert cache.admit(2, room, 12) == 11 and cache.host == [1]


def test_prompt_cache_mib_sets_the_host_cache():
    # two prompts share 8 of 12 tokens and a third, unrelated, comes between them on the one slot
    trace = frame([(12, 1, (1, 2, 3)), (8, 1, (7, 8)), (12, 1, (1, 2, 9))], block=4)
    cost = StepCost()
    cost.kv_bytes_per_token = 2**20 / 10  # 10 tokens a MiB
    cached = {mib: run(trace, backend="llamacpp", max_batch=1, cost=cost, prompt_cache_mib=mib) for mib in (0, 2, 1.9)}
    assert cached[0].requests["cached_tokens"].tolist() == [0, 0, 0]
    assert cached[2].requests["cached_tokens"].tolist() == [0, 0, 8]  # 20 tokens hold A and B
    assert cached[1.9].requests["cached_tokens"].tolist() == [0, 0, 0]  # 19: B evicts A
    assert cached[2].config["prompt_cache_tokens"] == 20 and cached[0].config["prompt_cache_tokens"] is None
    # the backend's default, llama.cpp's 8192 MiB, holds them
    assert run(trace, backend="llamacpp", max_batch=1, cost=cost).requests["cached_tokens"].tolist() == [0, 0, 8]
    with pytest.raises(ValueError, match="prompt_cache_mib"):
        run(trace, backend="llamacpp", max_batch=1, cost=cost, prompt_cache_mib=-1)


def test_llamacpp_backend_uses_slots():
    trace = frame([(10, 1, (1, 2, 3)), (10, 1, (1, 2, 3))], block=4)
    res = run(trace, backend="llamacpp", max_batch=2)
    assert res.config["prefix_cache"] == "SlotCache"
    assert res.requests["cached_tokens"].tolist() == [0, 9]


def test_bad_prefix_input():
    trace = frame([(10, 1, (1, 2))], block=4)
    with pytest.raises(ValueError, match="prefix_blocks"):
        run(trace)
    trace = frame([(10, 1, (1, 2, 3))], block=4)
    with pytest.raises(ValueError, match="slot_prompt_similarity"):
        run(trace, slot_prompt_similarity=1.5)
    with pytest.raises(ValueError, match="prefix_affinity"):
        run(trace.drop(columns="prefix_blocks"), routing="prefix_affinity")
    trace["prefix_blocks"] = [None]
    with pytest.raises(ValueError, match="integer block ids"):
        run(trace)


def test_partial_last_blocks():
    # prompts of 10 (4 + 4 + 2) and 9 (4 + 4 + 1) tokens: block 3 ends both, 1 token in common there
    blocks = rows_blocks([(1, 2, 3), (1, 2, 3), (1, 2)], [10, 9, 7], block=4)
    slots = _SlotCache(blocks, slots=1, similarity=0.1)
    assert slots.common(0, 1) == 9 and slots.common(0, 2) == 7
    cache = _BlockCache(blocks)
    cache.admit(0, room=100, need=10)
    cache.release(0, room=90)
    assert cache.match(1) == 9 and cache.match(2) == 7
    assert cache.size_tokens() == 10


# ---- the Mooncake conversation trace against an independent LRU of blocks --------------------------------------
def lru_cached_tokens(prompts, blocks, capacity, block):
    """Per request, the leading prompt tokens found in an LRU of blocks holding ``capacity`` tokens, every block
    a request touches counted (its own too) and made most recent, its first block last; at most prompt - 1."""
    lru: OrderedDict[int, int] = OrderedDict()
    total = 0
    out = []
    for prompt, ids in zip(prompts, blocks):
        sizes = [block] * (len(ids) - 1) + [prompt - block * (len(ids) - 1)]
        hit = 0
        for b, size in zip(ids, sizes):
            if b not in lru:
                break
            hit += size
        out.append(min(hit, prompt - 1))
        for b, size in reversed(list(zip(ids, sizes))):
            total += size - lru.pop(b, 0)
            lru[b] = size
        while total > capacity:
            total -= lru.popitem(last=False)[1]
    return np.array(out)


@pytest.mark.skipif(not MOONCAKE.is_file(), reason="the Mooncake conversation trace is not here")
def test_simulator_hit_rate_equals_lru_on_mooncake_conversation():
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    prompts = np.array([r["input_length"] for r in rows])
    blocks = [tuple(r["hash_ids"]) for r in rows]
    trace = pd.DataFrame(
        {
            "arrival_s": np.array([r["timestamp"] for r in rows]) / 1e3,
            "prompt_tokens": prompts,
            "output_tokens": 1,
            "prefix_blocks": blocks,
        }
    )
    trace.attrs["prefix_block_tokens"] = 512
    # One replica serving one request at a time, each with one output token and no paging slack: the request
    # in service holds exactly its prompt's blocks, and the unreferenced cache holds the KV budget minus them.
    # So blocks in cache, held or not, always fit in the KV budget C: an LRU of C tokens over every block a
    # request touches. Steps of 1 ns keep the requests in arrival order, one finishing before the next starts.
    largest = int(prompts.max())
    for capacity in (largest + 1, 2 * largest, 8 * largest, 32 * largest):
        res = simulate(
            trace=trace,
            max_batch=1,
            warmup_fraction=0.0,
            cost=StepCost(kv_budget_tokens=capacity, base_ms=1e-6),
        )
        expected = lru_cached_tokens(prompts, blocks, capacity, 512)
        got = res.requests["cached_tokens"].to_numpy()
        assert np.array_equal(got, expected), capacity
        assert res.summary.iloc[0]["prefix_hit_rate"] == pytest.approx(expected.sum() / prompts.sum(), rel=1e-12)


def test_unbounded_cache_equals_the_reuse_curve_and_bounded_ones_lie_near_it():
    from toolkit import load_trace
    from toolkit._workload.prefix import request_hit_tokens, reuse_curve

    trace = load_trace("mooncake-conversation").assign(output_tokens=1)
    prompts = trace["prompt_tokens"].to_numpy()
    largest = int(prompts.max())
    # unbounded (a KV budget above every token of the trace): every reuse is found, less vLLM's last token
    res = simulate(trace=trace, max_batch=1, warmup_fraction=0.0, cost=StepCost(kv_budget_tokens=10**10, base_ms=1e-6))
    expected = np.minimum(request_hit_tokens(trace), prompts - 1)
    assert np.array_equal(res.requests["cached_tokens"].to_numpy(), expected)
    # bounded: the curve's LRU takes a request's blocks first to last (its head evicted first) and charges a
    # partial block whole, where vLLM frees a request's blocks tail first and a cached partial block holds its
    # tokens only: the simulator finds a little more (less its last tokens), within 3% of the curve here
    for capacity in (2 * largest, 32 * largest):
        res = simulate(
            trace=trace, max_batch=1, warmup_fraction=0.0, cost=StepCost(kv_budget_tokens=capacity, base_ms=1e-6)
        )
        curve = reuse_curve(trace, capacity_tokens=[capacity])["hit_rate"].iloc[0]
        assert 0.999 * curve <= res.summary.iloc[0]["prefix_hit_rate"] <= 1.03 * curve


# ---- several replicas: prefix-affinity routing ----------------------------------------------------------------
def test_prefix_affinity_sends_a_request_where_its_prefix_is_cached():
    # two prompts' families, alternating so that round robin splits each family over both replicas
    rows = [(12, 1, (1, 2, 3)), (12, 1, (7, 8, 9)), (12, 1, (7, 8, 10)), (12, 1, (1, 2, 5))]
    affinity = run(frame(rows, block=4), replicas=2, routing="prefix_affinity").requests
    # first: both caches empty, the smaller (equal) cache: replica 0; then the one with less cached: replica 1;
    # then each family's replica, 8 of 12 tokens found (more than half the prompt)
    assert affinity["replica"].tolist() == [0, 1, 1, 0]
    assert affinity["cached_tokens"].tolist() == [0, 0, 8, 8]
    spread = run(frame(rows, block=4), replicas=2, routing="round_robin").requests
    assert spread["cached_tokens"].tolist() == [0, 0, 0, 0]


def test_prefix_affinity_gives_way_to_load_beyond_the_routers_thresholds():
    # 40 requests of one family, 1 ms apart, each running for 1,000 steps of 1 ms: replica 0 holds the prefix
    # and takes them until its load exceeds the other's by more than 32 (and 1.1 times): the 34th goes to replica 1
    rows = [(12, 1000, (1, 2, 100 + i)) for i in range(40)]
    res = run(frame(rows, block=4, gap_s=1e-3), replicas=2, routing="prefix_affinity")
    replica = res.requests["replica"].to_numpy()
    assert (replica[:33] == 0).all() and replica[33] == 1
    # then alternately: a load gap of 32 is within bounds (both hold the prefix: the first, replica 0), 33 is not
    assert replica[34:38].tolist() == [0, 1, 0, 1]

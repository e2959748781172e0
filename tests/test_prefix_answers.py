"""A finished request's answer stays cached after its prompt, so the next turn of a session reuses it.

By hand: a session's first turn sends 10 tokens and gets a 7-token answer; the engine has decoded
10 + 7 - 1 = 16 of them (the last sampled token never is: llama.cpp's ``update_slots`` and vLLM's
``allocate_slots``). The second turn sends those 17 tokens and 10 new ones (27), and finds the 16.
"""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit._queueing.simulator import simulate
from toolkit._workload.blocks import reblock


class StepCost:
    """A step of 1 ms whatever it does; optional KV blocks of ``block`` tokens."""

    def __init__(self, block=None):
        self.kv_budget_tokens = 10**6
        self.request_overhead_ms = 0.0
        if block is not None:
            self.kv_block_tokens = block

    def step_ms(self, decode_seqs, kv_tokens, prefill_tokens=0, prefill_context_tokens=0):
        return 1.0 + 0.0 * np.asarray(kv_tokens, dtype=float)


def two_turns(*, output=7, block=4):
    """One session of two turns of 10 user tokens, answers of ``output`` tokens, 100 s apart."""
    return toolkit.session_workload(
        num_sessions=1,
        session_rate=1.0,
        turns=2,
        think_time_s=100.0,
        user_tokens=10,
        output_tokens=output,
        prefix_block_tokens=block,
    )


def test_the_answers_blocks_are_the_next_turns_blocks():
    frame = two_turns()
    first, second = frame["prefix_blocks"]
    answer, _ = frame["answer_blocks"]
    assert frame["prompt_tokens"].tolist() == [10, 27]
    # turn 0: tokens 1-4, 5-8, 9-10 (partial); its kept stream of 16 adds blocks 9-12 and 13-16
    assert len(first) == 3 and len(answer) == 2 and len(second) == 7
    assert second[:2] == first[:2]  # the prompt's full blocks
    assert second[2:4] == answer  # the answer's blocks hold the same tokens in the next prompt
    assert first[2] not in second  # the partial block grew into another one
    assert len(set(second) | set(first) | set(answer)) == 3 + 2 + 3


@pytest.mark.parametrize("backend, unit", [("llamacpp", None), (None, None), (None, 16)])
def test_the_next_turn_reuses_prompt_and_answer(backend, unit):
    frame = two_turns()
    kw = {"backend": backend} if backend else {}
    res = simulate(trace=frame, warmup_fraction=0.0, max_batch=1, cost=StepCost(unit), **kw)
    assert res.requests["cached_tokens"].tolist() == [0, 10 + 7 - 1]
    # without the answers' blocks a slot or the block cache holds the first prompt only: its two full
    # blocks (8 tokens) are common, and vLLM's 16-token engine blocks reuse none of them
    res = simulate(
        trace=frame.drop(columns="answer_blocks"), warmup_fraction=0.0, max_batch=1, cost=StepCost(unit), **kw
    )
    assert res.requests["cached_tokens"].tolist() == [0, 0 if unit else 8]


def test_a_partial_last_answer_block_counts_its_tokens_in_one_token_blocks():
    # a 6-token answer: 10 + 6 - 1 = 15 tokens kept; in blocks of 4 the 15th is in a partial block that
    # the next prompt fills differently (12 reused), in blocks of 1 all 15 are
    for block, cached in ((4, 12), (1, 15)):
        res = simulate(
            trace=two_turns(output=6, block=block),
            warmup_fraction=0.0,
            backend="llamacpp",
            max_batch=1,
            cost=StepCost(),
        )
        assert res.requests["cached_tokens"].tolist() == [0, cached]


def test_answer_blocks_are_checked_and_dropped_when_reblocked():
    frame = two_turns()
    bad = frame.copy()
    bad["answer_blocks"] = [(1,), (2,)]
    with pytest.raises(ValueError, match="answer_blocks"):
        simulate(trace=bad, warmup_fraction=0.0, cost=StepCost())
    assert "answer_blocks" not in reblock(frame, block_tokens=8).columns
    assert "answer_blocks" in reblock(frame, block_tokens=4).columns  # the same size: kept


def test_every_later_turn_finds_the_previous_turns_kept_full_blocks():
    # one session at a time (sessions 1000 s apart, turns 100 s apart), an unbounded vLLM cache counting
    # tokens: a later turn finds the full blocks of the previous prompt and answer (prompt + output - 1
    # tokens), a first turn the full blocks of its system prompt where an earlier session drew it
    frame = toolkit.session_workload(
        num_sessions=6,
        session_rate=0.001,
        arrivals="gamma",
        ca2=1e-4,
        turns=3,
        think_time_s=100.0,
        user_tokens=("lognormal", 30, 0.5),
        output_tokens=("lognormal", 20, 0.5),
        system_prompt_tokens=40,
        system_prompts=2,
        prefix_block_tokens=8,
        seed=4,
    )
    res = simulate(trace=frame, warmup_fraction=0.0, max_batch=1, cost=StepCost())
    kept = frame["prompt_tokens"] + frame["output_tokens"] - 1
    seen = set()
    expected = []
    for i, row in frame.iterrows():
        if row["turn"] == 0:
            expected.append(40 // 8 * 8 if row["system_prompt"] in seen else 0)
            seen.add(row["system_prompt"])
        else:
            expected.append(kept[i - 1] // 8 * 8)
    assert frame["session_id"].is_monotonic_increasing  # one session at a time: a turn follows its previous
    assert res.requests["cached_tokens"].tolist() == expected


def test_a_single_llama_slot_keeps_the_previous_turns_prompt_and_answer_to_the_token():
    # one slot, blocks of 1 token, no host prompt cache: a later turn reuses the previous turn's prompt and
    # answer but its last token; a first turn the 40-token system prompt where the session before drew the same one
    frame = toolkit.session_workload(
        num_sessions=6,
        session_rate=0.001,
        arrivals="gamma",
        ca2=1e-4,
        turns=3,
        think_time_s=100.0,
        user_tokens=("lognormal", 30, 0.5),
        output_tokens=("lognormal", 20, 0.5),
        system_prompt_tokens=40,
        system_prompts=2,
        prefix_block_tokens=1,
        seed=4,
    )
    res = simulate(
        trace=frame, warmup_fraction=0.0, max_batch=1, backend="llamacpp", cost=StepCost(), prompt_cache_mib=0
    )
    kept = (frame["prompt_tokens"] + frame["output_tokens"] - 1).tolist()
    drawn = frame["system_prompt"].tolist()
    expected = [0] + [
        kept[i - 1] if frame["turn"][i] else (40 if drawn[i] == drawn[i - 1] else 0) for i in range(1, len(frame))
    ]
    assert res.requests["cached_tokens"].tolist() == expected

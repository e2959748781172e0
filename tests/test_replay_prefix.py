"""Replaying prefix structure and closed-loop sessions against the real llama-server, checked with the
server's own counters (``timings.cache_n``, ``usage.prompt_tokens``) and its own template and tokenizer.

The server runs with ``--swa-full``: Gemma 3 uses sliding-window attention, whose KV llama.cpp cannot
cut back to an arbitrary position, so without it a slot reuses a prompt only up to the checkpoints it
took (where the last user message starts, and 4 tokens before a prompt's end); with the full window
kept, a slot reuses the whole common prefix (``update_slots`` in tools/server/server-context.cpp)."""

from __future__ import annotations

import httpx
import numpy as np
import pandas as pd
import pytest
from fault_server import FaultServer

import toolkit
from toolkit._sweep.conversation import block_text, sessions_of
from toolkit._sweep.filler import Filler
from toolkit._sweep.replay_result import replay_summary, requests_frame

BLOCK = 16


@pytest.fixture(scope="module")
def server():
    with toolkit.LlamaServer(parallel=2, extra_args=["--swa-full"]) as running:
        yield running


def _tokens(server, text: str, *, special: bool) -> int:
    reply = httpx.post(server.base_url + "/tokenize", json={"content": text, "add_special": special}, timeout=30)
    return len(reply.json()["tokens"])


def _rendered(server, messages) -> str:
    return httpx.post(server.base_url + "/apply-template", json={"messages": messages}, timeout=30).json()["prompt"]


@pytest.mark.server
def test_equal_block_ids_send_a_prefix_the_server_reuses(server):
    # B shares its first 4 blocks with A, then differs; B is sent well after A has finished
    trace = pd.DataFrame(
        {"arrival_s": [0.0, 2.0], "prompt_tokens": [96, 96], "output_tokens": [2, 2],
         "prefix_blocks": [(1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 7, 8)]}
    )  # fmt: skip
    trace.attrs["prefix_block_tokens"] = BLOCK
    result = toolkit.replay_trace(trace, server=server, progress=False, extra_body={"temperature": 0.0})
    a, b = result.requests.itertuples()
    assert a.outcome == b.outcome == "ok"
    # the chat template's opening (BOS and the user turn's header), counted by the server's tokenizer
    opening = _rendered(server, [{"role": "user", "content": "X"}]).split("X")[0]
    shared = _tokens(server, opening, special=True) + 4 * BLOCK
    assert b.cached_tokens == b.server_cache_n == shared
    assert result.summary["prefix_hit_rate"].iloc[0] == pytest.approx(shared / (a.prompt_tokens + b.prompt_tokens))
    assert a.prompt_tokens == b.prompt_tokens == 96  # one token per block word: the lengths are the trace's


@pytest.mark.server
def test_a_session_turn_follows_the_answer_with_the_answer_in_its_context(server):
    think_s, new_user = 0.3, 40  # more than the template adds per exchange, so the target is reachable
    trace = pd.DataFrame(
        {"arrival_s": [0.0, 0.1], "prompt_tokens": [60, 60 + 8 + new_user], "output_tokens": [8, 4],
         "session_id": [0, 0], "turn": [0, 1], "think_time_s": [0.0, think_s]}
    )  # fmt: skip
    result = toolkit.replay_trace(trace, server=server, progress=False, extra_body={"temperature": 0.0})
    first, second = result.requests.itertuples()
    assert first.outcome == second.outcome == "ok"
    # closed loop: sent the think time after the answer arrived, not at the trace's open-loop 0.1 s
    assert first.end_s + think_s <= second.sent_s < first.end_s + think_s + 0.1
    assert second.scheduled_s == pytest.approx(first.end_s + think_s, abs=0.01)
    # the template's tokens for one more exchange, from the server's own template and tokenizer
    one = _tokens(server, _rendered(server, [{"role": "user", "content": "the"}]), special=True)
    two = [
        {"role": "user", "content": "the"},
        {"role": "assistant", "content": "of"},
        {"role": "user", "content": "and"},
    ]
    overhead = _tokens(server, _rendered(server, two), special=True) - one - 2
    assert result.params["turn_template_tokens"] == overhead
    # turn 2 = turn 1's prompt + its 8-token answer + the template's tokens + the new user words (one token
    # each); an answer re-tokenized from its text may differ from the generated tokens by a token or two
    new_words = second.prompt_words - first.prompt_words
    expected = first.prompt_tokens + first.output_tokens + overhead + new_words
    assert abs(second.prompt_tokens - expected) <= 2, (second.prompt_tokens, expected)
    # the new words were sized so that the chat reaches the trace's prompt length
    assert abs(second.prompt_tokens - second.prompt_tokens_target) <= 2
    # the server found the whole first prompt in the slot: the second turn starts with it
    assert second.cached_tokens >= first.prompt_tokens - 1


# --- without the real server: block texts, and sessions against the fault server (1 token per word) ----


def test_equal_leading_block_ids_give_byte_identical_leading_text():
    filler = Filler(
        words=tuple(f"w{i}" for i in range(50)), template_tokens=0.0, tokens_per_word=1.0, method="tokenize"
    )
    a = block_text(filler, (7, 8, 9), 40, 16, seed=3)
    b = block_text(filler, (7, 8, 11), 40, 16, seed=3)
    assert len(a.split()) == len(b.split()) == 40  # 16 + 16 + the 8 left of the third block
    assert a.split()[:32] == b.split()[:32] and a.split()[32:] != b.split()[32:]
    # a block cut short is the start of the same block uncut; each word keeps its leading space
    assert block_text(filler, (7, 8, 9), 48, 16, seed=3).startswith(a) and a.startswith(" w")
    assert block_text(filler, (7, 8, 9), 40, 16, seed=4) != a  # the seed picks the texts


def test_session_turns_carry_the_answers_and_stop_after_a_failed_turn():
    trace = pd.DataFrame(
        {"arrival_s": [0.0, 0.05, 0.5, 0.6, 1.0], "prompt_tokens": [10, 12, 30, 40, 50],
         "output_tokens": [4, 5, 4, 3, 4], "session_id": [0, 1, 0, 1, 0], "turn": [0, 0, 1, 1, 2],
         "think_time_s": [0.0, 0.0, 0.1, 0.2, 0.1]}
    )  # fmt: skip
    # two calibration requests and the template probe answer; then session 0's first turn fails
    with FaultServer(tokens=6, token_delay_s=0.0, schedule=[None, None, None, "500"]) as srv:
        result = toolkit.replay_trace(trace, srv.root_url, progress=False)
        chat = srv.chat_requests()
    requests = result.requests
    assert list(requests["outcome"]) == ["error", "ok", "not_sent", "ok", "not_sent"]
    assert requests.loc[[2, 4], "error"].str.contains("turn 0 of its session failed").all()
    assert result.params["turn_template_tokens"] == 0  # the fault server's template adds nothing
    first, second = chat[-2]["prompt"], chat[-1]["prompt"]
    # the next turn is the chat so far: the first prompt, the 5-word answer the server gave, the new words
    assert second.startswith(first + "\ntok0 tok1 tok2 tok3 tok4 \n")
    assert requests.loc[3, "prompt_tokens"] == 40  # 12 + 5 + 23 new words: the trace's length
    assert requests.loc[3, "cached_tokens"] == 12  # the fault server's longest common word prefix
    assert requests.loc[3, "sent_s"] >= requests.loc[1, "end_s"] + 0.2


def test_session_turns_must_be_numbered_from_zero():
    trace = pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 30], "output_tokens": [4, 4], "session_id": [0, 0],
         "turn": [0, 2]}
    )  # fmt: skip
    with pytest.raises(ValueError, match="turn"):
        toolkit.replay_trace(trace, "http://127.0.0.1:9", progress=False)
    trace["turn"] = [0, 1]
    trace["think_time_s"] = [0.0, -1.0]
    with pytest.raises(ValueError, match="think_time_s"):
        toolkit.replay_trace(trace, "http://127.0.0.1:9", progress=False)


def test_cached_tokens_fall_back_to_llama_cpp_timings_and_sum_to_the_hit_rate():
    filler = Filler(words=("a", "b"), template_tokens=0.0, tokens_per_word=1.0, method="tokenize")
    trace = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [100, 50], "output_tokens": [2, 2]})
    rows = [
        {"sent_s": 0.0, "lateness_ms": 0.0, "end_s": 0.5, "outcome": "ok", "prompt_tokens": 100.0, "output_tokens": 2.0,
         "cached_tokens": float("nan"), "server_cache_n": 40.0},
        {"sent_s": 1.0, "lateness_ms": 0.0, "end_s": 1.5, "outcome": "ok", "prompt_tokens": 50.0, "output_tokens": 2.0,
         "cached_tokens": 10.0, "server_cache_n": 10.0},
    ]  # fmt: skip
    frame = requests_frame(trace, rows, np.array([100, 50]), np.array([2, 2]), filler)
    assert frame["cached_tokens"].tolist() == [40.0, 10.0]  # usage's count where given, else timings.cache_n
    assert frame["scheduled_s"].tolist() == [0.0, 1.0]  # open loop: due at the trace's arrival
    summary, _ = replay_summary(frame, max_lateness_ms=50.0, prompt_method="tokenize")
    assert summary.loc[0, "prefix_hit_rate"] == pytest.approx(50 / 150)


def test_sessions_may_be_named_and_block_ids_negative():
    names = pd.DataFrame({"session_id": ["b", "a", "b", "a"], "turn": [1, 0, 0, 1]})
    # sessions in order of first appearance ("b", then "a"), each session's rows in turn order
    assert [rows.tolist() for rows in sessions_of(names)] == [[2, 0], [1, 3]]
    filler = Filler(
        words=tuple(f"w{i}" for i in range(50)), template_tokens=0.0, tokens_per_word=1.0, method="tokenize"
    )
    assert block_text(filler, (-5, 2), 20, 16, seed=1) != block_text(filler, (5, 2), 20, 16, seed=1)

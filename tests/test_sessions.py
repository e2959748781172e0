"""session_workload: prompts that grow turn by turn, shared system prompts, and the hit rate of an
unbounded cache derived by hand."""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit._workload.prefix import reuse_summary

FIXED = {
    "turns": 3,
    "user_tokens": 100,
    "output_tokens": 50,
    "think_time_s": 10.0,
    "system_prompt_tokens": 64,
    "prefix_block_tokens": 16,
}


def test_a_turns_prompt_is_the_previous_prompt_answer_and_new_tokens():
    frame = toolkit.session_workload(num_sessions=4, session_rate=0.01, seed=2, **FIXED)
    first = frame[frame["session_id"] == 0].sort_values("turn")
    assert first["prompt_tokens"].tolist() == [164, 314, 464]  # 64 + 100, + 50 + 100, + 50 + 100
    assert first["think_time_s"].tolist() == [0.0, 10.0, 10.0]
    start = first["arrival_s"].iloc[0]
    assert first["arrival_s"].tolist() == pytest.approx([start, start + 10, start + 20])
    delayed = toolkit.session_workload(num_sessions=4, session_rate=0.01, seed=2, response_time_s=5.0, **FIXED)
    again = delayed[delayed["session_id"] == 0].sort_values("turn")
    assert again["arrival_s"].tolist() == pytest.approx([start, start + 15, start + 30])
    assert frame.attrs["prefix_block_tokens"] == 16
    assert np.all(np.diff(frame["arrival_s"]) >= 0)


def test_turns_share_the_previous_prompts_full_blocks_and_sessions_the_system_prompt():
    frame = toolkit.session_workload(num_sessions=3, session_rate=1.0, **FIXED)
    by = {(s, t): b for s, t, b in zip(frame["session_id"], frame["turn"], frame["prefix_blocks"], strict=True)}
    # turn 0: 164 tokens, 10 full blocks and a partial one of 4 tokens, which turn 1 does not share
    assert by[(0, 1)][:10] == by[(0, 0)][:10] and by[(0, 1)][10] != by[(0, 0)][10]
    assert by[(0, 2)][:19] == by[(0, 1)][:19]  # 314 tokens: 19 full blocks
    # the 64-token system prompt is 4 blocks, the same in every session; the 5th is the session's
    assert by[(1, 0)][:4] == by[(0, 0)][:4] and by[(1, 0)][4] != by[(0, 0)][4]


def test_an_unbounded_cache_hits_what_the_sharing_gives_by_hand():
    n = 10
    frame = toolkit.session_workload(num_sessions=n, session_rate=1.0, **FIXED)
    # per session: turn 0 finds the system prompt (all but the first session); turn 1 the full blocks of
    # turn 0's prompt and answer as an engine keeps them (164 + 50 - 1 = 213 tokens: 208), turn 2 those
    # of turn 1's (314 + 49 = 363: 352); prompts 164 + 314 + 464
    expected = (64 * (n - 1) + 208 * n + 352 * n) / (942 * n)
    assert reuse_summary(frame)["reuse_hit_rate"] == pytest.approx(expected, rel=1e-12)
    # a cache of prompts only: turn 1 finds turn 0's 160 tokens of full prompt blocks, turn 2 turn 1's 304
    prompts_only = (64 * (n - 1) + 160 * n + 304 * n) / (942 * n)
    assert reuse_summary(frame.drop(columns="answer_blocks"))["reuse_hit_rate"] == pytest.approx(
        prompts_only, rel=1e-12
    )


def test_system_prompts_follow_zipf_popularity():
    frame = toolkit.session_workload(
        num_sessions=20_000, session_rate=10.0, turns=1, user_tokens=1, output_tokens=1,
        system_prompt_tokens=16, system_prompts=5, zipf_exponent=1.0, seed=4,
    )  # fmt: skip
    shares = np.bincount(frame["system_prompt"], minlength=5) / len(frame)
    weights = 1 / np.arange(1, 6)
    np.testing.assert_allclose(shares, weights / weights.sum(), atol=0.015)


def test_gamma_session_starts_have_the_asked_burstiness():
    frame = toolkit.session_workload(
        num_sessions=40_000, session_rate=5.0, arrivals="gamma", ca2=4.0, turns=1, user_tokens=1,
        output_tokens=1, seed=7,
    )  # fmt: skip
    gaps = np.diff(frame["arrival_s"].to_numpy())
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(4.0, rel=0.1)
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.05)


def test_a_session_ends_before_the_turn_that_overflows_the_context():
    frame = toolkit.session_workload(num_sessions=2, session_rate=1.0, max_prompt_tokens=400, **FIXED)
    assert frame.groupby("session_id")["turn"].max().tolist() == [1, 1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_sessions": 0}, "num_sessions"),
        ({"ca2": 2.0}, "ca2 applies to arrivals='gamma' only"),
        ({"think_time_s": ("weibull", 3)}, "think_time_s must be seconds"),
        ({"zipf_exponent": -1}, "zipf_exponent"),
        ({"prefix_block_tokens": 0}, "prefix_block_tokens"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        toolkit.session_workload(**{"num_sessions": 3, "session_rate": 1.0, **kwargs})


def test_describe_workload_treats_sessions_like_a_trace():
    frame = toolkit.session_workload(num_sessions=50, session_rate=0.5, system_prompt_tokens=512, seed=1)
    described = toolkit.describe_workload(frame)
    assert described.summary["reuse_hit_rate"].iloc[0] == pytest.approx(reuse_summary(frame)["reuse_hit_rate"])
    assert described.reuse_curve["hit_rate"].iloc[-1] == pytest.approx(reuse_summary(frame)["reuse_hit_rate"])

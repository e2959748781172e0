"""The report's predicted prefix hit rate per sweep level, derived by hand on llama.cpp's slot rule."""

from __future__ import annotations

import pandas as pd
import pytest

import toolkit
from toolkit._report.prefix_check import predicted_hit_rates, shared_prefix_tokens, sweep_trace, with_prediction


def lanes():
    # two lanes of 15-token prompts sharing 10 tokens; level 1 sends lane 0 then lane 1, level 2 lane 1
    # then lane 0, each after the previous answer (2 output tokens, a few ms)
    return pd.DataFrame(
        {
            "in_flight": [1, 1, 2, 2],
            "lane": [0, 1, 1, 0],
            "start_s": [0.0, 1.1, 0.0, 0.5],
            "end_s": [1.0, 2.0, 0.4, 0.9],
            "prompt_tokens": [15.0, 15.0, 15.0, 15.0],
            "output_tokens": [2.0, 2.0, 2.0, 2.0],
        }
    )


def test_sweep_trace_puts_levels_one_after_another_and_shares_the_prefix():
    trace = sweep_trace(lanes(), 10, [15, 15])  # untagged: the prompts are the lanes' own
    # level 2 begins 1 s after level 1's last answer (2.0 s)
    assert trace["arrival_s"].tolist() == [0.0, 1.1, 3.0, 3.5]
    blocks = trace["prefix_blocks"].tolist()
    assert blocks[0][:10] == blocks[1][:10] and blocks[0][10] != blocks[1][10]
    assert blocks[1] == blocks[2] and blocks[0] == blocks[3]  # a lane's prompt is the same at every level


def test_predicted_hit_rates_follow_the_slot_rule():
    # 2 slots. Level 1: lane 0 finds nothing; lane 1 shares 10/15 with the slot holding lane 0 (above the
    # 0.1 similarity) and reuses 10. Level 2: lane 1 finds its own prompt, all but its last token (14);
    # lane 0 then finds lane 1's in that slot: 10
    rates = predicted_hit_rates(lanes(), shared=10, lane_tokens=[15, 15], slots=2)
    assert rates.to_dict() == pytest.approx({1: 10 / 30, 2: 24 / 30})


def test_tagged_level_runs_share_nothing_with_each_other():
    # untagged prompts of 12 tokens sent as 15: a 3-token level tag, so a run's lanes share 10 + 3 = 13
    # tokens and nothing with another run's. Level 1: lane 1 finds lane 0's 13. Level 2: lane 1 finds no
    # slot above the similarity (the other run's prompts share nothing) and takes the unused slot (0);
    # lane 0 then finds lane 1's 13 there
    trace = sweep_trace(lanes(), 10, [12, 12])
    blocks = trace["prefix_blocks"].tolist()
    assert blocks[0][:13] == blocks[1][:13] and blocks[0][13] != blocks[1][13]
    assert not set(blocks[2]) & set(blocks[1])
    rates = predicted_hit_rates(lanes(), shared=10, lane_tokens=[12, 12], slots=2)
    assert rates.to_dict() == pytest.approx({1: 13 / 30, 2: 13 / 30})


def test_a_run_without_the_field_says_not_recorded():
    levels = pd.DataFrame({"in_flight": [1, 2], "prefix_hit_rate": [0.4, 0.5]})
    out = with_prediction(levels, lanes(), None, 2)  # an older run: no prefix recorded
    assert "predicted_prefix_hit_rate" not in out.columns
    assert "not recorded" in out.attrs["prefix_prediction"]
    assert "not recorded" in toolkit.stat_tiles(out.assign(lanes=8, wall_s=1.0, dec_tok_s=1.0))
    assert "no requests" in with_prediction(levels, None, (10, [15, 15]), 2).attrs["prefix_prediction"]
    predicted = with_prediction(levels, lanes(), (10, [15, 15]), 2)  # the slot rule's, as derived below
    assert predicted["predicted_prefix_hit_rate"].tolist() == pytest.approx([10 / 30, 24 / 30])


def test_the_tile_shows_the_prediction_beside_the_measured_rate():
    levels = pd.DataFrame(
        {"in_flight": [1, 2], "lanes": 8, "wall_s": 1.0, "dec_tok_s": 1.0, "prefix_hit_rate": [0.4, 0.5]}
    )
    levels["predicted_prefix_hit_rate"] = [0.3, 0.55]
    assert "the model predicts 55% there" in toolkit.stat_tiles(levels)


def test_shared_prefix_tokens_is_none_without_the_endpoints():
    assert shared_prefix_tokens("http://127.0.0.1:9", "system", ["a", "b"]) is None

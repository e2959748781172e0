"""The Mooncake traces: loaded with their prefix blocks, against the paper's workload table; the
blocks through slicing, token scaling, rate scaling and re-blocking."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._data import load_csv
from toolkit._workload.blocks import reblock
from toolkit._workload.prefix import reuse_summary

PAPER = load_csv("mooncake_workloads.csv").set_index("trace")


@pytest.mark.parametrize("name", ["mooncake-conversation", "mooncake-synthetic"])
def test_the_shipped_traces_reproduce_the_papers_counts_and_mean_lengths(name):
    published = PAPER.loc[name]
    trace = toolkit.load_trace(name)
    assert len(trace) == published["requests"]
    assert round(trace["prompt_tokens"].mean()) == published["avg_input_tokens"]
    assert round(trace["output_tokens"].mean()) == published["avg_output_tokens"]
    assert trace.attrs["prefix_block_tokens"] == 512
    assert "FAST 2025" in trace.attrs["source"] and "Apache-2.0" in trace.attrs["source"]
    assert trace["prefix_blocks"].map(len).tolist() == (-(-trace["prompt_tokens"] // 512)).tolist()


def cache_ratio_definitions(path):
    """Shares an unbounded cache of 512-token blocks serves, read from the raw JSONL by the definitions one could
    give the paper's "Cache Ratio" (it gives none): requests in arrival order, a hit is a request's leading blocks
    seen before."""
    rows = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["timestamp"])
    seen, hit_tokens, hit_blocks, full_hits, full_blocks, per_request = set(), 0, 0, 0, 0, []
    for row in rows:
        ids, prompt = row["hash_ids"], row["input_length"]
        found = next((i for i, h in enumerate(ids) if h not in seen), len(ids))
        seen.update(ids)
        hit_tokens += min(found * 512, prompt)
        hit_blocks += found
        full_hits += min(found, prompt // 512)
        full_blocks += prompt // 512
        per_request.append(min(found * 512, prompt) / prompt)
    prompt_tokens = sum(r["input_length"] for r in rows)
    return {
        "tokens": hit_tokens / prompt_tokens,
        "blocks": hit_blocks / sum(len(r["hash_ids"]) for r in rows),
        "full_blocks": full_hits / full_blocks,
        "mean_per_request": sum(per_request) / len(rows),
    }


# Each definition's share in percent (from the files, by cache_ratio_definitions) and the paper's Table 2 figure.
# No one definition gives both published figures: the full-block share rounds to 66 on the synthetic trace but to
# 38 on the conversation trace, the per-request mean to 41 and 43. The paper's figures sit between the files'
# shares and what a cache of the previous turn's whole context would add (a request also reusing the partial last
# block and the answer of the request its full blocks continue: 42.2% and 65.7%), which the released block hashes
# cannot show: so they are not reproducible from the files, and this pins the gap.
DEFINITIONS = {
    "mooncake-conversation": {"tokens": 37.4, "blocks": 36.6, "full_blocks": 38.2, "mean_per_request": 40.9},
    "mooncake-synthetic": {"tokens": 65.1, "blocks": 64.0, "full_blocks": 65.9, "mean_per_request": 43.2},
}


@pytest.mark.parametrize(("name", "repeat_pct"), [("mooncake-conversation", 37), ("mooncake-synthetic", 64)])
def test_an_unbounded_cache_repeats_the_issues_shares_and_sits_below_the_papers_cache_ratio(name, repeat_pct):
    reuse = reuse_summary(toolkit.load_trace(name))
    # the issue's figures: the share of block references that repeat an earlier block
    assert round(100 * reuse["reuse_block_share"]) == repeat_pct
    path = Path(toolkit.__file__).parent / "_data" / "traces" / "mooncake" / f"{name.split('-')[1]}_trace.jsonl"
    shares = cache_ratio_definitions(path)
    assert {k: round(100 * v, 1) for k, v in shares.items()} == DEFINITIONS[name]
    # describe_workload's two shares are the token and block definitions
    assert reuse["reuse_hit_rate"] == pytest.approx(shares["tokens"], abs=1e-12)
    assert reuse["reuse_block_share"] == pytest.approx(shares["blocks"], abs=1e-12)
    # the definitions that give the published figure within rounding: none on the conversation trace
    published = PAPER.loc[name, "cache_ratio_pct"]
    matching = {k for k, v in shares.items() if round(100 * v) == published}
    assert matching == ({"full_blocks"} if name == "mooncake-synthetic" else set())


def test_a_window_keeps_blocks_and_misses_what_was_seen_before_it():
    whole = toolkit.load_trace("mooncake-conversation")
    later = toolkit.load_trace("mooncake-conversation", start_s=1800, duration_s=600)
    expected = whole[(whole["arrival_s"] >= 1800) & (whole["arrival_s"] < 2400)]
    assert later["prefix_blocks"].tolist() == expected["prefix_blocks"].tolist()
    assert reuse_summary(later)["reuse_hit_rate"] < reuse_summary(whole)["reuse_hit_rate"]
    stretched = toolkit.load_trace("mooncake-conversation", time_scale=2.0)
    assert stretched["prefix_blocks"].tolist() == whole["prefix_blocks"].tolist()
    assert stretched.attrs["prefix_block_tokens"] == 512


def test_token_scale_scales_the_block_and_keeps_every_requests_blocks():
    whole = toolkit.load_trace("mooncake-synthetic")
    small = toolkit.load_trace("mooncake-synthetic", token_scale=0.1)
    assert small.attrs["prefix_block_tokens"] == 51  # round(51.2)
    assert small["prefix_blocks"].tolist() == whole["prefix_blocks"].tolist()
    counts = small["prefix_blocks"].map(len).to_numpy()
    prompt = small["prompt_tokens"].to_numpy()
    assert np.all((prompt > (counts - 1) * 51) & (prompt <= counts * 51))
    # a prompt moves by at most its blocks times the block's rounding (51.2 to 51)
    moved = np.abs(prompt - np.rint(whole["prompt_tokens"].to_numpy() * 0.1))
    assert np.all(moved <= 0.2 * counts + 1) and moved.max() > 0


def test_rate_scale_copies_share_their_originals_blocks():
    whole = toolkit.load_trace("mooncake-synthetic")
    doubled = toolkit.load_trace("mooncake-synthetic", rate_scale=2.0, seed=3)
    assert sorted(doubled["prefix_blocks"]) == sorted(list(whole["prefix_blocks"]) * 2)


def _jsonl(tmp_path, rows):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


ROWS = [
    {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]},
    {"timestamp": 1500, "input_length": 1500, "output_length": 6, "hash_ids": [1, 2, 3]},
    {"timestamp": 500, "input_length": 512, "output_length": 7, "hash_ids": [1]},
]


def test_a_jsonl_path_loads_sorted_with_seconds(tmp_path):
    trace = toolkit.load_trace(_jsonl(tmp_path, ROWS))
    assert trace["arrival_s"].tolist() == [0.0, 0.5, 1.5]
    assert trace["prompt_tokens"].tolist() == [1000, 512, 1500]
    assert trace["output_tokens"].tolist() == [5, 7, 6]
    assert trace["prefix_blocks"].tolist() == [(1, 2), (1,), (1, 2, 3)]


def test_bad_jsonl_is_refused_naming_the_line(tmp_path):
    with pytest.raises(ValueError, match="line 2"):
        toolkit.load_trace(_jsonl(tmp_path, [ROWS[0], {"timestamp": 1}]))
    with pytest.raises(ValueError, match="ceil"):
        toolkit.load_trace(_jsonl(tmp_path, [{**ROWS[0], "hash_ids": [1, 2, 3]}]))
    with pytest.raises(ValueError, match="prefix_block_tokens: azure-code-2023 has no prefix blocks"):
        toolkit.load_trace("azure-code-2023", prefix_block_tokens=64)


# blocks of 4 tokens: r0 (1, 2) 8 tokens; r1 (1, 2, 3) 10 tokens; r2 (1,) 4 tokens; r3 (9,) 3 tokens
def _hand(block=4):
    frame = pd.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0, 3.0],
            "prompt_tokens": [8, 10, 4, 3],
            "output_tokens": 1,
            "prefix_blocks": [(1, 2), (1, 2, 3), (1,), (9,)],
        }
    )
    frame.attrs["prefix_block_tokens"] = block
    return frame


def test_splitting_a_block_gives_sub_blocks_shared_where_the_old_blocks_were():
    split = reblock(_hand(), block_tokens=2)["prefix_blocks"].tolist()
    assert [len(b) for b in split] == [4, 5, 2, 2]
    assert split[1][:4] == split[0] and split[2] == split[0][:2]
    assert len(set(split[0])) == 4 and split[1][4] not in split[0]
    assert not set(split[3]) & set(split[0] + split[1])


def test_merging_blocks_shares_only_whole_equal_runs():
    merged = reblock(_hand(), block_tokens=8)["prefix_blocks"].tolist()
    assert [len(b) for b in merged] == [1, 2, 1, 1]
    assert merged[1][0] == merged[0][0]  # r1's first 8 tokens are r0's
    assert merged[2][0] != merged[0][0]  # r2's 4 tokens are a different (partial) block


def test_a_size_that_neither_divides_nor_multiplies_cuts_at_the_new_boundaries():
    cut = reblock(_hand(), block_tokens=6)["prefix_blocks"].tolist()
    assert [len(b) for b in cut] == [2, 2, 1, 1]
    assert cut[1][0] == cut[0][0]  # tokens 0-5 are equal
    assert cut[1][1] != cut[0][1]  # r0's tokens 6-7 against r1's 6-9
    assert cut[2][0] != cut[0][0]  # 4 tokens against 6


def test_reblocking_to_a_divisor_keeps_the_unbounded_hit_rate_and_a_coarser_block_loses():
    whole = toolkit.load_trace("mooncake-conversation")
    fine = toolkit.load_trace("mooncake-conversation", prefix_block_tokens=64)
    coarse = toolkit.load_trace("mooncake-conversation", prefix_block_tokens=2048)
    assert fine.attrs["prefix_block_tokens"] == 64
    base = reuse_summary(whole)["reuse_hit_rate"]
    assert reuse_summary(fine)["reuse_hit_rate"] == pytest.approx(base, rel=1e-12)
    assert reuse_summary(coarse)["reuse_hit_rate"] < base
    with pytest.raises(ValueError, match="prefix_block_tokens"):
        toolkit.load_trace("mooncake-conversation", prefix_block_tokens=0)

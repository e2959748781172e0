"""The sweep harness against a local streaming server whose timings and token counts are known.

Timing bounds: the client cannot see a chunk before the server sends it, so every scripted sleep is a
lower bound; the upper bounds add a generous slack (SLACK_S) for loopback and scheduling on a busy
2-core machine. Token counts come from the server's word-count rules (see streaming_server.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from lane_harness import lane_records
from scipy import stats
from streaming_server import Script, StreamingServer, default_script, words

import toolkit
from toolkit._data import load_csv
from toolkit._queueing.arrivals import arrival_offsets_s
from toolkit._sweep.levels import add_relative

SLACK_S = 0.6


def run(srv: StreamingServer, prompts, **kw) -> toolkit.SweepResult:
    kw.setdefault("limits", (1,))
    return toolkit.run_sweep(srv.base_url, "m", prompts, progress=False, **kw)


# --- metric definitions ------------------------------------------------------------------------


def test_ttft_skips_the_role_chunk_and_empty_deltas():
    def script(srv, body):
        return Script(tokens=["a", "b"], ttft_s=0.3, itl_s=0.0, empty_delta_s=0.1, prompt_tokens=1)

    with StreamingServer(script_for=script) as srv:
        lane = run(srv, ["x"]).lanes.iloc[0]
    # the role chunk left at 0 s and an empty delta at 0.1 s; the first content at 0.3 s
    assert 300 <= lane.ttft_ms <= 300 + SLACK_S * 1000


def test_e2e_and_tpot_follow_the_scripted_sleeps():
    # 6 tokens: first after 0.2 s, then 5 gaps of 0.05 s -> E2E >= 0.45 s, TPOT about 50 ms
    with StreamingServer(tokens=6, ttft_s=0.2, itl_s=0.05) as srv:
        lane = run(srv, ["x"], max_tokens=6).lanes.iloc[0]
    assert 450 <= lane.e2e_ms <= 450 + SLACK_S * 1000, lane.e2e_ms
    # TPOT has no strict lower bound: a client delayed on the first chunk shortens e2e - ttft
    assert lane.tpot_ms == pytest.approx(50, abs=SLACK_S * 1000 / 5), (lane.tpot_ms, lane.ttft_ms, lane.e2e_ms)
    assert lane.tpot_ms == pytest.approx((lane.e2e_ms - lane.ttft_ms) / 5)
    assert lane.llm_s == pytest.approx(lane.e2e_ms / 1000, rel=0.05)
    assert lane.server_tpot_ms == 50  # the server's own figure, passed through from `timings`


def test_inter_token_latency_is_the_gap_between_content_chunks():
    # 6 tokens 50 ms apart after a 200 ms first token: the gaps are 50 ms, the TTFT is not one of them
    with StreamingServer(tokens=6, ttft_s=0.2, itl_s=0.05) as srv:
        lane = run(srv, ["x"], max_tokens=6).lanes.iloc[0]
    assert lane.itl_ms_p50 == pytest.approx(50, abs=SLACK_S * 1000 / 5), lane.itl_ms_p50
    assert 50 - SLACK_S * 1000 / 5 <= lane.itl_ms_max < 200
    with StreamingServer(tokens=1) as srv:
        single = run(srv, ["x"]).lanes.iloc[0]
    assert math.isnan(single.itl_ms_p50) and math.isnan(single.itl_ms_max)  # one token has no gap


def test_latency_stats_pool_every_token_gap_and_levels_carry_itl_e2e_and_token_rates():
    # 2 lanes x 6 tokens, 50 ms apart after the first: 2 x 5 = 10 gaps of about 50 ms
    with StreamingServer(tokens=6, ttft_s=0.1, itl_s=0.05) as srv:
        res = run(srv, ["one two three", "four five"], limits=(2,), max_tokens=6, tag_levels=False)
    stats = res.latency_stats(percentiles=(50, 75)).set_index("metric")
    assert stats.loc["itl_ms", "count"] == 10 and stats.loc["ttft_ms", "count"] == 2
    assert stats.loc["itl_ms", "p50"] == pytest.approx(50, abs=SLACK_S * 1000 / 5)
    assert list(stats.columns) == ["in_flight", "rate_rps", "count", "mean", "std", "min", "max", "p50", "p75"]
    level = res.levels.iloc[0]
    assert level.itl_p50_ms == pytest.approx(50, abs=SLACK_S * 1000 / 5)
    e2e = res.lanes["e2e_ms"].to_numpy()
    assert level.e2e_p50_ms == pytest.approx((e2e[0] + e2e[1]) / 2)  # the median of two values
    # prompts are 3 + 2 words = 5 tokens by the server's count, outputs 2 x 6 = 12
    assert level.input_tok_s == pytest.approx(5 / level.wall_s)
    assert level.total_tok_s == pytest.approx(17 / level.wall_s)
    with pytest.raises(ValueError, match="percentiles"):
        res.latency_stats(percentiles=(50, 101))


def test_tokens_come_from_usage_and_prompt_tokens_from_the_server_count():
    with StreamingServer(tokens=4) as srv:
        lane = run(srv, ["one two three"], system_prompt="sys tem", tag_levels=False).lanes.iloc[0]
    assert lane.output_tokens == 4 and lane.tokens_from_usage
    assert lane.prompt_tokens == 5  # "sys tem" + "one two three"
    assert lane.prompt_tokens == len(words(srv.requests[0]))


def test_without_a_usage_chunk_token_counts_are_unknown_and_flagged():
    def script(srv, body):
        return Script(tokens=["a", "b", "c"], usage=False)

    with StreamingServer(script_for=script) as srv:
        res = run(srv, ["x"])
    lane = res.lanes.iloc[0]
    assert math.isnan(lane.output_tokens) and lane.content_chunks == 3 and not lane.tokens_from_usage
    assert math.isnan(lane.prompt_tokens) and math.isnan(lane.cached_tokens)
    assert math.isnan(res.levels.iloc[0].prompt_tokens)
    assert "prompt_tokens" in res.levels.iloc[0].reason


def test_one_token_answer_has_no_tpot_and_empty_answer_no_ttft():
    def script(srv, body):
        n = int(body["messages"][-1]["content"])
        return Script(tokens=["a"] * n, prompt_tokens=1)

    with StreamingServer(script_for=script) as srv:
        lanes = run(srv, ["1", "0"], tag_levels=False).lanes
    one, empty = lanes.iloc[0], lanes.iloc[1]
    assert math.isfinite(one.ttft_ms) and math.isnan(one.tpot_ms) and one.output_tokens == 1
    assert math.isnan(empty.ttft_ms) and empty.output_tokens == 0 and empty.outcome == "ok"


def test_cached_tokens_and_both_hit_rates_match_a_hand_count():
    # word prefixes: lane 0 is new (0 cached of 4); lane 1 shares "a b c" (3 of 4); lane 2 "a b" (2 of 4)
    prompts = ["a b c d", "a b c e", "a b f g"]
    with StreamingServer() as srv:
        res = run(srv, prompts, tag_levels=False)
    assert res.lanes["cached_tokens"].tolist() == [0, 3, 2]
    level = res.levels.iloc[0]
    assert level.prompt_tokens == 12
    assert level.provider_cached_rate == pytest.approx(5 / 12)
    assert level.prefix_hit_rate == pytest.approx(5 / 12)  # from /metrics: cached / (uncached + cached)
    assert level.server_output_tokens == level.output_tokens == 18


def test_provider_without_cached_tokens_gives_nan_with_reason():
    def script(srv, body):
        return Script(tokens=["a"], prompt_tokens=3, cached_tokens=None)

    with StreamingServer(script_for=script) as srv:
        level = run(srv, ["x"]).levels.iloc[0]
    assert math.isnan(level.provider_cached_rate)
    assert "provider_cached_rate" in level.reason


# --- scheduling ----------------------------------------------------------------------------------


def test_in_flight_limit_is_respected_and_results_stay_aligned_with_prompts():
    # lane i answers with i + 1 tokens, later lanes faster, so completion order differs from start order
    def script(srv, body):
        i = int(body["messages"][-1]["content"].split()[-1])  # after the level tag
        return Script(tokens=["w"] * (i + 1), ttft_s=0.02 * (6 - i), prompt_tokens=1)

    with StreamingServer(script_for=script) as srv:
        res = run(srv, [str(i) for i in range(6)], limits=(2,), max_tokens=50)
        assert srv.max_active == 2
    lanes = res.lanes.sort_values("lane")
    assert lanes["output_tokens"].tolist() == [1, 2, 3, 4, 5, 6]


def test_lanes_start_in_prompt_order():
    with StreamingServer() as srv:
        run(srv, [f"p{i}" for i in range(5)], tag_levels=False)
        assert [r["messages"][-1]["content"] for r in srv.requests] == [f"p{i}" for i in range(5)]


def test_level_tags_break_reuse_across_levels_but_keep_it_within_a_level():
    preamble = " ".join(f"rule{i}" for i in range(20))  # 20 shared words
    prompts = [f"lane {i}" for i in range(3)]
    with StreamingServer() as srv:
        res = run(srv, prompts, limits=(1, 2), system_prompt=preamble)
        firsts = [r["messages"][0]["content"].split("\n", 1) for r in srv.requests]
    tags = [t for t, _ in firsts]
    assert len(set(tags[:3])) == 1 and len(set(tags[3:])) == 1 and tags[0] != tags[3]
    assert all(rest == preamble for _, rest in firsts)  # the tag goes first, the preamble follows intact
    for _, level in res.lanes.groupby("in_flight"):
        cached = sorted(level["cached_tokens"])  # lanes may reach the server in either order
        assert cached[0] == 0  # nothing from the earlier level matched, not even its first word
        tag_words = len(tags[0].split())
        assert all(c >= tag_words + 20 + 1 for c in cached[1:])  # tag + preamble + "lane"


def test_sync_postprocess_does_not_block_other_lanes():
    # lane "fast" finishes at once and blocks its worker thread for 1.5 s; the slow lanes' first
    # token is due at 0.3 s and must not wait for it (a blocked loop would see it after >= 1.5 s)
    def script(srv, body):
        fast = body["messages"][-1]["content"] == "fast"
        return Script(tokens=["a"], ttft_s=0.0 if fast else 0.3, prompt_tokens=1)

    def postprocess(lane):
        if lane.index == 0:
            time.sleep(1.5)
        return True

    with StreamingServer(script_for=script) as srv:
        res = run(srv, ["fast", "slow", "slow"], limits=(3,), postprocess=postprocess, slots=2)
    slow = res.lanes[res.lanes["lane"] > 0]
    assert (slow["ttft_ms"] < 300 + SLACK_S * 1000).all()
    assert res.lanes.set_index("lane").loc[0, "postprocess_s"] >= 1.5


def test_one_slot_serializes_postprocessing_and_its_wait_is_measured():
    def postprocess(lane):
        time.sleep(0.3)
        return True

    with StreamingServer(tokens=1) as srv:
        res = run(srv, ["a", "b"], limits=(2,), postprocess=postprocess, slots=1)
    waits = sorted(res.lanes["slot_wait_s"])
    assert waits[0] < 0.1 and 0.3 - 0.05 <= waits[1] <= 0.3 + SLACK_S
    level = res.levels.iloc[0]
    assert level.slot_wait_s == pytest.approx(sum(waits))
    assert level.postprocess_sum_s >= 0.6


async def _async_accept(lane):
    await asyncio.sleep(0)
    return lane.text.startswith("t0")


def test_async_postprocess_is_awaited():
    with StreamingServer(tokens=2) as srv:
        res = run(srv, ["a"], postprocess=_async_accept)
    assert res.lanes["outcome"].tolist() == ["ok"]


def test_rejections_and_raising_postprocess_retry_and_are_recorded():
    calls = {}

    def postprocess(lane):
        calls[lane.index] = calls.get(lane.index, 0) + 1
        if lane.index == 1:
            raise RuntimeError("build failed: E0308")
        return lane.attempt >= 2  # lane 0 is accepted on its second attempt

    with StreamingServer(tokens=2) as srv:
        res = run(srv, ["a", "b"], postprocess=postprocess, attempts=2)
    lanes = res.lanes.sort_values(["lane", "attempt"])
    assert lanes["outcome"].tolist() == ["rejected", "ok", "rejected", "rejected"]
    assert "E0308" in lanes.iloc[3]["error"] and lanes.iloc[3]["final"]
    level = res.levels.iloc[0]
    assert level.lanes_ok == 1 and level.attempts == 4
    assert level.output_tokens == 8  # rejected answers were generated, and their tokens measured


def test_429_retry_after_is_honoured():
    def script(srv, body):
        if len(srv.requests) == 1:
            return Script(tokens=[], status=429, headers={"Retry-After": "1"}, error_body='{"error":"slow down"}')
        return default_script(srv, body)

    with StreamingServer(script_for=script) as srv:
        res = run(srv, ["a"], attempts=3)
    first, second = res.lanes.iloc[0], res.lanes.iloc[1]
    assert first.outcome == "error" and "429" in first.error and "slow down" in first.error
    assert first.retry_after_s == 1
    assert second.outcome == "ok" and second.start_s - first.end_s >= 0.99  # asyncio may wake a hair early
    assert res.levels.iloc[0].lanes_ok == 1


# --- levels ------------------------------------------------------------------------------------


def test_level_columns_are_the_issue_columns_and_follow_from_the_lanes():
    issue = [
        "in_flight",
        "lanes",
        "wall_s",
        "s_per_candidate",
        "speedup",
        "llm_sum_s",
        "achieved_concurrency",
        "postprocess_sum_s",
        "slot_wait_s",
        "prompt_tokens",
        "output_tokens",
        "dec_tok_s",
        "tok_s_gain",
        "lanes_ok",
        "prefix_hit_rate",
        "provider_cached_rate",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "tpot_p95_ms",
        "tpot_p99_ms",
        "verdict",
    ]
    lane_cols = [
        "in_flight",
        "lane",
        "attempt",
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "llm_s",
        "output_tokens",
        "prompt_tokens",
        "cached_tokens",
        "slot_wait_s",
        "postprocess_s",
        "outcome",
        "error",
    ]
    # 50 ms between tokens: a busy host adds milliseconds per lane, which must not read as queueing
    with StreamingServer(tokens=3, itl_s=0.05) as srv:
        res = run(srv, [f"p {i}" for i in range(4)], limits=(1, 4))
    assert list(res.levels.columns[: len(issue)]) == issue
    assert list(res.lanes.columns[: len(lane_cols)]) == lane_cols
    for _, level in res.levels.iterrows():
        lanes = res.lanes[res.lanes["in_flight"] == level.in_flight]
        assert level.llm_sum_s == pytest.approx(lanes["llm_s"].sum())
        assert level.output_tokens == 12
        assert level.dec_tok_s == pytest.approx(12 / level.wall_s)
        assert level.achieved_concurrency == pytest.approx(lanes["llm_s"].sum() / level.wall_s)
        assert level.s_per_candidate == pytest.approx(level.wall_s / 4)
        assert level.ttft_p50_ms == pytest.approx(lanes["ttft_ms"].median())
        # every lane ran inside the level's wall clock
        assert lanes["end_s"].max() <= level.wall_s
    first, last = res.levels.iloc[0], res.levels.iloc[1]
    assert last.speedup == pytest.approx(first.wall_s / last.wall_s)
    assert last.tok_s_gain == pytest.approx(last.dec_tok_s / first.dec_tok_s)
    assert list(res.levels["verdict"]) == ["baseline", "batching"]  # the test server overlaps freely


def _levels(in_flight, llm_sum_s, output_tokens, lanes):
    n = len(in_flight)
    return pd.DataFrame(
        {
            "in_flight": in_flight,
            "lanes": [lanes] * n,
            "wall_s": [1.0] * n,
            "dec_tok_s": [1.0] * n,
            "llm_ms_per_token": np.array(llm_sum_s) * 1000 / np.array(output_tokens),
        }
    )


def test_verdict_reads_batching_for_the_vllm_reference_and_queueing_for_the_cpu_run():
    ref = load_csv("reference_vllm_sweep_32_lanes.csv")
    vllm = add_relative(_levels(ref["in_flight"], ref["llm_sum_s"], ref["output_tokens"], 32), closed_loop=True)
    assert list(vllm["verdict"]) == ["baseline"] + ["batching"] * 5
    # issue 5's 2-core llama-server run: equal work per level, summed lane time 9.6/20.6/32.7/62.7 s
    cpu = add_relative(_levels([1, 2, 4, 8], [9.6, 20.6, 32.7, 62.7], [700] * 4, 8), closed_loop=True)
    assert list(cpu["verdict"]) == ["baseline", "queueing", "queueing", "queueing"]
    # e = ln(62.7 / 9.6) / ln 8, by hand 1.8765 / 2.0794 = 0.902
    assert cpu["elasticity"].iloc[3] == pytest.approx(0.902, abs=0.001)
    half = add_relative(_levels([1, 4], [10, 20], [100, 100], 8), closed_loop=True)  # e = ln 2 / ln 4 = 0.5
    assert half["verdict"].iloc[1] == "mixed"


def test_goodput_counts_requests_meeting_every_slo():
    def script(srv, body):
        slow = "slow" in body["messages"][-1]["content"]
        return Script(tokens=["a", "b"], ttft_s=0.4 if slow else 0.0, prompt_tokens=1)

    with StreamingServer(script_for=script) as srv:
        res = run(srv, ["fast 1", "slow 1", "fast 2", "slow 2"], limits=(4,), slo_ttft_ms=250)
    level = res.levels.iloc[0]
    assert level.goodput_rps == pytest.approx(2 / level.wall_s)  # the two fast ones


def test_repeats_report_t_based_confidence_intervals():
    with StreamingServer(tokens=2, itl_s=0.01) as srv:
        res = run(srv, ["a", "b"], limits=(1, 2), repeats=3)
    assert len(res.runs) == 6 and list(res.levels["repeats"]) == [3, 3]
    for _, level in res.levels.iterrows():
        walls = res.runs[res.runs["in_flight"] == level.in_flight]["wall_s"]
        lo, hi = stats.t.interval(0.95, 2, loc=walls.mean(), scale=stats.sem(walls))
        assert level.wall_s == pytest.approx(walls.mean())
        assert level.wall_s_ci95 == pytest.approx((hi - lo) / 2)
    assert len(res.lanes) == 12 and set(res.lanes["repeat"]) == {1, 2, 3}


def test_open_loop_rates_respect_the_cap_and_report_achieved_rate():
    with StreamingServer(tokens=2, ttft_s=0.05) as srv:
        res = run(srv, [f"p{i}" for i in range(6)], limits=None, rates=(40.0,), max_in_flight=2)
        assert srv.max_active <= 2
    level = res.levels.iloc[0]
    assert level.rate_rps == 40 and level.in_flight == 2
    assert level.achieved_rps == pytest.approx(6 / level.wall_s)
    assert (
        res.lanes["start_s"].is_monotonic_increasing or res.lanes.sort_values("lane")["start_s"].is_monotonic_increasing
    )


@pytest.mark.parametrize(("arrivals", "cv"), [("poisson", 1.0), ("gamma", 0.5), ("gamma", 2.0)])
def test_arrival_gaps_have_the_requested_mean_and_variation(arrivals, cv):
    gaps = np.diff(arrival_offsets_s(40_000, 4.0, arrivals=arrivals, ca2=cv**2, seed=7))
    # mean gap 1/4 s; sampling error of the mean ~ cv * 0.25 / sqrt(40000) = cv * 0.00125
    assert gaps.mean() == pytest.approx(0.25, abs=5 * cv * 0.00125)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


# --- files, resume, stopping -------------------------------------------------------------------


def test_out_dir_files_and_the_api_key_never_written(tmp_path):
    key = "sk-SENTINEL-4c1d"
    with StreamingServer(tokens=2) as srv:
        res = run(srv, ["a", "b"], limits=(1, 2), api_key=key, out_dir=tmp_path)
        assert all(h["authorization"] == f"Bearer {key}" for h in srv.headers)
    lines = (tmp_path / "lanes.jsonl").read_text().splitlines()
    assert len(lines) == len(res.lanes) == 4
    assert {json.loads(line)["lane"] for line in lines} == {0, 1}
    levels = pd.read_csv(tmp_path / "levels.csv")
    assert list(levels["in_flight"]) == [1, 2]
    run_json = json.loads((tmp_path / "run.json").read_text())
    assert run_json["params"]["api_key_set"] is True and run_json["status"] == "complete"
    for path in tmp_path.iterdir():
        assert key not in path.read_text(), path.name


def test_url_credentials_become_basic_auth_and_stay_out_of_files(tmp_path):
    import base64

    with StreamingServer(tokens=1) as srv:
        url = srv.base_url.replace("http://", "http://ann:pw-SENTINEL-9@")
        toolkit.run_sweep(url, "m", ["a"], limits=(1,), out_dir=tmp_path, progress=False)
        assert srv.headers[0]["authorization"] == "Basic " + base64.b64encode(b"ann:pw-SENTINEL-9").decode()
    for path in tmp_path.iterdir():
        assert "pw-SENTINEL-9" not in path.read_text(), path.name


def test_api_key_from_the_environment_is_sent(monkeypatch):
    monkeypatch.setenv("TOOLKIT_API_KEY", "env-key-77")
    with StreamingServer(tokens=1) as srv:
        run(srv, ["a"])
        assert srv.headers[0]["authorization"] == "Bearer env-key-77"


def test_a_used_out_dir_needs_resume(tmp_path):
    with StreamingServer(tokens=1) as srv:
        run(srv, ["a"], out_dir=tmp_path)
        with pytest.raises(ValueError, match="resume=True"):
            run(srv, ["a"], out_dir=tmp_path)
        with pytest.raises(ValueError, match="max_tokens"):
            run(srv, ["a"], out_dir=tmp_path, resume=True, max_tokens=3)


def test_deadline_stops_cleanly_and_resume_runs_only_the_rest(tmp_path):
    # lane i takes 0.4 s; at limit 1 a 1.0 s deadline (which also covers the probe and the first
    # /metrics scrape, up to 0.2 s) lets lanes 0 and 1 finish and cuts lane 2
    with StreamingServer(tokens=1, ttft_s=0.4) as srv:
        with pytest.warns(RuntimeWarning, match="deadline"):
            first = run(srv, [f"p{i}" for i in range(5)], out_dir=tmp_path, deadline_s=1.0)
        assert "deadline" in first.stopped
        done = first.lanes[first.lanes["final"].astype(bool)]
        cut = first.lanes[first.lanes["cancelled"].astype(bool)]
        assert len(done) == 2 and len(cut) == 1 and "deadline" in cut.iloc[0]["error"]
        assert math.isfinite(first.levels.iloc[0].wall_s) and "cut short" in first.levels.iloc[0].reason
        served = len(srv.requests)
        second = run(srv, [f"p{i}" for i in range(5)], out_dir=tmp_path, resume=True)
        assert len(srv.requests) - served == 3  # lanes 2, 3, 4 only
    assert second.stopped == ""
    finals = second.lanes[second.lanes["final"].astype(bool)]
    assert sorted(finals["lane"]) == [0, 1, 2, 3, 4]
    level = second.levels.iloc[0]
    assert level.lanes_ok == 5 and math.isnan(level.wall_s) and "resumed" in level.reason
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "complete"


def test_cancelling_the_sweep_keeps_finished_lanes_on_disk(tmp_path):
    async def main():
        with StreamingServer(tokens=1, ttft_s=0.1) as srv:
            task = asyncio.ensure_future(
                toolkit.sweep(
                    srv.base_url, "m", [f"p{i}" for i in range(6)], limits=(1,), out_dir=tmp_path, progress=False
                )
            )
            while len(srv.requests) < 3:  # lanes 0 and 1 done, lane 2 in flight
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    records = [json.loads(line) for line in (tmp_path / "lanes.jsonl").read_text().splitlines()]
    finished = [r for r in records if r["final"]]
    assert len(finished) >= 2 and all(r["outcome"] == "ok" for r in finished)
    assert any(r["cancelled"] and "interrupted" in r["error"] for r in records)
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "stopped: interrupted"


def test_sweep_is_awaitable_and_run_sweep_refuses_a_running_loop():
    async def main():
        with StreamingServer(tokens=1) as srv:
            res = await toolkit.sweep(srv.base_url, "m", ["a"], limits=(1,), progress=False)
            with pytest.raises(RuntimeError, match="await toolkit.sweep"):
                toolkit.run_sweep(srv.base_url, "m", ["a"], limits=(1,), progress=False)
        return res

    assert asyncio.run(main()).levels.iloc[0].lanes_ok == 1


def test_model_none_takes_the_first_listed_model():
    with StreamingServer(tokens=1) as srv:
        res = toolkit.run_sweep(srv.base_url + "/v1", None, ["a"], limits=(1,), progress=False)
        assert srv.requests[0]["model"] == "test-model"
    assert res.params["model"] == "test-model"


def test_probe_names_the_url_when_nothing_answers():
    with StreamingServer() as srv:
        url = srv.base_url
    with pytest.raises(ConnectionError, match=url.replace(".", r"\.") + "/v1/models"):
        toolkit.run_sweep(url, "m", ["a"], limits=(1,), progress=False, timeout_s=2)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"limits": (0,)}, "limits"),
        ({"limits": (3,)}, "limits"),
        ({"limits": (1, 1)}, "limits"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"attempts": 0}, "attempts"),
        ({"slots": -1}, "slots"),
        ({"repeats": 1.5}, "repeats"),
        ({"rates": (-1.0,)}, "rates"),
        ({"rates": (1.0,), "arrivals": "uniform"}, "arrivals"),
        ({"slo_ttft_ms": float("inf")}, "slo_ttft_ms"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"base_url": "localhost:80"}, "base_url"),
        ({"prompts": []}, "prompts"),
        ({"prompts": [["not a message"]]}, "prompts"),
        ({"resume": True}, "resume"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kw, name):
    args = {"base_url": "http://127.0.0.1:9", "model": "m", "prompts": ["a", "b"], "limits": (1, 2), "progress": False}
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        toolkit.run_sweep(**args)


# --- error paths of one lane (MockTransport) ---------------------------------------------------


def _sse(*chunks: str) -> bytes:
    return "".join(f"data: {c}\n\n" for c in chunks).encode()


def test_server_error_body_is_recorded_with_the_key_redacted():
    records = lane_records(lambda r: httpx.Response(500, text="boom, your key sk-secret is bad"), attempts=2)
    assert [r["outcome"] for r in records] == ["error", "error"] and records[-1]["final"]
    assert "HTTP 500" in records[0]["error"] and "boom" in records[0]["error"]
    assert "sk-secret" not in records[0]["error"]
    assert math.isnan(records[0]["output_tokens"])  # a failure is never zero tokens


def test_malformed_sse_line_is_an_error():
    body = _sse('{"choices":[{"delta":{"content":"a"}}]}', '{"choices": [tru')
    [rec] = lane_records(lambda r: httpx.Response(200, content=body))
    assert rec["outcome"] == "error" and "malformed SSE" in rec["error"]


def test_stream_without_end_is_an_error():
    body = _sse('{"choices":[{"delta":{"content":"a"}}]}')
    [rec] = lane_records(lambda r: httpx.Response(200, content=body))
    assert rec["outcome"] == "error" and "[DONE]" in rec["error"]


def test_connection_failure_is_an_error_with_its_type():
    def handler(request):
        raise httpx.ConnectError("refused")

    [rec] = lane_records(handler)
    assert rec["outcome"] == "error" and "ConnectError" in rec["error"] and rec["llm_s"] >= 0


def test_usage_chunk_is_not_content():
    body = _sse(
        '{"choices":[{"delta":{"role":"assistant"}}]}',
        '{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}',
        '{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":2}}',
        "[DONE]",
    )
    [rec] = lane_records(lambda r: httpx.Response(200, content=body))
    assert rec["outcome"] == "ok" and rec["content_chunks"] == 1 and rec["output_tokens"] == 1


# --- command line --------------------------------------------------------------------------------


def test_cli_sweeps_a_prompts_file_into_out_dir(tmp_path, capsys):
    import argparse

    from toolkit._sweep import cli as _sweep_cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"plain string"\n{"prompt": "a dict"}\n{"messages": [{"role": "user", "content": "m"}]}\n')
    parser = argparse.ArgumentParser()
    _sweep_cli.add_cli(parser.add_subparsers())
    with StreamingServer(tokens=2) as srv:
        args = parser.parse_args(
            [
                "sweep",
                "--base-url",
                srv.base_url,
                "--model",
                "m",
                "--prompts",
                str(prompts),
                "--limits",
                "1,3",
                "--out-dir",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        assert args.func(args) == 0
        assert [r["messages"][-1]["content"].split("\n")[-1] for r in srv.requests[:3]] == [
            "plain string",
            "a dict",
            "m",
        ]
    assert "verdict" in capsys.readouterr().out
    assert len(pd.read_csv(tmp_path / "out" / "levels.csv")) == 2


def test_repeats_run_as_passes_over_every_level():
    # every level once, then every level again: the repeats of a level are as far apart in time as
    # the levels, so their spread holds the drift the verdict's interval stands for
    seen = []

    def script(server, body):
        seen.append(re.search(r"sweep level (.+) repeat (\d+)\]", body["messages"][0]["content"]).groups())
        return default_script(server, body)

    with StreamingServer(tokens=2, script_for=script) as srv:
        res = run(srv, ["a", "b"], limits=(1, 2), repeats=2)
    # two lanes per level run: the first two requests are level 1's, then level 2's, in each pass
    levels = [label for label, _ in seen]
    assert [r for _, r in seen] == ["1"] * 4 + ["2"] * 4, seen
    assert levels[:4] == levels[4:] and levels[0] == levels[1] != levels[2] == levels[3], seen
    assert res.levels["repeats"].tolist() == [2, 2]

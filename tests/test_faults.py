"""The sweep under injected faults: it completes, records every lane, and counts only what it measured.

Every sweep here talks to a :class:`fault_server.FaultServer` on 127.0.0.1 with a short per-request
timeout. The expected numbers come from the fault server's rules, not from the harness: each prompt
below is 5 words (5 prompt tokens), a normal answer is ``TOKENS`` one-word chunks, and the cached part
of a prompt is the longest word prefix it shares with a prompt served before it.
"""

from __future__ import annotations

import json
import math
import warnings

import httpx
import pandas as pd
import pytest
from fault_server import FaultServer

import toolkit

TOKENS = 5
PROMPT_WORDS = 5
PROMPTS = [f"alpha beta gamma delta lane{i}" for i in range(4)]


def _with_fault(lane: int, marker: str) -> list[str]:
    prompts = list(PROMPTS)
    prompts[lane] = f"{prompts[lane]} {marker}"  # the marker is one more word
    return prompts


def _sweep(server: FaultServer, prompts: list[str], out_dir, **kwargs) -> toolkit.SweepResult:
    kwargs = {
        "limits": (1, 2),
        "max_tokens": 16,
        "tag_levels": False,
        "timeout_s": 2.0,
        "progress": False,
        "out_dir": out_dir,
        **kwargs,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "stopped early" is asserted where expected
        return toolkit.run_sweep(server.base_url, "fault-model", prompts, **kwargs)


def _final(lanes: pd.DataFrame) -> pd.DataFrame:
    return lanes[lanes["final"].astype(bool)]


def _jsonl(out_dir) -> list[dict]:
    text = (out_dir / "lanes.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n"), "lanes.jsonl ends in a torn line"
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def server():
    with FaultServer(tokens=TOKENS, token_delay_s=0.001, stall_s=8.0, retry_after_s=0) as srv:
        yield srv
    assert not srv.errors, f"the fault server itself failed: {srv.errors}"


# --- one broken lane among healthy ones -------------------------------------------------------------
ERROR_TEXT = {
    "500": "500",
    "429": "429",
    "reset": "",  # httpx names the failure; any non-empty text will do
    "stall": "timeout",
    "stall_mid": "timeout",
    "malformed": "malformed",
}


@pytest.mark.parametrize("fault", sorted(ERROR_TEXT))
def test_a_failing_lane_is_recorded_and_not_counted(server, tmp_path, fault):
    bad = 2
    prompts = _with_fault(bad, f"[[fault:{fault}]]")
    result = _sweep(server, prompts, tmp_path / "sweep", attempts=2, timeout_s=0.75)
    lanes = result.lanes

    # every lane of every level has a final record; the broken one has both attempts, both failed
    for limit in (1, 2):
        level = lanes[lanes["in_flight"] == limit]
        assert sorted(_final(level)["lane"]) == [0, 1, 2, 3]
        broken = level[level["lane"] == bad].sort_values("attempt")
        assert list(broken["attempt"]) == [1, 2]
        assert (broken["outcome"] == "error").all()
        for err in broken["error"]:
            assert isinstance(err, str) and err.strip() and ERROR_TEXT[fault] in err.lower()
        # a failure is never counted as zero tokens or a zero-length answer
        assert broken["output_tokens"].isna().all() and broken["prompt_tokens"].isna().all()
        assert broken["e2e_ms"].isna().all()
        healthy = level[level["lane"] != bad]
        assert (healthy["outcome"] == "ok").all() and (healthy["output_tokens"] == TOKENS).all()

    # the server was asked exactly `attempts` times per level for the broken lane
    assert len(server.chat_requests(prompt_contains=f"[[fault:{fault}]]")) == 2 * 2

    # level figures count the three lanes that were measured, and say so
    for _, row in result.levels.iterrows():
        assert row["lanes"] == 4 and row["lanes_ok"] == 3 and row["lanes_failed"] == 1
        assert row["output_tokens"] == 3 * TOKENS
        assert row["prompt_tokens"] == 3 * PROMPT_WORDS
        assert row["dec_tok_s"] == pytest.approx(row["output_tokens"] / row["wall_s"])
        for col in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms"):
            assert math.isfinite(row[col]) and row[col] > 0

    # what is on disk is what was returned, the errors included
    on_disk = _jsonl(tmp_path / "sweep")
    assert len(on_disk) == len(lanes)
    assert sum(1 for r in on_disk if r["lane"] == bad and r["outcome"] == "error" and r["error"]) == 4
    levels_csv = pd.read_csv(tmp_path / "sweep" / "levels.csv")
    assert list(levels_csv["lanes_ok"]) == [3, 3]


def test_every_lane_failing_gives_unknown_rates_not_zeros(server, tmp_path):
    prompts = [f"[[fault:500]] {p}" for p in PROMPTS]
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,))
    row = result.levels.iloc[0]
    assert row["lanes_ok"] == 0 and row["lanes_failed"] == 4
    for col in ("output_tokens", "dec_tok_s", "ttft_p50_ms", "tpot_p95_ms", "provider_cached_rate"):
        assert math.isnan(row[col]), f"{col} = {row[col]!r} although no lane was measured"
    assert "output_tokens" in row["reason"]


# --- answers that arrive but lack something ---------------------------------------------------------
def test_missing_usage_leaves_every_token_count_unknown(server, tmp_path):
    prompts = [f"[[fault:no_usage]] {p}" for p in PROMPTS]
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,))
    lanes = result.lanes
    assert (lanes["outcome"] == "ok").all()
    assert (lanes["content_chunks"] == TOKENS).all()  # one word per chunk, TOKENS chunks sent
    assert lanes["output_tokens"].isna().all()  # not the chunks counted in its place
    assert not lanes["tokens_from_usage"].astype(bool).any()
    assert lanes["prompt_tokens"].isna().all() and lanes["cached_tokens"].isna().all()
    row = result.levels.iloc[0]
    assert math.isnan(row["output_tokens"]) and math.isnan(row["dec_tok_s"])
    assert math.isnan(row["prompt_tokens"]) and math.isnan(row["provider_cached_rate"])
    assert "4 of 4 answers carried no usage.completion_tokens" in row["reason"]
    assert "prompt_tokens" in row["reason"] and "provider_cached_rate" in row["reason"]


def test_one_lane_without_usage_does_not_shrink_the_level_totals(server, tmp_path):
    # three lanes report 5 prompt tokens each, one (6 words with its marker) reports nothing: the
    # level's prompt total is 21 in truth, so 15 would be a confident wrong number; NaN is acceptable,
    # and so for its output total (4 * TOKENS in truth)
    prompts = _with_fault(0, "[[fault:no_usage]]")
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,))
    row = result.levels.iloc[0]
    assert row["lanes_ok"] == 4
    assert math.isnan(row["output_tokens"]) or row["output_tokens"] == 4 * TOKENS, row["output_tokens"]
    assert "1 of 4 answers carried no usage.completion_tokens" in row["reason"]
    truth = sum(len(p.split()) for p in prompts)
    assert math.isnan(row["prompt_tokens"]) or row["prompt_tokens"] == truth, row["prompt_tokens"]


def test_an_empty_completion_has_no_first_token(server, tmp_path):
    prompts = _with_fault(1, "[[fault:empty]]")
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,))
    empty = result.lanes[result.lanes["lane"] == 1].iloc[0]
    if empty["outcome"] == "ok":
        assert empty["output_tokens"] == 0
    else:
        assert empty["error"].strip()
    # no content arrived: TTFT and TPOT are unknown, never 0 or the stream's length
    assert math.isnan(empty["ttft_ms"]) and math.isnan(empty["tpot_ms"])
    row = result.levels.iloc[0]
    others = result.lanes[result.lanes["lane"] != 1]
    assert row["ttft_p50_ms"] == pytest.approx(others["ttft_ms"].median())


def test_all_empty_completions_give_unknown_latencies(server, tmp_path):
    prompts = [f"[[fault:empty]] {p}" for p in PROMPTS]
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,))
    row = result.levels.iloc[0]
    for col in ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "llm_ms_per_token"):
        assert math.isnan(row[col]), f"{col} = {row[col]!r} with no token produced"


# --- 429 and Retry-After ------------------------------------------------------------------------------
def test_429_waits_for_retry_after_then_succeeds(tmp_path):
    with FaultServer(tokens=TOKENS, token_delay_s=0, retry_after_s=1) as server:
        prompts = _with_fault(1, "[[fault:429*1]]")
        result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,), attempts=3)
        seen = server.chat_requests(prompt_contains="[[fault:429*1]]")
    assert [r["fault"] for r in seen] == ["429", None]
    # the retry came no sooner than the server asked (1 s after the 429 was sent)
    assert seen[1]["t"] - seen[0]["t"] >= 1.0
    lane = result.lanes[result.lanes["lane"] == 1].sort_values("attempt")
    assert list(lane["attempt"]) == [1, 2]
    assert list(lane["outcome"]) == ["error", "ok"]
    assert "429" in lane["error"].iloc[0] and lane["retry_after_s"].iloc[0] == 1
    assert result.levels.iloc[0]["lanes_ok"] == 4


def test_429_stops_at_the_attempt_budget(server, tmp_path):
    prompts = _with_fault(3, "[[fault:429]]")
    result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,), attempts=3)
    assert len(server.chat_requests(prompt_contains="[[fault:429]]")) == 3
    lane = result.lanes[result.lanes["lane"] == 3]
    assert list(lane["attempt"]) == [1, 2, 3] and (lane["outcome"] == "error").all()
    assert result.levels.iloc[0]["lanes_ok"] == 3


def test_a_retry_after_beyond_the_deadline_is_not_waited_for(tmp_path):
    with FaultServer(tokens=TOKENS, token_delay_s=0, retry_after_s=600) as server:
        prompts = _with_fault(0, "[[fault:429]]")
        result = _sweep(server, prompts, tmp_path / "sweep", limits=(1,), attempts=5, deadline_s=20)
        assert len(server.chat_requests(prompt_contains="[[fault:429]]")) == 1
    lane = result.lanes[result.lanes["lane"] == 0]
    assert len(lane) == 1 and bool(lane["final"].iloc[0]) and "deadline" in lane["error"].iloc[0]
    assert result.levels.iloc[0]["lanes_ok"] == 3


# --- bounds --------------------------------------------------------------------------------------------
def test_the_total_deadline_stops_a_stalled_sweep_and_records_the_lanes_in_flight(tmp_path):
    with FaultServer(tokens=TOKENS, token_delay_s=0, stall_s=30) as server:
        prompts = [f"[[fault:stall_mid]] {p}" for p in PROMPTS]
        with pytest.warns(RuntimeWarning, match="stopped early"):
            result = toolkit.run_sweep(
                server.base_url,
                "fault-model",
                prompts,
                limits=(2, 4),
                max_tokens=16,
                tag_levels=False,
                timeout_s=60,
                deadline_s=1.0,
                progress=False,
                out_dir=tmp_path / "sweep",
            )
    assert "deadline" in result.stopped
    # the two lanes in flight at the deadline are recorded as cancelled errors; nothing else started
    assert sorted(result.lanes["lane"]) == [0, 1]
    assert (result.lanes["outcome"] == "error").all()
    assert result.lanes["error"].str.contains("deadline").all()
    assert list(result.levels["in_flight"]) == [2]  # the second level never started
    row = result.levels.iloc[0]
    assert row["lanes_ok"] == 0 and row["lanes_ok"] + row["lanes_failed"] + row["lanes_unfinished"] == 4
    assert "cut short" in row["reason"]
    run = json.loads((tmp_path / "sweep" / "run.json").read_text())
    assert run["status"].startswith("stopped")


def test_nothing_listening_is_a_clear_error_naming_the_url():
    with FaultServer() as server:
        port = server.port
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        toolkit.run_sweep(url, "fault-model", PROMPTS, limits=(1,), timeout_s=2, progress=False)


def test_the_fault_server_listens_on_loopback_only(server):
    assert server.root_url.startswith("http://127.0.0.1:")
    assert server._httpd.server_address[0] == "127.0.0.1"


# --- /metrics: present, absent, malformed, reset ---------------------------------------------------
def test_prefix_hit_rate_matches_the_server_counters(server, tmp_path):
    # level 1: lane 0 is new (0 cached of 5), lanes 1-3 share its first 4 words: 12 of 20 cached.
    # level 2: every prompt was seen whole; the last token is always evaluated: 4 of 5 each, 16 of 20.
    result = _sweep(server, PROMPTS, tmp_path / "sweep")
    assert list(result.levels["prefix_hit_rate"]) == pytest.approx([12 / 20, 16 / 20])
    assert list(result.levels["provider_cached_rate"]) == pytest.approx([12 / 20, 16 / 20])


@pytest.mark.parametrize(("mode", "why"), [("absent", "404"), ("malformed", "format")])
def test_unusable_metrics_give_no_rate_and_say_why(server, tmp_path, mode, why):
    server.metrics_mode = mode
    result = _sweep(server, PROMPTS, tmp_path / "sweep")
    assert result.levels["prefix_hit_rate"].isna().all()
    assert result.levels["reason"].str.contains("prefix_hit_rate").all()
    assert result.levels["reason"].str.contains(why).all()
    # the client-side figures are unaffected
    assert list(result.levels["provider_cached_rate"]) == pytest.approx([12 / 20, 16 / 20])
    assert (result.levels["lanes_ok"] == 4).all()


def test_a_counter_reset_mid_level_gives_no_rate_for_that_level(server, tmp_path):
    # requests 1-4 are level 1; the counters drop to zero when request 8 (the last of level 2) arrives,
    # so level 2 ends below where it began
    server.reset_metrics_at_request = 8
    result = _sweep(server, PROMPTS, tmp_path / "sweep")
    first, second = result.levels.iloc[0], result.levels.iloc[1]
    assert first["prefix_hit_rate"] == pytest.approx(12 / 20)
    assert math.isnan(second["prefix_hit_rate"])
    assert "went down" in second["reason"]


def test_scrape_metrics_reads_the_counters_and_reports_unusable_pages(server):
    server.prompt_tokens_total, server.cached_tokens_total = 30, 12
    frame = toolkit.scrape_metrics(f"{server.root_url}/metrics")
    values = dict(zip(frame["name"], frame["value"]))
    assert values["llamacpp:prompt_tokens_total"] == 30 and values["llamacpp:prompt_tokens_cached_total"] == 12
    assert frame.attrs["engine"] == "llamacpp"
    server.metrics_mode = "absent"
    with pytest.raises(httpx.HTTPError, match="404"):
        toolkit.scrape_metrics(f"{server.root_url}/metrics", timeout_s=2)
    server.metrics_mode = "malformed"
    with pytest.raises(ValueError, match="metrics"):
        toolkit.scrape_metrics(f"{server.root_url}/metrics", timeout_s=2)

"""Prometheus /metrics: engine detection, per-level deltas and the reasons for a missing rate."""

from __future__ import annotations

import math

import pytest
from streaming_server import StreamingServer

import toolkit
from toolkit._sweep.metrics import delta, parse_snapshot

VLLM = """# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {q0}
vllm:prefix_cache_queries_total{{engine="1",model_name="m"}} {q1}
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {h0}
vllm:prefix_cache_hits_total{{engine="1",model_name="m"}} {h1}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{model_name="m"}} {g}
"""

VLLM_DEPRECATED = """# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{{model_name="m"}} {q}
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{{model_name="m"}} {h}
"""

SGLANG = """# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{{model_name="m"}} {p}
# TYPE sglang:cached_tokens counter
sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {cd}
sglang:cached_tokens_total{{model_name="m",cache_source="host"}} {ch}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{model_name="m"}} 0.99
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m"}} {g}
"""

LLAMACPP = """# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {p}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {c}
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {g}
"""


def test_vllm_sums_label_sets_and_divides_hits_by_queries():
    before = parse_snapshot(VLLM.format(q0=100, q1=50, h0=40, h1=10, g=7))
    after = parse_snapshot(VLLM.format(q0=300, q1=150, h0=190, h1=60, g=107))
    d = delta(before, after)
    # queries 450 - 150 = 300, hits 250 - 50 = 200
    assert before.engine == "vllm"
    assert d.prefix_hit_rate == pytest.approx(200 / 300) and d.output_tokens == 100
    assert d.prefix_reason == "" and d.output_reason == ""


def test_more_hits_than_queries_is_no_rate():
    # a hostile or broken server: 200 hits over 100 queries would read as a 200% hit rate
    before = parse_snapshot(VLLM.format(q0=0, q1=0, h0=0, h1=0, g=0))
    after = parse_snapshot(VLLM.format(q0=50, q1=50, h0=150, h1=50, g=10))
    d = delta(before, after)
    assert math.isnan(d.prefix_hit_rate) and "more cache hits than tokens looked up" in d.prefix_reason
    assert d.output_tokens == 10


def test_vllm_deprecated_names_are_read_and_a_missing_token_counter_is_explained():
    d = delta(parse_snapshot(VLLM_DEPRECATED.format(q=0, h=0)), parse_snapshot(VLLM_DEPRECATED.format(q=80, h=60)))
    assert d.prefix_hit_rate == pytest.approx(0.75)
    assert math.isnan(d.output_tokens) and "generated-token" in d.output_reason


def test_a_cold_servers_zero_is_a_valid_baseline():
    d = delta(
        parse_snapshot(VLLM.format(q0=0, q1=0, h0=0, h1=0, g=0)),
        parse_snapshot(VLLM.format(q0=40, q1=0, h0=30, h1=0, g=5)),
    )
    assert d.prefix_hit_rate == pytest.approx(0.75)


def test_sglang_uses_the_cached_token_counter_not_the_gauge():
    before = parse_snapshot(SGLANG.format(p=1000, cd=100, ch=0, g=10))
    after = parse_snapshot(SGLANG.format(p=2000, cd=600, ch=100, g=60))
    d = delta(before, after)
    # cached (device + host) 700 - 100 = 600 of 1000 prompt tokens; the 0.99 gauge plays no part
    assert before.engine == "sglang" and d.prefix_hit_rate == pytest.approx(0.6) and d.output_tokens == 50


def test_llamacpp_prompt_counter_excludes_cached_tokens():
    d = delta(parse_snapshot(LLAMACPP.format(p=100, c=0, g=0)), parse_snapshot(LLAMACPP.format(p=160, c=180, g=32)))
    # 60 processed + 180 reused = 240 looked up, 180 hits
    assert d.prefix_hit_rate == pytest.approx(180 / 240) and d.output_tokens == 32


def test_no_prompt_tokens_in_the_level_gives_nan_with_reason():
    same = parse_snapshot(LLAMACPP.format(p=5, c=5, g=5))
    d = delta(same, same)
    assert math.isnan(d.prefix_hit_rate) and "no prompt tokens" in d.prefix_reason
    assert d.output_tokens == 0


def test_a_counter_that_went_down_gives_no_rate():
    d = delta(parse_snapshot(LLAMACPP.format(p=500, c=300, g=90)), parse_snapshot(LLAMACPP.format(p=20, c=0, g=4)))
    assert math.isnan(d.prefix_hit_rate) and math.isnan(d.output_tokens)
    assert "went down" in d.prefix_reason and "went down" in d.output_reason


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("this is { not prometheus", "Prometheus text format"),
        ("# TYPE other_total counter\nother_total 3\n", "no known"),
        ("", "no known"),
    ],
)
def test_unusable_pages_give_a_reason(text, words):
    snap = parse_snapshot(text)
    assert snap.engine is None and words in snap.reason
    d = delta(snap, parse_snapshot(LLAMACPP.format(p=1, c=1, g=1)))
    assert math.isnan(d.prefix_hit_rate) and words in d.prefix_reason


def test_scrape_metrics_reads_a_live_page():
    with StreamingServer() as srv:
        toolkit.run_sweep(srv.base_url, "m", ["a b", "a c"], limits=(1,), tag_levels=False, progress=False)
        frame = toolkit.scrape_metrics(srv.base_url + "/metrics")
    values = dict(zip(frame["name"], frame["value"]))
    # "a b" is new (2 processed), "a c" reuses "a" (1 processed, 1 cached); 6 + 6 tokens generated
    assert values["llamacpp:prompt_tokens_total"] == 3
    assert values["llamacpp:prompt_tokens_cached_total"] == 1
    assert values["llamacpp:tokens_predicted_total"] == 12
    assert set(frame["family"]) >= {"llamacpp:prompt_tokens"}  # the parser drops _total from families
    assert frame.attrs["engine"] == "llamacpp"


def test_scrape_metrics_rejects_a_bad_url():
    with pytest.raises(ValueError, match="metrics_url"):
        toolkit.scrape_metrics("localhost/metrics")
    with pytest.raises(ValueError, match="timeout_s"):
        toolkit.scrape_metrics("http://127.0.0.1:9/metrics", timeout_s=0)


def test_sweep_without_metrics_page_says_why():
    with StreamingServer(metrics=False) as srv:
        level = toolkit.run_sweep(srv.base_url, "m", ["a"], limits=(1,), progress=False).levels.iloc[0]
    assert math.isnan(level.prefix_hit_rate) and "HTTP 404" in level.reason
    assert math.isnan(level.server_output_tokens)


def test_a_reset_between_the_scrapes_is_caught_by_the_requests_own_counts():
    # the counters restarted mid-level and climbed back past the baseline: no decrease is visible,
    # but 60 + 20 = 80 looked-up tokens cannot serve requests that carried 120 prompt tokens
    d = delta(parse_snapshot(LLAMACPP.format(p=50, c=10, g=10)), parse_snapshot(LLAMACPP.format(p=110, c=30, g=40)))
    assert d.prefix_hit_rate == pytest.approx(20 / 80)
    checked = d.checked(prompt_tokens=120, output_tokens=30)
    assert math.isnan(checked.prefix_hit_rate) and "reset" in checked.prefix_reason
    assert checked.output_tokens == 30  # 30 generated >= 30 reported: still consistent
    assert math.isnan(d.checked(prompt_tokens=80, output_tokens=31).output_tokens)

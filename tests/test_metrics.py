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


# TGI's /metrics as its router writes it (metrics-exporter-prometheus 0.15: counters without _total, a
# series only once recorded, histograms as _bucket/_sum/_count); names and help texts from
# huggingface/text-generation-inference router/src/server.rs and validation.rs. A TGI launched with
# --max-input-tokens 1024 --max-total-tokens 2048 writes 100 buckets per token histogram (1024/100 and
# 2048/100 apart); they are cut to a few here, the parser reads only _sum.
TGI_COLD = """# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 16000

"""

# three chat requests of 12, 30 and 58 prompt tokens that generated 16, 16 and 8 tokens, and one that
# failed validation (counted by tgi_request_count and tgi_request_failure, by no token series)
TGI_AFTER = """# HELP tgi_request_count Total number of requests
# TYPE tgi_request_count counter
tgi_request_count 4

# HELP tgi_request_success Number of successful requests
# TYPE tgi_request_success counter
tgi_request_success 3

# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 1

# HELP tgi_batch_inference_count Inference calls per method (prefill or decode)
# TYPE tgi_batch_inference_count counter
tgi_batch_inference_count{method="prefill"} 3
tgi_batch_inference_count{method="decode"} 22

# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 16000

# HELP tgi_queue_size Current queue size
# TYPE tgi_queue_size gauge
tgi_queue_size 0

# HELP tgi_batch_current_size Current batch size
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 0

# HELP tgi_request_input_length Input token length per request
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="10.24"} 0
tgi_request_input_length_bucket{le="20.48"} 1
tgi_request_input_length_bucket{le="30.72"} 2
tgi_request_input_length_bucket{le="40.96"} 2
tgi_request_input_length_bucket{le="51.2"} 2
tgi_request_input_length_bucket{le="61.44"} 3
tgi_request_input_length_bucket{le="+Inf"} 3
tgi_request_input_length_sum 100
tgi_request_input_length_count 3

# HELP tgi_request_generated_tokens Generated tokens per request
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="20.48"} 3
tgi_request_generated_tokens_bucket{le="40.96"} 3
tgi_request_generated_tokens_bucket{le="+Inf"} 3
tgi_request_generated_tokens_sum 40
tgi_request_generated_tokens_count 3

# HELP tgi_request_queue_duration Time spent in the queue per request
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.0003375"} 2
tgi_request_queue_duration_bucket{le="0.00050625"} 3
tgi_request_queue_duration_bucket{le="+Inf"} 3
tgi_request_queue_duration_sum 0.000912
tgi_request_queue_duration_count 3

"""


def test_tgi_token_histograms_from_a_cold_page():
    before, after = parse_snapshot(TGI_COLD), parse_snapshot(TGI_AFTER)
    # the cold page has no token series yet (TGI writes one only once recorded): zero, not unknown
    assert before.engine == after.engine == "tgi" and before.counters == {"queries": 0.0, "output": 0.0}
    d = delta(before, after)
    # 12 + 30 + 58 = 100 prompt tokens and 16 + 16 + 8 = 40 generated; the request count (4, with the
    # failed one), the queue and batch gauges and the durations play no part
    assert d.prompt_tokens == 100 and d.output_tokens == 40 and d.output_reason == ""
    assert math.isnan(d.prefix_hit_rate) and "no prefix-cache hit counter" in d.prefix_reason


def test_tgi_page_through_scrape_metrics():
    class TgiServer(StreamingServer):
        def metrics_text(self) -> str:
            return TGI_AFTER

    with TgiServer() as srv:
        frame = toolkit.scrape_metrics(srv.base_url + "/metrics")
    values = dict(zip(frame["name"], frame["value"]))
    assert frame.attrs["engine"] == "tgi"
    assert values["tgi_request_input_length_sum"] == 100 and values["tgi_request_generated_tokens_sum"] == 40
    assert values["tgi_request_count_total"] == 4  # prometheus_client names the counter's sample with _total


def test_a_sweep_against_a_tgi_page_counts_its_generated_tokens():
    class TgiServer(StreamingServer):
        def metrics_text(self) -> str:
            with self._lock:
                prompt, generated = self.counters["prompt"] + self.counters["cached"], self.counters["predicted"]
            page = TGI_COLD
            if generated:  # TGI writes the histograms only once a request has recorded them
                page += (
                    "# TYPE tgi_request_input_length histogram\n"
                    f"tgi_request_input_length_sum {prompt}\ntgi_request_input_length_count 2\n"
                    "# TYPE tgi_request_generated_tokens histogram\n"
                    f"tgi_request_generated_tokens_sum {generated}\ntgi_request_generated_tokens_count 2\n"
                )
            return page

    with TgiServer() as srv:
        level = toolkit.run_sweep(srv.base_url, "m", ["a b", "a c"], limits=(2,), progress=False).levels.iloc[0]
    assert level.server_output_tokens == 12  # 6 + 6, from a cold page as the baseline
    assert math.isnan(level.prefix_hit_rate) and "tgi exposes no prefix-cache hit counter" in level.reason

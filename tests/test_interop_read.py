"""read_run: other tools' runs (and the toolkit's own folder) read into the sweep's frames.

Each real-file test checks the totals the tool itself printed for that run (its console output or the
file's own summary section, quoted in the comments), computed here independently of the reader where
per-request records exist.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from toolkit import read_run

DATA = Path(__file__).parent / "data"


def test_aiperf_per_request_export_matches_what_aiperf_printed():
    # tests/data/aiperf/profile_export_console.txt, printed by `aiperf profile` for this run:
    # "Request Count (requests) 24.00", "Output Sequence Length (tokens) avg 32.00" (24 x 32 = 768,
    # profile_export_aiperf.csv: "Total Output Tokens (tokens),768.00"), "Time to First Token (ms) p50 172.69"
    run = read_run(DATA / "aiperf" / "profile_export.jsonl")
    level = run.levels.iloc[0]
    assert run.levels.attrs["format"] == "aiperf"
    assert run.levels.attrs["version"] == "aiperf 0.13.0, schema 1.4"
    assert len(run.lanes) == 24 and level["lanes_ok"] == 24
    assert level["output_tokens"] == 768
    assert level["ttft_p50_ms"] == pytest.approx(172.69, abs=0.005)
    assert level["in_flight"] == 2  # from the summary beside the JSONL: --concurrency 2
    # the records' own TTFTs, read here without the reader
    lines = [json.loads(x) for x in (DATA / "aiperf" / "profile_export.jsonl").read_text().splitlines()]
    ttfts = [x["metrics"]["time_to_first_token"]["value"] for x in lines]
    assert level["ttft_p50_ms"] == pytest.approx(float(np.median(ttfts)))


def test_aiperf_summary_json_and_csv_agree_with_the_console():
    for name in ("profile_export_aiperf.json", "profile_export_aiperf.csv"):
        level = read_run(DATA / "aiperf" / name).levels.iloc[0]
        assert level["lanes_ok"] == 24, name
        assert level["output_tokens"] == 768, name
        assert level["ttft_p50_ms"] == pytest.approx(172.69, abs=0.005), name
        # "Output Token Throughput (tokens/sec) 23.72"
        assert level["dec_tok_s"] == pytest.approx(23.72, abs=0.005), name


def test_aiperf_tpot_from_records_equals_aiperf_inter_token_latency():
    # AIPerf's ITL is (latency - TTFT) / (output tokens - 1), the sweep's TPOT: the console's
    # "Inter Token Latency (ms) p50 81.73"; the reader derives it per request from the records
    level = read_run(DATA / "aiperf").levels.iloc[0]
    assert level["tpot_p50_ms"] == pytest.approx(81.73, abs=0.005)


def _genai_perf_console() -> dict[str, list[str]]:
    """The rows of the table genai-perf printed (tests/data/genai_perf/console.txt): name -> cells."""
    rows = {}
    for line in (DATA / "genai_perf" / "console.txt").read_text().splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def _genai_perf_content_ms() -> list[list[float]]:
    """Per request of perf_analyzer's export, without the reader: the times (ms after the send) of the
    events with content, the ones genai-perf keeps (the first is the TTFT, the last the latency)."""
    doc = json.loads((DATA / "genai_perf" / "profile_export.json").read_text())
    out = []
    for request in doc["experiments"][0]["requests"]:
        times = []
        for stamp, event in zip(request["response_timestamps"], request["response_outputs"]):
            body = event["response"].removeprefix("data:").strip()
            if body != "[DONE]" and json.loads(body)["choices"][0]["delta"].get("content"):
                times.append((stamp - request["timestamp"]) / 1e6)
        out.append(times)
    return out


def test_genai_perf_exports_match_what_genai_perf_printed():
    # console.txt, printed by `genai-perf profile` (0.0.16) for this run: "Request Count (count) 24.00",
    # "Output Sequence Length (tokens) avg 49.46" (x 24 = 1187.04: 1187 whole tokens), "Time To First
    # Token (ms) avg 343.95"; its table has no p50, which genai-perf wrote to profile_export_genai_perf.csv
    console = _genai_perf_console()
    count = float(console["Request Count (count)"][0])
    output_tokens = round(float(console["Output Sequence Length (tokens)"][0]) * count)
    with open(DATA / "genai_perf" / "profile_export_genai_perf.csv") as f:
        csv_p50 = {row["Metric"]: row["p50"] for row in csv.DictReader(f)}["Time To First Token (ms)"]
    # the median TTFT genai-perf wrote is the median of the per-request TTFTs its input holds
    ttfts = [times[0] for times in _genai_perf_content_ms()]
    assert len(ttfts) == count
    assert float(np.mean(ttfts)) == pytest.approx(float(console["Time To First Token (ms)"][0]), abs=0.005)
    assert float(np.median(ttfts)) == pytest.approx(float(csv_p50), abs=0.005)
    for name in ("profile_export_genai_perf.json", "profile_export_genai_perf.csv"):
        run = read_run(DATA / "genai_perf" / name)
        level = run.levels.iloc[0]
        assert run.levels.attrs["format"] == "genai-perf", name
        assert "no version field" in run.levels.attrs["version"], name
        assert level["lanes_ok"] == count and level["output_tokens"] == output_tokens, name
        assert level["ttft_p50_ms"] == pytest.approx(float(np.median(ttfts)), abs=0.005), name
        assert math.isnan(level["lanes_failed"]) and "lanes_failed" in level["reason"], name
    run = read_run(DATA / "genai_perf")  # the folder: the summary JSON, with --concurrency 2 from its input_config
    assert run.levels.attrs["version"].endswith("input_config.perf_analyzer.stimulus, as 0.0.16 writes)")
    assert run.levels.iloc[0]["in_flight"] == 2


def test_perf_analyzer_requests_give_genai_perf_latencies_and_no_invented_token_counts():
    # genai-perf's CSV for this run: "Request Latency (ms)" p50 "3,033.34"; its TTFT p50 323.53
    times = _genai_perf_content_ms()
    gaps = [b - a for t in times for a, b in zip(t, t[1:])]
    run = read_run(DATA / "genai_perf" / "profile_export.json")
    level = run.levels.iloc[0]
    assert run.levels.attrs["format"] == "perf_analyzer" and level["in_flight"] == 2
    assert len(run.lanes) == level["lanes_ok"] == 24
    assert level["ttft_p50_ms"] == pytest.approx(323.53, abs=0.005)
    assert level["e2e_p50_ms"] == pytest.approx(3033.34, abs=0.005)
    assert level["itl_p50_ms"] == pytest.approx(float(np.median(gaps)))
    # llama-server streamed no usage and genai-perf's tokenizer is not in the file: NaN, with a reason
    assert math.isnan(level["output_tokens"]) and "streamed no usage" in level["reason"]
    # the folder: genai-perf's level (its token totals) with these requests as its lanes
    folder = read_run(DATA / "genai_perf")
    assert folder.levels.attrs["format"] == "genai-perf" and folder.levels.iloc[0]["output_tokens"] == 1187
    assert folder.lanes["ttft_ms"].tolist() == pytest.approx([t[0] for t in times])
    assert folder.levels.iloc[0]["itl_p50_ms"] == pytest.approx(float(np.median(gaps)))


def test_perf_analyzer_usage_rates_unstreamed_answers_and_empty_answers(tmp_path):
    def request(sent, stamps, responses):
        return {"timestamp": sent, "request_inputs": {"payload": '{"model": "m"}'},
                "response_timestamps": stamps, "response_outputs": [{"response": r} for r in responses]}  # fmt: skip

    chunk = 'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    usage = 'data: {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 7}}\n\n'
    t0 = 1_800_000_000_000_000_000  # ns: a float would round these to 256 ns
    doc = {
        "version": "2.0", "service_kind": "openai", "endpoint": "v1/chat/completions",
        "experiments": [{"experiment": {"mode": "request_rate", "value": 4.0}, "requests": [
            # streamed: content at +100, +150 and +250 ms (two events arrived together), then usage
            request(t0, [t0 + 100_000_001, t0 + 150_000_001, t0 + 250_000_001, t0 + 260_000_001],
                    [chunk, chunk, chunk + chunk, usage]),
            # not streamed: one whole answer at +400 ms
            request(t0 + 1, [t0 + 400_000_001], ['{"choices": [{"message": {"content": "ab"}}]}']),
            request(t0 + 2, [t0 + 9], ["data: [DONE]\n\n"]),  # nothing with content: genai-perf skips it
        ]}],
    }  # fmt: skip
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(doc))
    run = read_run(path)
    lanes, level = run.lanes, run.levels.iloc[0]
    assert run.levels.attrs["version"] == "perf_analyzer 2.0" and level["rate_rps"] == 4.0
    assert lanes["ttft_ms"].tolist()[:2] == [100.000001, 400.0]
    assert lanes["e2e_ms"].tolist()[:2] == [250.000001, 400.0]
    assert lanes.loc[0, "itl_ms"] == [50.0, 100.0] and lanes.loc[0, "output_tokens"] == 3
    assert lanes.loc[0, "tpot_ms"] == pytest.approx((250.000001 - 100.000001) / 2)
    assert math.isnan(lanes.loc[1, "output_tokens"])  # no usage in that answer
    assert (level["lanes_ok"], level["lanes_failed"]) == (2, 1) and "no response with content" in lanes.loc[2, "error"]


def test_inference_perf_report_matches_its_own_summary():
    # demos/kubecon-na-2025/vllm/results/stage_0_lifecycle_metrics.json: successes.count 60,
    # output_len.mean 229.333 (x 60 = 13760 tokens), time_to_first_token.median 0.054611 s
    run = read_run(DATA / "inference_perf" / "stage_0_lifecycle_metrics.json")
    level = run.levels.iloc[0]
    assert run.levels.attrs["format"] == "inference-perf"
    assert level["lanes_ok"] == 60 and level["lanes_failed"] == 0
    assert level["output_tokens"] == pytest.approx(13760)
    assert level["ttft_p50_ms"] == pytest.approx(54.611, abs=0.001)
    assert level["rate_rps"] == 1.0
    # the report has no p95/p99: NaN with a reason, never zero
    assert math.isnan(level["ttft_p99_ms"])
    assert "p10/median/p90 only" in level["reason"]
    assert math.isnan(level["prefix_hit_rate"]) and "prefix_hit_rate" in level["reason"]


def test_toolkit_sweep_folder_matches_its_lane_records():
    folder = DATA / "toolkit_sweep"
    run = read_run(folder)
    assert run.levels.attrs["format"] == "toolkit-sweep"
    records = [json.loads(x) for x in (folder / "lanes.jsonl").read_text().splitlines()]
    for in_flight in (1, 2):
        mine = [r for r in records if r["in_flight"] == in_flight and r["outcome"] == "ok"]
        level = run.levels.set_index("in_flight").loc[in_flight]
        assert level["lanes_ok"] == len(mine) == 6
        assert level["output_tokens"] == sum(r["output_tokens"] for r in mine)
        assert level["ttft_p50_ms"] == pytest.approx(float(np.median([r["ttft_ms"] for r in mine])))
    assert len(run.lanes) == len(records)
    assert run.levels.attrs["conditions"]["model"].endswith(".gguf")


def _vllm_doc(**extra):
    # the layout of `vllm bench serve --save-result --save-detailed` (vllm/benchmarks/serve.py):
    # three requests, the third failed; TTFTs 0.1, 0.3, 0.2 s -> median of the two that succeeded 200 ms
    doc = {
        "backend": "openai-chat", "model_id": "m", "num_prompts": 3, "request_rate": "inf", "max_concurrency": 2,
        "duration": 2.0, "completed": 2, "failed": 1, "total_input_tokens": 30, "total_output_tokens": 9,
        "output_throughput": 4.5, "request_throughput": 1.0, "total_token_throughput": 19.5,
        "mean_ttft_ms": 200.0, "median_ttft_ms": 200.0, "p99_ttft_ms": 298.0,
        "input_lens": [10, 20, 30], "output_lens": [4, 5, 0], "ttfts": [0.1, 0.3, 0.0],
        "itls": [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2], []], "errors": ["", "", "timeout"],
    }  # fmt: skip
    doc.update(extra)
    return doc


def test_vllm_detailed_result_levels_come_from_its_requests(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(_vllm_doc()))
    run = read_run(path)
    level = run.levels.iloc[0]
    assert run.levels.attrs["version"] == "detailed"
    assert (level["lanes_ok"], level["lanes_failed"], level["output_tokens"]) == (2, 1, 9)
    assert level["ttft_p50_ms"] == pytest.approx(200.0)
    assert level["in_flight"] == 2 and math.isnan(level["rate_rps"])
    # E2E = TTFT + the gaps: 0.1 + 0.3 = 0.4 s and 0.3 + 0.8 = 1.1 s -> TPOT (E2E - TTFT) / (n - 1)
    lanes = run.lanes[run.lanes["outcome"] == "ok"]
    assert lanes["e2e_ms"].tolist() == pytest.approx([400.0, 1100.0])
    assert lanes["tpot_ms"].tolist() == pytest.approx([100.0, 200.0])
    assert run.lanes.loc[2, "error"] == "timeout"


def test_vllm_summary_only_result_keeps_unknowns_nan_with_reasons(tmp_path):
    doc = {k: v for k, v in _vllm_doc().items() if k not in ("input_lens", "output_lens", "ttfts", "itls", "errors")}
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    level = read_run(path).levels.iloc[0]
    assert level["ttft_p50_ms"] == 200.0 and level["ttft_p99_ms"] == 298.0
    assert math.isnan(level["ttft_p95_ms"]) and "ttft_p95_ms" in level["reason"]
    assert level["dec_tok_s"] == 4.5


def test_guidellm_report_one_level_per_benchmark_json_and_yaml(tmp_path):
    yaml = pytest.importorskip("yaml")

    def bench(streams, ttft_median, out_total):
        dist = {"successful": {"median": ttft_median, "percentiles": {"p95": 2 * ttft_median, "p99": 3 * ttft_median}}}
        return {
            "type_": "generative_benchmark",
            "config": {"strategy": {"type_": "concurrent", "streams": streams}},
            "scheduler_state": {"start_requests_time": 100.0, "end_requests_time": 110.0},
            "metrics": {
                "request_totals": {"successful": 8, "errored": 0, "incomplete": 0, "total": 8},
                "time_to_first_token_ms": dist,
                "output_token_count": {"successful": {"total_sum": out_total}},
            },
        }

    doc = {
        "metadata": {"version": 2, "guidellm_version": "0.8.1"},
        "benchmarks": [bench(4, 80.0, 900), bench(1, 50.0, 700)],
    }
    for name, text in (("b.json", json.dumps(doc)), ("b.yaml", yaml.safe_dump(doc))):
        path = tmp_path / name
        path.write_text(text)
        levels = read_run(path).levels
        assert levels["in_flight"].tolist() == [1, 4], name  # sorted by concurrency
        assert levels["ttft_p50_ms"].tolist() == [50.0, 80.0]
        assert levels["dec_tok_s"].tolist() == [70.0, 90.0]  # tokens / (end - start) = /10 s
        assert levels.attrs["version"] == "report v2, guidellm 0.8.1"
        assert levels["itl_p50_ms"].isna().all()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"hello": 1}', "is not a run this toolkit reads"),
        ("just text", "is not a run this toolkit reads"),
        ('{"metadata": {"request_start_ns": 1}}\n{"x": 2}\n', "line 2 is not an AIPerf request record"),
    ],
)
def test_an_unknown_file_is_a_clear_value_error(tmp_path, content, match):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match):
        read_run(path)


def test_a_missing_path_or_an_empty_folder_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_run(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="without levels.csv"):
        read_run(tmp_path)
    with pytest.raises(ValueError, match="path must be"):
        read_run(3)


def test_a_run_read_with_its_requests_calibrates_like_a_local_sweep():
    import warnings

    from toolkit import calibrate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit's notes on a run this small
        fit = calibrate(read_run(DATA / "aiperf"), "Llama-3.1-8B", "H100 SXM", "fp16")
    # every one of the 24 answers gives a TTFT and a TPOT to fit
    assert (fit.loc[0, "n_ttft"], fit.loc[0, "n_tpot"]) == (24, 24)


@pytest.mark.parametrize("name", ["benchmarks.json", "benchmarks.yaml"])
def test_guidellm_report_matches_what_guidellm_printed(name):
    # tests/data/guidellm/console.txt, printed by `guidellm run` for this run: 12 requests
    # (request_totals), "Output Tok Per Req Mdn 32.0 p95 32.0" (12 x 32 = 384), "TTFT ms Mdn 247.9"
    run = read_run(DATA / "guidellm" / name)
    level = run.levels.iloc[0]
    assert run.levels.attrs["version"] == "report v2, guidellm 0.8.1"
    assert level["in_flight"] == 2 and len(run.lanes) == 12 and level["lanes_ok"] == 12
    assert level["output_tokens"] == 384
    assert run.levels.attrs["summary"]["benchmarks"][0]["median_ttft_ms"] == pytest.approx(247.9, abs=0.05)
    # GuideLLM's median is the higher middle order statistic of the records; the level interpolates
    # between the two middle ones, as the sweep does
    doc = json.loads((DATA / "guidellm" / "benchmarks.json").read_text())
    ttfts = [r["time_to_first_token_ms"] for r in doc["benchmarks"][0]["requests"]["successful"]]
    assert float(np.percentile(ttfts, 50, method="higher")) == pytest.approx(247.9, abs=0.05)
    assert level["ttft_p50_ms"] == pytest.approx(float(np.median(ttfts)))
    assert np.percentile(ttfts, 50, method="lower") <= level["ttft_p50_ms"] <= 247.95


def test_vllm_detailed_result_matches_what_vllm_printed():
    # tests/data/vllm/console_detailed.txt: "Successful requests: 14", "Failed requests: 2",
    # "Total generated tokens: 448", "Median TTFT (ms): 243.21", "Median TPOT (ms): 49.91",
    # "Median ITL (ms): 43.61"; the reader computes them from the per-request lists
    run = read_run(DATA / "vllm" / "result_detailed.json")
    level = run.levels.iloc[0]
    assert run.levels.attrs["format"] == "vllm-bench-serve" and run.levels.attrs["version"] == "detailed"
    assert (level["lanes_ok"], level["lanes_failed"], level["output_tokens"]) == (14, 2, 448)
    assert level["ttft_p50_ms"] == pytest.approx(243.21, abs=0.005)
    assert level["tpot_p50_ms"] == pytest.approx(49.91, abs=0.005)
    assert level["itl_p50_ms"] == pytest.approx(43.61, abs=0.005)
    assert level["in_flight"] == 2
    failed = run.lanes[run.lanes["outcome"] == "error"]
    assert len(failed) == 2 and failed["error"].str.contains("ServerDisconnectedError").all()
    assert failed["output_tokens"].isna().all()  # a failed request's zero is not a count


def test_vllm_summary_result_matches_what_vllm_printed():
    # tests/data/vllm/console_summary.txt: 13 successful, 3 failed, 416 generated tokens,
    # "Median TTFT (ms): 83.25"; E2E was not among --percentile-metrics: NaN with a reason
    level = read_run(DATA / "vllm" / "result_summary.json").levels.iloc[0]
    assert (level["lanes_ok"], level["lanes_failed"], level["output_tokens"]) == (13, 3, 416)
    assert level["ttft_p50_ms"] == pytest.approx(83.25, abs=0.005)
    assert math.isnan(level["e2e_p50_ms"]) and "e2e_p50_ms" in level["reason"]

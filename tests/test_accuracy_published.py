"""accuracy_against_published: hand-derived predictions, the split, the physical floor, the summary, the chart."""

from __future__ import annotations

import pandas as pd
import pytest

import toolkit

_ROW = {
    "id": "hand-itl",
    "family": "itl",
    "metric": "itl_ms",
    "value": 10.0,
    "statistic": "mean",
    "model": "Llama-3.1-8B",
    "weights": "fp16",
    "kv_dtype": "fp16",
    "gpu": "H100 SXM",
    "tensor_parallel": 1,
    "engine": "vllm",
    "engine_version": "",
    "input_tokens": 1,
    "output_tokens": 2,
    "load_mode": "single",
    "load_level": 1,
    "source": "test",
    "source_date": "2026-01",
    "notes": "",
    "split": "dev",
}


def _table(*changes: dict) -> pd.DataFrame:
    return pd.DataFrame([{**_ROW, **change} for change in changes])


def test_single_request_itl_is_the_weights_and_kv_over_the_bandwidth():
    # Llama-3.1-8B fp16 on an H100 SXM: 8.0303e9 params x 2 bytes; KV per layer and token
    # 2 (K, V) x 8 heads x 128 dims x 2 bytes; context 1 + 2/2 = 2 tokens read, 1 written, 32 layers;
    # 3350 GB/s at the default MBU 0.7, plus the 0.5 ms step overhead and 5 us for the one sequence.
    # Compute is far below and adds its serial share 0.3: 2 x (8.0303e9 - 2 x 128,256 x 4,096) body and
    # 2 x 128,256 x 4,096 logits FLOPs, and 4 x 32 heads x 128 x 32 layers x 2 context tokens of attention,
    # at 989.4 TFLOPS x 0.55.
    read = 8.0303e9 * 2 + 2 * 8 * 128 * 2 * 32 * 3
    flops = 2 * (8.0303e9 - 2 * 128_256 * 4_096) + 2 * 128_256 * 4_096 + 4 * 32 * 128 * 32 * 2
    expected = read / (3350e9 * 0.7) * 1e3 + 0.3 * flops / (989.4e12 * 0.55) * 1e3 + 0.505
    out = toolkit.accuracy_against_published(_table({}))
    assert out.loc[0, "predicted"] == pytest.approx(expected, rel=1e-9)
    assert out.loc[0, "signed_err"] == pytest.approx(expected / 10.0 - 1)
    assert out.loc[0, "abs_err"] == pytest.approx(abs(expected / 10.0 - 1))


def test_offline_prompts_share_a_prefill_step_but_attend_only_to_themselves():
    from toolkit._validation.published import _packed_prefill_ms, _prefill_ms_per_token

    cm = toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "fp16", backend="vllm")
    # 8,192-token steps hold 64 prompts of 128 tokens. Compute: 2 x (8.0303e9 - 128,256 x 4,096 x 2)
    # FLOPs per token for the 8,192 tokens, plus 64 prompts x 128 x 129 / 2 causal pairs x 32 layers
    # x 4 x 32 heads x 128, plus a row of logits (2 x 128,256 x 4,096) for each prompt's last token; at
    # 989.4 TFLOPS x 0.55. Memory (16.0606 GB of weights and 8,192 tokens of
    # KV written, 131,072 B each, at 3,350 GB/s x 0.7) is far below and adds its serial share 0.3; plus the
    # 0.5 ms step overhead.
    flops = 2 * (8.0303e9 - 128_256 * 4_096 * 2) * 8_192 + 64 * 128 * 129 / 2 * 32 * 4 * 32 * 128
    flops += 64 * 2 * 128_256 * 4_096
    memory_ms = (8.0303e9 * 2 + 8_192 * 131_072) / (3350e9 * 0.7) * 1e3
    expected = (flops / (989.4e12 * 0.55) * 1e3 + 0.3 * memory_ms + 0.5) / 8_192
    assert _prefill_ms_per_token(cm, 128) == pytest.approx(expected, rel=1e-9)
    # a static batch of 64 such prompts prefills in that one step
    assert _packed_prefill_ms(cm, 128, 64) == pytest.approx(expected * 8_192, rel=1e-9)
    # a 20,000-token prompt: chunks of 8,192, 8,192 and 3,616 tokens after 0, 8,192 and 16,384 of context,
    # the last one ending it
    chunks = cm.step_ms(0, 0, 8_192, 0, 0) + cm.step_ms(0, 0, 8_192, 8_192, 0) + cm.step_ms(0, 0, 3_616, 16_384, 1)
    assert _prefill_ms_per_token(cm, 20_000) == pytest.approx(chunks / 20_000, rel=1e-12)


def test_the_split_is_respected():
    table = _table({"id": "a", "split": "dev"}, {"id": "b", "split": "holdout"}, {"id": "c", "split": "dev"})
    assert list(toolkit.accuracy_against_published(table, split="dev")["id"]) == ["a", "c"]
    assert list(toolkit.accuracy_against_published(table, split="holdout")["id"]) == ["b"]
    assert len(toolkit.accuracy_against_published(table)) == 3
    with pytest.raises(ValueError, match="split"):
        toolkit.accuracy_against_published(table, split="test")


def test_a_figure_faster_than_the_hardware_is_flagged_and_left_out_of_the_summary():
    # 16 GB of weights cannot be read in 1 ms at 3.35 TB/s (the floor is ~4.8 ms)
    out = toolkit.accuracy_against_published(_table({"id": "ok"}, {"id": "fast", "value": 1.0}))
    assert list(out["below_floor"]) == [False, True]
    summary = toolkit.accuracy_summary(out).set_index("family")
    assert summary.loc["all", "rows"] == 1
    assert summary.loc["all", "below_floor"] == 1


def test_rows_outside_the_catalog_or_without_lengths_are_skipped_with_a_reason():
    out = toolkit.accuracy_against_published(
        _table({"gpu": "Imaginary GPU"}, {"load_mode": "open", "load_level": 2, "input_tokens": None})
    )
    assert out["predicted"].isna().all()
    assert "gpu" in out.loc[0, "skipped"]
    assert "lengths" in out.loc[1, "skipped"]


def test_open_loop_rows_share_one_simulation_and_kv_capacity_is_the_budget():
    out = toolkit.accuracy_against_published(
        _table(
            {"id": "t", "family": "ttft", "metric": "ttft_ms", "load_mode": "open", "load_level": 2},
            {"id": "i", "load_mode": "open", "load_level": 2, "input_tokens": 128, "output_tokens": 64},
            {"id": "k", "family": "kv_capacity", "metric": "kv_capacity_tokens", "value": 1e5},
        )
    )
    cm = toolkit.cost_model("Llama-3.1-8B", "H100 SXM", "fp16", backend="vllm")
    assert out.loc[2, "predicted"] == cm.kv_budget_tokens
    assert out.loc[0, "predicted"] >= cm.ttft_ms(1)


def test_the_chart_has_one_panel_per_family():
    out = toolkit.accuracy_against_published(_table({}, {"id": "t", "family": "ttft", "metric": "ttft_ms"}))
    spec = toolkit.published_accuracy_chart(out).to_dict()
    assert spec["facet"]["column"]["field"] == "family"


def test_a_stated_run_length_is_simulated_whole():
    # 2,048-token prompts at 1,000 requests/s swamp an 8B model on one H100 (a prefill step of one
    # prompt takes tens of ms), so request i waits for the i - 1 before it: the mean TTFT over a run of
    # N requests, all counted, is about N / 2 prefills and doubles with N
    row = {"family": "ttft", "metric": "ttft_ms", "load_mode": "open", "load_level": 1000}
    row |= {"input_tokens": 2048, "output_tokens": 2}
    out = toolkit.accuracy_against_published(_table({**row, "requests": 100}, {**row, "id": "b", "requests": 200}))
    ratio = out.loc[1, "predicted"] / out.loc[0, "predicted"]
    assert ratio == pytest.approx(2.0, rel=0.1)


def test_tensorrt_llm_admits_only_requests_whose_whole_output_fits_the_kv_cache():
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves a request's prompt and whole output at admission: 64
    # clients of 2,000 + 2,000 tokens on an A100 40GB, whose KV cache holds 43 such requests whole, leave
    # 21 queued until a running one has decoded all 2,000 tokens: their TTFT is at least 2,000 steps of
    # 43 sequences, so the mean over the 64 is at least 21/64 of that. vLLM admits on the KV in use now:
    # all 64 prompts fit (128,000 tokens), and their mean TTFT is a few prefills, under that bound
    row = {"family": "ttft", "metric": "ttft_ms", "gpu": "A100 40GB", "load_mode": "closed", "load_level": 64}
    row |= {"input_tokens": 2000, "output_tokens": 2000, "requests": 64}
    out = toolkit.accuracy_against_published(_table({**row, "engine": "trtllm"}, {**row, "id": "v"}))
    cm = toolkit.cost_model("Llama-3.1-8B", "A100 40GB", "fp16", backend="trtllm")
    whole = cm.kv_budget_tokens // 4000
    assert whole == 43
    bound_ms = (64 - whole) / 64 * 2000 * float(cm.step_ms(whole, whole * 2000))
    assert out.loc[0, "predicted"] >= bound_ms
    assert out.loc[1, "predicted"] < bound_ms

"""Catalogs: contents, loose name matching, user specs, and errors that name the argument."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import toolkit
from toolkit._model.resolve import resolve_backend, resolve_gpu, resolve_kv_dtype, resolve_model, resolve_quant

REQUIRED_GPUS = [
    "T4",
    "L4",
    "A10G",
    "L40S",
    "A100 40GB",
    "A100 80GB",
    "H100 SXM",
    "H100 PCIe",
    "H200",
    "B200",
    "RTX 3090",
    "RTX 4090",
    "RTX PRO 6000 Blackwell",
    "MI300X",
]
REQUIRED_MODELS = [
    "Llama-2-7B",
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Llama-3.2-1B",
    "Llama-3.2-3B",
    "Qwen2.5-7B",
    "Qwen2.5-14B",
    "Qwen2.5-32B",
    "Mistral-7B",
    "Gemma-3-270M",
    "Mixtral-8x7B",
    "Llama-2-70B",
]
REQUIRED_QUANTS = ["fp16", "bf16", "fp8", "int8", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "int4", "awq"]


def test_required_entries_present():
    assert set(REQUIRED_GPUS) <= set(toolkit.gpus()["name"])
    assert set(REQUIRED_MODELS) <= set(toolkit.models()["name"])
    assert set(REQUIRED_QUANTS) <= set(toolkit.quantizations()["name"])
    assert {"fp16", "fp8", "q8", "q4"} <= set(toolkit.kv_dtypes()["name"])
    assert {"vllm", "sglang", "tgi", "llamacpp", "ollama"} <= set(toolkit.backends()["name"])


def test_gpu_capacity_is_the_binary_size_in_decimal_gb():
    # an "80 GB" H100 holds 80 GiB = 80 * 2**30 bytes = 85.899 GB; a "24 GB" RTX 4090 24 GiB = 25.770 GB
    assert resolve_gpu("H100 SXM")["memory_gb"] == pytest.approx(80 * 2**30 / 1e9, abs=0.01)
    assert resolve_gpu("RTX 4090")["memory_gb"] == pytest.approx(24 * 2**30 / 1e9, abs=0.01)


def test_gpus_without_fp8_have_blank_fp8():
    table = toolkit.gpus().set_index("name")
    for name in ["T4", "A10G", "A100 40GB", "A100 80GB", "RTX 3090"]:
        assert math.isnan(table.loc[name, "fp8_tflops"])
    # where FP8 exists its dense rate is twice the FP16 one on every listed chip
    has = table["fp8_tflops"].notna()
    ratio = table.loc[has, "fp8_tflops"] / table.loc[has, "fp16_tflops"]
    assert ratio.between(1.95, 2.05).all()


def _params_from_architecture(row: pd.Series) -> tuple[float, float]:
    """Parameter count from the architecture alone (norms and biases neglected), total and active."""
    h, hd = row["hidden_size"], row["head_dim"]
    attention = h * row["attention_heads"] * hd * 2 + h * row["kv_heads"] * hd * 2  # q, o ; k, v
    mlp = 3 * h * row["intermediate_size"]  # gate, up, down
    experts = max(row["experts"], 1)
    router = h * row["experts"]
    embed = row["vocab_size"] * h * (1 if row["tied_embeddings"] else 2)
    total = row["layers"] * (attention + experts * mlp + router) + embed
    active = row["layers"] * (attention + max(row["experts_per_token"], 1) * mlp + router) + embed
    return total / 1e9, active / 1e9


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_catalog_parameter_counts_match_the_architecture(name):
    row = toolkit.models().set_index("name").loc[name]
    total, active = _params_from_architecture(row)
    # norms and QKV biases are < 0.1% of any of these models
    assert row["params_b"] == pytest.approx(total, rel=0.005)
    assert row["active_params_b"] == pytest.approx(active, rel=0.005)


def test_mixtral_is_moe_with_fewer_active_parameters():
    spec = resolve_model("mixtral-8x7b")
    assert spec["experts"] == 8 and spec["experts_per_token"] == 2
    assert spec["active_params_b"] < spec["params_b"] / 3


def test_sliding_window_layouts():
    gemma = resolve_model("gemma-3-270m")
    assert (gemma["sliding_window"], gemma["sliding_window_layers"], gemma["layers"]) == (512, 15, 18)
    mistral = resolve_model("mistral-7b")
    assert (mistral["sliding_window"], mistral["sliding_window_layers"]) == (4096, 32)
    assert resolve_model("qwen2.5-7b")["sliding_window_layers"] == 0


@pytest.mark.parametrize(
    "query, expected",
    [
        ("H100 SXM", "H100 SXM"),
        ("h100-sxm", "H100 SXM"),
        ("h100_sxm", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("rtx4090", "RTX 4090"),
        ("4090", "RTX 4090"),
        ("a100 80gb", "A100 80GB"),
        ("mi300x", "MI300X"),
    ],
)
def test_gpu_names_match_loosely(query, expected):
    assert resolve_gpu(query)["name"] == expected


@pytest.mark.parametrize(
    "query", ["llama-3.1-8b", "Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "llama3.1-8b", "LLAMA_3_1_8B"]
)
def test_model_names_and_hf_ids_match(query):
    assert resolve_model(query)["name"] == "Llama-3.1-8B"


def test_quant_and_kv_and_backend_names():
    assert resolve_quant("Q4_K_M")["bits_per_weight"] == pytest.approx(4.89)
    assert resolve_quant("q8-0")["bits_per_weight"] == 8.5  # 34 bytes per 32 weights
    assert resolve_quant("Q6_K")["bits_per_weight"] == 210 * 8 / 256
    assert resolve_kv_dtype("FP8")["bits_per_element"] == 8
    assert resolve_backend("llama.cpp")["name"] == "llamacpp"
    assert resolve_backend("vLLM")["max_batch"] == 256


def test_ambiguous_name_raises_listing_candidates():
    with pytest.raises(ValueError, match="gpu 'H100' is ambiguous.*H100 SXM.*H100 PCIe"):
        resolve_gpu("H100")
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_model("llama-3.2")


@pytest.mark.parametrize(
    "resolver, argument, name, near",
    [
        (resolve_gpu, "gpu", "H900", "H200"),
        (resolve_model, "model", "llama-3.9-8b", "Llama-3.1-8B"),
        (resolve_quant, "quant", "q4_k_z", "q4_k_m"),
        (resolve_kv_dtype, "kv_dtype", "fp9", "fp8"),
        (resolve_backend, "backend", "vlm", "vllm"),
    ],
)
def test_unknown_names_raise_naming_the_argument_and_nearest(resolver, argument, name, near):
    with pytest.raises(ValueError, match=f"unknown {argument} '{name}'; nearest: .*'{near}'"):
        resolver(name)


def test_an_unknown_name_like_none_lists_every_known_one():
    # nothing within difflib's 0.4 similarity of "zzzz": the message says "known", not "nearest", and
    # names each of the catalog's GPUs
    with pytest.raises(ValueError, match="unknown gpu 'zzzz'; known: ") as caught:
        resolve_gpu("zzzz")
    assert all(repr(name) in str(caught.value) for name in toolkit.gpus()["name"])


def test_spec_dict_series_and_one_row_frame():
    spec = {"name": "my card", "memory_gb": 12.0, "bandwidth_gb_s": 500.0, "fp16_tflops": 60.0}
    for form in (spec, pd.Series(spec), pd.DataFrame([spec])):
        got = resolve_gpu(form)
        assert got["memory_gb"] == 12.0 and math.isnan(got["fp8_tflops"])
    row = toolkit.models().query("name == 'Qwen2.5-7B'")
    assert resolve_model(row) == resolve_model("qwen2.5-7b")
    assert resolve_model(row.iloc[0])["kv_heads"] == 4


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"name": "x", "memory_gb": 12, "bandwidth_gb_s": 0, "fp16_tflops": 60}, "bandwidth_gb_s"),
        ({"name": "x", "memory_gb": -1, "bandwidth_gb_s": 500, "fp16_tflops": 60}, "memory_gb"),
        ({"name": "x", "memory_gb": 12, "bandwidth_gb_s": float("nan"), "fp16_tflops": 60}, "bandwidth_gb_s"),
        ({"name": "x", "memory_gb": 12, "bandwidth_gb_s": 500}, "fp16_tflops"),
    ],
)
def test_bad_gpu_spec_names_the_field(bad, field):
    with pytest.raises(ValueError, match=f"gpu.*{field}"):
        resolve_gpu(bad)


def test_bad_model_spec_names_the_field():
    good = resolve_model("Llama-3.1-8B")
    with pytest.raises(ValueError, match="kv_heads"):
        resolve_model({**good, "kv_heads": 0})
    with pytest.raises(ValueError, match="kv_heads"):
        resolve_model({**good, "kv_heads": 5})  # does not divide 32 attention heads
    with pytest.raises(ValueError, match="active_params_b"):
        resolve_model({**good, "active_params_b": 9.0})
    with pytest.raises(ValueError, match="model"):
        resolve_model(42)
    with pytest.raises(ValueError, match="one row"):
        resolve_model(toolkit.models())


def test_every_row_cites_a_source():
    for table in (toolkit.gpus(), toolkit.models(), toolkit.quantizations(), toolkit.kv_dtypes(), toolkit.backends()):
        assert table["source"].str.len().gt(10).all()

"""model_from_hf_config: published config.json files against the catalog rows and the model cards.

The config fields below are copied from each model's published ``config.json`` on the Hugging Face
Hub (the fields the architecture needs; tokenizer ids, dtypes and rope settings left out). The
catalog rows were written independently, from the model cards' parameter counts.
"""

from __future__ import annotations

import json
import math

import pytest

import toolkit
from toolkit._model.resolve import resolve_model

LLAMA = {"model_type": "llama", "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
QWEN25 = {"model_type": "qwen2", "tie_word_embeddings": False, "use_sliding_window": False}
QWEN3 = {"model_type": "qwen3", "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None}

# catalog name -> its published config.json (the fields read)
CONFIGS = {
    "Llama-2-7B": {
        **LLAMA,
        "_name_or_path": "meta-llama/Llama-2-7b-hf",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    "Llama-2-70B": {
        **LLAMA,
        "_name_or_path": "meta-llama/Llama-2-70b-hf",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    "Llama-3.1-8B": {
        **LLAMA,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "Llama-3.1-70B": {
        **LLAMA,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "Llama-3.2-1B": {
        **LLAMA,
        "tie_word_embeddings": True,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "Llama-3.2-3B": {
        **LLAMA,
        "tie_word_embeddings": True,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    },
    "Qwen2.5-7B": {
        **QWEN25,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "sliding_window": 131072,
        "max_window_layers": 28,
    },
    "Qwen2.5-14B": {
        **QWEN25,
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "sliding_window": 131072,
        "max_window_layers": 48,
    },
    "Qwen2.5-32B": {
        **QWEN25,
        "hidden_size": 5120,
        "intermediate_size": 27648,
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "max_position_embeddings": 131072,
        "sliding_window": 131072,
        "max_window_layers": 64,
    },
    "Qwen3-14B": {
        **QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "max_window_layers": 40,
    },
    "Qwen3-32B": {
        **QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "max_window_layers": 64,
    },
    "Mistral-7B": {
        "model_type": "mistral",
        "tie_word_embeddings": False,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "sliding_window": 4096,
    },
    "Gemma-3-270M": {
        "model_type": "gemma3_text",
        "_sliding_window_pattern": 6,
        "attention_bias": False,
        "head_dim": 256,
        "hidden_size": 640,
        "intermediate_size": 2048,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
        "max_position_embeddings": 32768,
        "num_attention_heads": 4,
        "num_hidden_layers": 18,
        "num_key_value_heads": 1,
        "query_pre_attn_scalar": 256,
        "sliding_window": 512,
        "vocab_size": 262144,
    },
    "Mixtral-8x7B": {
        "model_type": "mixtral",
        "tie_word_embeddings": False,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "sliding_window": None,
    },
}

COMPARED = ["params_b", "active_params_b", "layers", "hidden_size", "attention_heads", "kv_heads", "head_dim"]
COMPARED += ["intermediate_size", "vocab_size", "tied_embeddings", "sliding_window_layers", "experts"]
COMPARED += ["experts_per_token", "max_context", "sliding_window"]


def test_every_catalog_model_has_its_config_here():
    assert set(CONFIGS) == set(toolkit.models()["name"])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_published_config_gives_the_catalog_row(name):
    derived = toolkit.model_from_hf_config(CONFIGS[name], name=name)
    row = resolve_model(name)
    for field in COMPARED:
        want, got = row[field], derived[field]
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got), field
        elif field.endswith("params_b"):
            assert got == pytest.approx(want, rel=0.005), field
        else:
            assert got == want, field


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_derived_spec_costs_what_the_catalog_name_costs(name):
    derived = toolkit.model_from_hf_config(CONFIGS[name], name=name)
    tp = 2 if name in ("Llama-3.1-70B", "Mixtral-8x7B") else 1
    by_spec = toolkit.cost_model(derived, "H200", "bf16", tensor_parallel=tp)
    by_name = toolkit.cost_model(name, "H200", "bf16", tensor_parallel=tp)
    for args in [(1, 512), (16, 16 * 2048, 512, 0), (64, 64 * 1024)]:
        # the catalog rounds params_b to 1e5 parameters; nothing else may differ
        assert by_spec.step_ms(*args) == pytest.approx(by_name.step_ms(*args), rel=1e-4)
    assert by_spec.max_concurrent_seqs(4096) == pytest.approx(by_name.max_concurrent_seqs(4096), rel=1e-3)


def _count(config: dict, field: str = "params_b") -> int:
    return round(toolkit.model_from_hf_config(config, name="x")[field] * 1e9)


@pytest.mark.parametrize(
    ("name", "params", "active"),
    [
        ("Llama-2-7B", 6_738_415_616, None),
        ("Llama-2-70B", 68_976_648_192, None),
        ("Llama-3.1-8B", 8_030_261_248, None),
        ("Qwen2.5-7B", 7_615_616_512, None),  # with Qwen2's q/k/v biases
        ("Gemma-3-270M", 268_098_176, None),  # with q/k norms and four norms a layer
        ("Mixtral-8x7B", 46_702_792_704, 12_879_925_248),
    ],
)
def test_exact_counts_quoted_in_the_catalog_sources(name, params, active):
    # the catalog's sources quote the safetensors totals; the architecture reproduces them exactly
    assert _count(CONFIGS[name]) == params
    assert _count(CONFIGS[name], "active_params_b") == (active or params)


# Qwen/Qwen1.5-MoE-A2.7B config.json: 60 routed experts (4 per token) of width 1408 and a shared
# expert of width 5632 in every layer; the model card: "14.3B parameters in total and 2.7B activated"
QWEN_MOE = {
    "model_type": "qwen2_moe",
    "decoder_sparse_step": 1,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "max_window_layers": 21,
    "moe_intermediate_size": 1408,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# deepseek-ai/deepseek-moe-16b-base config.json: DeepSeekMoE, 64 routed experts (6 per token) and 2
# shared ones of width 1408, the first layer dense (width 10944); the model card: 16.4B total, 2.8B
# activated
DEEPSEEK_MOE = {
    "model_type": "deepseek",
    "first_k_dense_replace": 1,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "max_position_embeddings": 4096,
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "tie_word_embeddings": False,
    "vocab_size": 102400,
}


def test_moe_with_a_shared_expert_matches_its_model_card():
    spec = toolkit.model_from_hf_config(QWEN_MOE, name="Qwen1.5-MoE-A2.7B")
    # the card's figures are rounded to 0.1B: 14,315,784,192 and 2,689,173,504 counted here
    assert (round(spec["params_b"], 1), round(spec["active_params_b"], 1)) == (14.3, 2.7)
    assert (spec["experts"], spec["experts_per_token"], spec["intermediate_size"]) == (60, 4, 1408)
    assert math.isnan(spec["sliding_window"]) and spec["sliding_window_layers"] == 0
    # the shared expert is shared weight: all but the 60 routed experts are read every step
    cost = toolkit.cost_model(spec, "H100 SXM", "bf16")
    routed = 60 * 3 * 2048 * 1408 * 24 * 2
    assert cost.shared_weights_bytes == pytest.approx(spec["params_b"] * 2e9 - routed)


def test_deepseek_moe_counts_its_dense_first_layer_and_shared_experts():
    spec = toolkit.model_from_hf_config(DEEPSEEK_MOE, name="deepseek-moe-16b")
    # the card's figures are rounded to 0.1B: 16,375,728,128 and 2,828,650,496 counted here
    assert (round(spec["params_b"], 1), round(spec["active_params_b"], 1)) == (16.4, 2.8)
    # 27 of 28 layers are MoE: the width is scaled so experts x width x layers is the routed weight
    assert spec["intermediate_size"] == round(1408 * 27 / 28)
    cost = toolkit.cost_model(spec, "H100 SXM", "bf16")
    assert cost.expert_bytes * 64 == pytest.approx(64 * 3 * 2048 * 1408 * 27 * 2, rel=1e-3)


# google/gemma-3-4b-it config.json (multimodal): the language model is in text_config, which leaves
# heads, head_dim, vocabulary and the 5:1 local pattern at Gemma3TextConfig's defaults. The Gemma 3
# technical report (table 1): 3,209M non-embedding parameters beside a 417M vision encoder.
GEMMA3_4B = {
    "model_type": "gemma3",
    "_name_or_path": "google/gemma-3-4b-it",
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27},
}


def test_a_multimodal_config_is_read_through_its_text_config():
    spec = toolkit.model_from_hf_config(GEMMA3_4B)
    assert spec["name"] == "gemma-3-4b-it" and spec["hf_id"] == "google/gemma-3-4b-it"
    assert (spec["attention_heads"], spec["kv_heads"], spec["head_dim"], spec["vocab_size"]) == (8, 4, 256, 262208)
    assert (spec["sliding_window"], spec["sliding_window_layers"]) == (1024, 34 - 5)  # layers 6, 12 ... global
    assert spec["tied_embeddings"] and spec["max_context"] == 131072
    non_embedding = spec["params_b"] - 262208 * 2560 / 1e9
    assert non_embedding == pytest.approx(3.209, rel=0.005)


def test_sliding_window_rules():
    qwen = {**CONFIGS["Qwen2.5-7B"], "use_sliding_window": True, "max_window_layers": 20}
    assert toolkit.model_from_hf_config(qwen, name="q")["sliding_window_layers"] == 8  # layers 20 ... 27
    mistral = {**CONFIGS["Mistral-7B"], "sliding_window": None}  # Mistral-7B-v0.2 and later
    assert toolkit.model_from_hf_config(mistral, name="m")["sliding_window_layers"] == 0
    mixtral = {**CONFIGS["Mixtral-8x7B"], "sliding_window": 4096}
    assert toolkit.model_from_hf_config(mixtral, name="m")["sliding_window_layers"] == 32
    gemma = {k: v for k, v in CONFIGS["Gemma-3-270M"].items() if k != "layer_types"}
    assert toolkit.model_from_hf_config(gemma, name="g")["sliding_window_layers"] == 15  # from the pattern
    gemma["_sliding_window_pattern"] = 3
    assert toolkit.model_from_hf_config(gemma, name="g")["sliding_window_layers"] == 12  # layers 2, 5 ... global


def test_gemma2_alternates_local_and_global_layers():
    # google/gemma-2-2b config.json; the model card: 2.6B parameters
    config = {
        "model_type": "gemma2",
        "head_dim": 256,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "max_position_embeddings": 8192,
        "num_attention_heads": 8,
        "num_hidden_layers": 26,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "vocab_size": 256000,
    }
    spec = toolkit.model_from_hf_config(config, name="gemma-2-2b")
    assert (spec["sliding_window"], spec["sliding_window_layers"], spec["tied_embeddings"]) == (4096, 13, True)
    assert round(spec["params_b"], 1) == 2.6


def test_biases_where_the_family_or_config_has_them():
    base = CONFIGS["Llama-3.2-1B"]
    biased = _count({**base, "attention_bias": True}) - _count(base)
    assert biased == 16 * (2048 + 2 * 512 + 2048)  # q, k, v and o biases in 16 layers
    # Qwen2 hard-wires q/k/v biases (no config field): 28 layers x (3584 + 2 x 512)
    assert _count(CONFIGS["Qwen2.5-7B"]) - _count({**CONFIGS["Qwen2.5-7B"], "model_type": "llama"}) == 28 * 4608
    mlp = _count({**base, "mlp_bias": True}) - _count(base)
    assert mlp == 16 * (2 * 8192 + 2048)


def test_a_path_to_the_file_or_its_directory(tmp_path):
    folder = tmp_path / "Mistral-7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS["Mistral-7B"]))
    by_dir = toolkit.model_from_hf_config(folder)
    by_file = toolkit.model_from_hf_config(str(folder / "config.json"), name="mine")
    assert by_dir["name"] == "Mistral-7B-v0.1" and by_file["name"] == "mine"
    assert by_dir["params_b"] == by_file["params_b"]
    plans = toolkit.plan(arrival_rate=1, prompt_tokens=256, output_tokens=64, models=by_dir, gpus="H100 SXM")
    assert len(plans) and set(plans["model"]) == {"Mistral-7B-v0.1"}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hidden_size": None}, "missing the field 'hidden_size'"),
        ({"num_hidden_layers": 0}, r"'num_hidden_layers' must be an integer \(>= 1 and <= 10000\)"),
        ({"num_key_value_heads": 5}, "'num_key_value_heads' must divide"),
        ({"vocab_size": 1.5}, "'vocab_size' must be an integer"),
        ({"model_type": "deepseek_v2"}, "'model_type' must be one of"),
        ({"layer_types": ["full_attention"]}, "'layer_types' must list the 32 layers"),
    ],
)
def test_bad_configs_name_the_field(change, words):
    config = {k: v for k, v in {**CONFIGS["Mistral-7B"], **change}.items() if v is not None}
    with pytest.raises(ValueError, match=words):
        toolkit.model_from_hf_config(config, name="m")


def test_bad_moe_configs_and_inputs_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="'num_experts_per_tok' must be in"):
        toolkit.model_from_hf_config({**QWEN_MOE, "num_experts_per_tok": 61}, name="q")
    with pytest.raises(ValueError, match="missing the field 'num_local_experts'"):
        toolkit.model_from_hf_config({**CONFIGS["Mixtral-8x7B"], "num_local_experts": None}, name="m")
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        toolkit.model_from_hf_config(CONFIGS["Mistral-7B"], name=" ")
    with pytest.raises(ValueError, match="name is required"):
        toolkit.model_from_hf_config(CONFIGS["Mistral-7B"])
    with pytest.raises(ValueError, match="path_or_dict"):
        toolkit.model_from_hf_config(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        toolkit.model_from_hf_config(tmp_path, name="x")

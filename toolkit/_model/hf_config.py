"""A model spec from a Hugging Face ``config.json``: the architecture fields and the parameter counts.

Parameters are counted from the architecture, as the model's PyTorch modules hold them: the token
embeddings (and an untied output head), per layer the attention projections q, k, v, o (plus their
biases where the family or ``attention_bias`` has them), the MLP's gate, up and down projections (an
MoE layer: every routed expert, the router, the shared expert and its gate), the norms, and the final
norm. Active parameters count the ``experts_per_token`` routed experts an MoE token uses, and all the
rest. The families differ only in what the config leaves implicit, taken from the transformers config
classes and modelling code: Qwen2 hard-wires q/k/v biases, Qwen3 and Gemma 3 add per-head q/k norms,
Gemma 2 and 3 put four norms in a layer, Gemma ties its embeddings by default, and where sliding-window
layers sit (Mistral, Mixtral: all, when ``sliding_window`` is set; Qwen2/3: only with ``use_sliding_window``,
the layers from ``max_window_layers`` on, as transformers' code has it, though its docstring says the
reverse; Gemma 2: every other; Gemma 3: all but every ``sliding_window_pattern``-th; an explicit
``layer_types`` list wins). A multimodal config is read through its ``text_config``; its vision tower
is not counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit._args import check_int
from toolkit._files import read_user_text
from toolkit._model.resolve import resolve_model

__all__ = ["model_from_hf_config"]

# A config.json is a few kilobytes; a larger file is not one.
MAX_CONFIG_BYTES = 16 * 2**20
# Upper bounds of the size fields, far above any published model (the largest have under 200
# layers, hidden sizes under 32k, vocabularies under 300k, a few hundred experts and contexts of
# 10M tokens): a larger value is a broken config, and the count of layers sizes lists.
_LAYERS, _COUNT, _WIDTH = 10_000, 2**16, 2**22
_BOUNDS = {
    **dict.fromkeys(
        ("num_hidden_layers", "decoder_sparse_step", "moe_layer_freq", "max_window_layers", "sliding_window_pattern"),
        _LAYERS,
    ),
    **dict.fromkeys(("num_attention_heads", "num_key_value_heads", "head_dim", "num_experts_per_tok"), _COUNT),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), _COUNT),
    **dict.fromkeys(("intermediate_size", "moe_intermediate_size"), _WIDTH),
    **{"hidden_size": 2**20, "vocab_size": 2**24, "max_position_embeddings": 2**30, "sliding_window": 2**30},
}
_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")

_QWEN = {"tie_word_embeddings": False, "use_sliding_window": False, "max_window_layers": 28}

# model_type -> (hidden-sized norms per layer, per-head q/k norms, hard-wired q/k/v biases, the
# transformers config class's defaults for the fields read here that published configs leave out)
_FAMILIES: dict[str, tuple[int, bool, bool, dict[str, Any]]] = {
    "llama": (2, False, False, {"tie_word_embeddings": False}),
    "mistral": (2, False, False, {"tie_word_embeddings": False, "sliding_window": 4096}),
    "mixtral": (2, False, False, {"tie_word_embeddings": False}),
    "qwen2": (2, False, True, _QWEN),
    "qwen2_moe": (2, False, True, _QWEN),
    "qwen3": (2, True, False, _QWEN),
    "qwen3_moe": (2, True, False, _QWEN),
    "deepseek": (2, False, False, {"tie_word_embeddings": False}),
    "gemma": (2, False, False, {"tie_word_embeddings": True}),
    "gemma2": (4, False, False, {"tie_word_embeddings": True, "sliding_window": 4096}),
    "gemma3_text": (
        4,
        True,
        False,
        {
            "tie_word_embeddings": True,
            "vocab_size": 262_208,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "max_position_embeddings": 131_072,
            "sliding_window": 4096,
        },
    ),
}


def model_from_hf_config(path_or_dict: str | Path | Mapping[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """Turn a Hugging Face ``config.json`` into a model spec accepted wherever a model name is.

    Parameters
    ----------
    path_or_dict : str, pathlib.Path or mapping
        The ``config.json`` file, a directory holding one, or its parsed contents. A multimodal
        config (e.g. Gemma 3 4B and up) is read through its ``text_config``. Supported
        ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek
        (DeepSeekMoE, without latent attention), gemma, gemma2, gemma3 / gemma3_text.
    name : str, optional
        The spec's ``name``; by default the last part of the config's ``_name_or_path``, else the
        directory holding the file.

    Returns
    -------
    dict
        One row with the columns of :func:`models`: ``params_b`` and ``active_params_b`` (billions,
        counted from the architecture, see the module notes), ``layers``, ``hidden_size``,
        ``attention_heads``, ``kv_heads``, ``head_dim`` (``head_dim`` or hidden / heads),
        ``intermediate_size`` (MLP width; for an MoE the routed expert's, scaled by the share of
        layers that are MoE so experts x width x layers counts the routed weights), ``vocab_size``,
        ``tied_embeddings``, ``max_context`` (``max_position_embeddings``, NaN when absent),
        ``sliding_window`` (tokens, NaN when no layer uses one), ``sliding_window_layers``,
        ``experts`` and ``experts_per_token`` (0 for a dense model), ``hf_id`` and ``source``.
        Pass it as ``model=`` to :func:`cost_model`, :func:`memory`, :func:`plan` and the rest.

    Raises
    ------
    ValueError
        If the file is not a regular file of at most 16 MiB holding a JSON object, ``model_type``
        is not supported, or a field the architecture needs is missing, of the wrong type or out of
        range (the message names the field; every size field has an upper bound, e.g. at most 10,000
        layers; a boolean may be true, false or those words as strings). A message about a file
        starts with its path.
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError(f"name must be a non-empty string or None, got {name!r}")
    raw, where = _load(path_or_dict)
    try:
        return _spec(raw, where, name)
    except ValueError as exc:
        if isinstance(path_or_dict, Mapping):
            raise
        raise ValueError(f"{where}: {exc}") from None


def _spec(raw: Mapping[str, Any], where: str, name: str | None) -> dict[str, Any]:
    """The model spec of the parsed config ``raw`` read from ``where``."""
    config = raw.get("text_config") or raw
    if not isinstance(config, Mapping):
        raise ValueError(f"config 'text_config' must be a JSON object, got {config!r}")
    model_type = config.get("model_type", raw.get("model_type"))
    if not isinstance(model_type, str):
        model_type = repr(model_type)  # unhashable JSON (a list, an object) is refused by name below
    if model_type == "gemma3":
        model_type = "gemma3_text"
    if model_type not in _FAMILIES:
        supported = ", ".join(sorted(_FAMILIES))
        raise ValueError(f"config 'model_type' must be one of {supported}, got {model_type!r}")
    norms, qk_norm, qkv_bias, defaults = _FAMILIES[model_type]
    # a null field takes the class default, as in transformers, except a null window: no window
    cfg = {**defaults, **{k: v for k, v in config.items() if v is not None or k == "sliding_window"}}
    cfg.update({flag: _flag(cfg, flag) for flag in _FLAGS if flag in cfg})

    hidden = _field(cfg, "hidden_size")
    layers = _field(cfg, "num_hidden_layers")
    heads = _field(cfg, "num_attention_heads")
    kv_heads = _field(cfg, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ValueError(f"config 'num_key_value_heads' must divide num_attention_heads ({heads}), got {kv_heads}")
    head_dim = _field(cfg, "head_dim", default=hidden // heads)
    vocab = _field(cfg, "vocab_size")
    tied = cfg.get("tie_word_embeddings", True)

    attention_bias = cfg.get("attention_bias", False)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    attention += (heads + 2 * kv_heads) * head_dim * (qkv_bias or attention_bias) + hidden * attention_bias
    per_layer = attention + norms * hidden + 2 * head_dim * qk_norm
    mlp_bias = cfg.get("mlp_bias", False)

    experts, top_k, expert_width, moe_layers, shared_mlp = _moe(cfg, model_type, hidden, layers)
    dense_layers = layers - len(moe_layers)
    dense_mlp = _mlp(hidden, _field(cfg, "intermediate_size"), mlp_bias) if dense_layers else 0
    expert = _mlp(hidden, expert_width, mlp_bias)
    moe_fixed = shared_mlp + hidden * experts  # shared expert(s) and router
    embeddings = vocab * hidden * (1 if tied else 2)
    common = embeddings + hidden + layers * per_layer + dense_layers * dense_mlp + len(moe_layers) * moe_fixed
    params = common + len(moe_layers) * experts * expert
    active = common + len(moe_layers) * top_k * expert

    window, window_layers = _sliding(cfg, model_type, layers)
    width = round(expert_width * len(moe_layers) / layers) if experts else _field(cfg, "intermediate_size")
    spec = {
        "name": name or _default_name(raw, where),
        "hf_id": raw.get("_name_or_path") if isinstance(raw.get("_name_or_path"), str) else None,
        "params_b": params / 1e9,
        "active_params_b": active / 1e9,
        "layers": layers,
        "hidden_size": hidden,
        "attention_heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": width,
        "vocab_size": vocab,
        "tied_embeddings": tied,
        "max_context": _field(cfg, "max_position_embeddings", default=math.nan),
        "sliding_window": window,
        "sliding_window_layers": window_layers,
        "experts": experts,
        "experts_per_token": top_k,
        "source": f"{where}; {model_type}; parameters counted from the architecture",
    }
    resolve_model(spec)  # the toolkit's own checks, so the spec is usable wherever a model is
    return spec


def _load(path_or_dict: object) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        return path_or_dict, "config.json given as a dict"
    if not isinstance(path_or_dict, (str, Path)):
        raise ValueError(f"path_or_dict must be a path or a config dict, got {path_or_dict!r}")
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    text = read_user_text("path_or_dict", path, max_bytes=MAX_CONFIG_BYTES)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"path_or_dict {str(path)!r} is not a readable config.json ({exc})") from None
    except RecursionError:
        raise ValueError(f"path_or_dict {str(path)!r} nests JSON deeper than the parser allows") from None
    if not isinstance(raw, dict):
        raise ValueError(f"path_or_dict {str(path)!r} must hold a JSON object, got {type(raw).__name__}")
    return raw, str(path)


def _default_name(raw: Mapping[str, Any], where: str) -> str:
    name_or_path = raw.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/ "):
        return name_or_path.rstrip("/").split("/")[-1]
    if where.endswith("config.json") and Path(where).parent.name:
        return Path(where).parent.name
    raise ValueError("name is required: the config has no _name_or_path and no directory to name it by")


def _field(cfg: Mapping[str, Any], field: str, *, default: Any = None) -> Any:
    value = cfg.get(field)
    if value is None:
        if default is None:
            raise ValueError(f"config is missing the field {field!r}")
        return default
    return check_int(f"config {field!r}", value, low=1, high=_BOUNDS[field])


def _flag(cfg: Mapping[str, Any], field: str) -> bool:
    """A boolean field: JSON true or false, or the string "true" or "false" in any case."""
    value = cfg[field]
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ValueError(f"config {field!r} must be true or false, got {value!r}")
    return value


def _mlp(hidden: int, width: int, bias: bool) -> int:
    """Gate, up and down projections of one gated MLP."""
    return 3 * hidden * width + (2 * width + hidden) * bias


def _moe(cfg: Mapping[str, Any], model_type: str, hidden: int, layers: int) -> tuple[int, int, int, list[int], int]:
    """(routed experts, experts per token, routed expert width, MoE layer indices, shared-expert
    parameters per MoE layer including its gate); zeros and no layers for a dense model."""
    if model_type == "mixtral":
        experts, key, width_key = _field(cfg, "num_local_experts"), "num_experts_per_tok", "intermediate_size"
        moe_layers, shared = list(range(layers)), 0
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        experts, key, width_key = _field(cfg, "num_experts"), "num_experts_per_tok", "moe_intermediate_size"
        step = _field(cfg, "decoder_sparse_step", default=1)
        dense = cfg.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
            raise ValueError(f"config 'mlp_only_layers' must list layer indices, got {dense!r}")
        dense = set(dense)
        moe_layers = [i for i in range(layers) if (i + 1) % step == 0 and i not in dense]
        shared_width = cfg.get("shared_expert_intermediate_size") or 0
        shared_width = check_int("config 'shared_expert_intermediate_size'", shared_width, low=0, high=_WIDTH)
        shared = _mlp(hidden, shared_width, False) + hidden if shared_width else 0  # and its sigmoid gate
    elif model_type == "deepseek":
        experts, key, width_key = _field(cfg, "n_routed_experts"), "num_experts_per_tok", "moe_intermediate_size"
        first = check_int("config 'first_k_dense_replace'", cfg.get("first_k_dense_replace", 0), low=0, high=_LAYERS)
        every = _field(cfg, "moe_layer_freq", default=1)
        moe_layers = [i for i in range(layers) if i >= first and i % every == 0]
        n_shared = check_int("config 'n_shared_experts'", cfg.get("n_shared_experts") or 0, low=0, high=_COUNT)
        shared = _mlp(hidden, n_shared * _field(cfg, width_key), False)
    else:
        return 0, 0, 0, [], 0
    top_k = _field(cfg, key)
    if top_k > experts:
        raise ValueError(f"config {key!r} must be in [1, {experts}] (the routed experts), got {top_k}")
    if not moe_layers:
        raise ValueError(f"config for {model_type} has no MoE layer (check decoder_sparse_step and mlp_only_layers)")
    return experts, top_k, _field(cfg, width_key), moe_layers, shared


def _sliding(cfg: Mapping[str, Any], model_type: str, layers: int) -> tuple[float, int]:
    """(window in tokens or NaN, layers using it)."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ValueError(f"config 'layer_types' must list the {layers} layers, got {types!r}")
        unknown = [t for t in types if t not in ("sliding_attention", "full_attention")]
        if unknown:
            raise ValueError(f"config 'layer_types' may hold sliding_attention and full_attention, got {unknown[0]!r}")
        count = types.count("sliding_attention")
    elif model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        first = check_int("config 'max_window_layers'", cfg["max_window_layers"], low=0, high=_LAYERS)
        count = max(layers - first, 0) if cfg["use_sliding_window"] else 0
    elif model_type == "gemma2":
        count = (layers + 1) // 2  # layers 0, 2, 4 ... are local
    elif model_type == "gemma3_text":
        pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
        pattern = check_int("config 'sliding_window_pattern'", pattern, low=1, high=_LAYERS)
        count = layers - layers // pattern  # every pattern-th layer is global
    elif model_type in ("mistral", "mixtral"):
        count = layers if cfg.get("sliding_window") is not None else 0
    else:
        count = 0
    if not count:
        return math.nan, 0
    return float(_field(cfg, "sliding_window")), count

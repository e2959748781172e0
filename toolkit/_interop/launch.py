"""A plan row as the engine's own launch command, or as a Kubernetes Deployment of its replicas.

The flags are the engines' documented ones: vLLM's ``vllm serve`` (``EngineArgs.add_cli_args`` and the
OpenAI frontend's arguments), SGLang's ``python -m sglang.launch_server`` (``ServerArgs``) and llama.cpp's
``llama-server``; the tests check every flag written against those parsers' lists (stored in
``tests/data/engine_flags``) and against the local ``llama-server --help``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from toolkit._args import check_int, check_number

__all__ = ["launch_config"]

ENGINES = ("vllm", "sglang", "llamacpp")
_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}
# int4: a GPTQ checkpoint (4-bit weights, 16-bit activations); int8: bitsandbytes (vLLM), w8a8 (SGLang)
_VLLM_QUANT = {"fp8": "fp8", "awq": "awq", "int4": "gptq", "int8": "bitsandbytes"}
_SGLANG_QUANT = {"fp8": "fp8", "awq": "awq", "int4": "gptq", "int8": "w8a8_int8"}
_KV = {  # the toolkit's KV dtype -> (vLLM, SGLang, llama.cpp --cache-type-k/v); None: not offered
    "auto": ("auto", "auto", "f16"),
    "fp16": ("auto", "auto", "f16"),
    "fp8": ("fp8", "fp8_e4m3", None),
    "q8": (None, None, "q8_0"),
    "q4": (None, None, "q4_0"),
}
_IMAGES = {
    "vllm": "vllm/vllm-openai:latest",
    "sglang": "lmsysorg/sglang:latest",
    "llamacpp": "ghcr.io/ggml-org/llama.cpp:server-cuda",
}


def launch_config(
    plan_row: Mapping[str, Any],
    *,
    engine: str | None = None,
    kubernetes: bool = False,
    kv_dtype: str = "auto",
    gpu_memory_fraction: float = 0.9,
    max_batched_tokens: int | None = None,
    context_tokens: int | None = None,
    port: int = 8000,
    model_path: str | None = None,
    image: str | None = None,
) -> str:
    """The engine's launch command for one plan row (a row of :func:`toolkit.plan`), or its Deployment.

    Parameters
    ----------
    plan_row : mapping or pandas.Series
        A plan row: ``model``, ``quant``, ``tensor_parallel`` (GPUs per replica), ``batch`` (concurrent
        sequences per replica), ``replicas``, ``gpu`` and ``backend``.
    engine : {"vllm", "sglang", "llamacpp"} or None
        The engine to write for; None takes the row's ``backend``.
    kubernetes : bool
        Return a Kubernetes Deployment (YAML) with ``replicas`` pods of ``tensor_parallel`` GPUs each,
        running the command, instead of the command line.
    kv_dtype : str
        KV-cache type: ``auto`` (the weights' type), ``fp16``, ``fp8`` (vLLM, SGLang), ``q8``, ``q4``
        (llama.cpp).
    gpu_memory_fraction : float
        Share of GPU memory the engine may take (vLLM ``--gpu-memory-utilization``, SGLang
        ``--mem-fraction-static``; llama.cpp has no such flag), 0.1 to 1.
    max_batched_tokens : int or None
        Tokens per engine step (vLLM ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``,
        llama.cpp ``--batch-size``); None leaves the engine's default.
    context_tokens : int or None
        Longest sequence (vLLM ``--max-model-len``, SGLang ``--context-length``, llama.cpp context per
        slot); None leaves vLLM and SGLang at the model's and gives llama.cpp 4096 per slot.
    port : int
        Port the server listens on (1 to 65535).
    model_path : str or None
        Weights to serve: None takes the catalog's Hugging Face id (vLLM, SGLang) or
        ``<model>-<quant>.gguf`` (llama.cpp). The catalog id is the 16-bit checkpoint: for ``fp8``,
        ``int4`` (GPTQ), ``int8`` or ``awq`` name a checkpoint in that format here.
    image : str or None
        Container image of the Deployment; None takes the engine's published image.

    Returns
    -------
    str
        One shell command line, or the Deployment's YAML text.

    Raises
    ------
    ValueError
        An engine not listed, a weight format or KV type the engine does not serve, a row missing a
        column, or an argument out of range.
    """
    row = {k: plan_row[k] for k in ("model", "quant", "tensor_parallel", "batch") if _has(plan_row, k)}
    missing = sorted({"model", "quant", "tensor_parallel", "batch"} - set(row))
    if missing:
        raise ValueError(f"plan_row lacks {', '.join(missing)} (a row of toolkit.plan() has them)")
    engine = engine or (str(plan_row["backend"]) if _has(plan_row, "backend") else None)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if kv_dtype not in _KV:
        raise ValueError(f"kv_dtype must be one of {', '.join(_KV)}, got {kv_dtype!r}")
    tp = check_int("plan_row tensor_parallel", int(row["tensor_parallel"]), low=1, high=1024)
    batch = check_int("plan_row batch", int(row["batch"]), low=1, high=1_000_000)
    fraction = check_number("gpu_memory_fraction", gpu_memory_fraction, low=0.1, high=1.0)
    port = check_int("port", port, low=1, high=65535)
    tokens = None if max_batched_tokens is None else check_int("max_batched_tokens", max_batched_tokens, low=1)
    context = None if context_tokens is None else check_int("context_tokens", context_tokens, low=16)
    quant, model = str(row["quant"]), str(row["model"])
    kv = _KV[kv_dtype][ENGINES.index(engine)]
    if kv is None:
        raise ValueError(f"kv_dtype {kv_dtype!r} is not offered by {engine}")
    weights = model_path or (_hf_id(model) if engine != "llamacpp" else f"{model}-{quant}.gguf")
    if engine == "vllm":
        args = ["vllm", "serve", weights, "--tensor-parallel-size", str(tp), "--max-num-seqs", str(batch)]
        args += _weights_flags(quant, _VLLM_QUANT, engine)
        args += ["--kv-cache-dtype", kv, "--gpu-memory-utilization", f"{fraction:g}"]
        args += ["--max-num-batched-tokens", str(tokens)] if tokens else []
        args += ["--max-model-len", str(context)] if context else []
        args += ["--host", "0.0.0.0", "--port", str(port)]
    elif engine == "sglang":
        args = ["python", "-m", "sglang.launch_server", "--model-path", weights, "--tp-size", str(tp)]
        args += ["--max-running-requests", str(batch)] + _weights_flags(quant, _SGLANG_QUANT, engine)
        args += ["--kv-cache-dtype", kv, "--mem-fraction-static", f"{fraction:g}"]
        args += ["--chunked-prefill-size", str(tokens)] if tokens else []
        args += ["--context-length", str(context)] if context else []
        args += ["--host", "0.0.0.0", "--port", str(port)]
    else:
        per_slot = context or 4096
        args = ["llama-server", "-m", weights, "--parallel", str(batch), "--ctx-size", str(per_slot * batch)]
        args += ["--n-gpu-layers", "999", "--cache-type-k", kv, "--cache-type-v", kv, "--metrics"]
        args += ["--split-mode", "row"] if tp > 1 else []
        args += ["--batch-size", str(tokens)] if tokens else []
        args += ["--host", "0.0.0.0", "--port", str(port)]
    if not kubernetes:
        return shlex.join(args)
    replicas = check_int("plan_row replicas", int(plan_row["replicas"]) if _has(plan_row, "replicas") else 1, low=1)
    return _deployment(args, engine=engine, model=model, gpu=str(plan_row.get("gpu", "")), tp=tp,
                       replicas=replicas, port=port, image=image or _IMAGES[engine])  # fmt: skip


def _has(row: Mapping[str, Any], key: str) -> bool:
    try:
        value = row[key]
    except (KeyError, IndexError):
        return False
    return value is not None and value == value  # NaN is no value


def _hf_id(model: str) -> str:
    from toolkit._model.catalog import models

    table = models()
    match = table[table["name"] == model]
    return str(match["hf_id"].iloc[0]) if len(match) and isinstance(match["hf_id"].iloc[0], str) else model


def _weights_flags(quant: str, table: dict[str, str], engine: str) -> list[str]:
    if quant in _DTYPE:
        return ["--dtype", _DTYPE[quant]]
    if quant in table:
        return ["--quantization", table[quant]]
    raise ValueError(f"weight format {quant!r} has no {engine} flag here (llama.cpp serves the GGUF formats)")


def _deployment(args: list[str], *, engine, model, gpu, tp, replicas, port, image) -> str:
    import yaml

    name = re.sub(r"[^a-z0-9-]+", "-", f"{model}-{engine}".lower()).strip("-")[:63]
    container = {
        "name": engine,
        "image": image,
        "command": args[:1],
        "args": args[1:],
        "ports": [{"containerPort": port}],
        "resources": {"limits": {"nvidia.com/gpu": tp}},
    }
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"toolkit/gpu": gpu, "toolkit/model": model}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)

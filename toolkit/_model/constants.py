"""The cost model's per-GPU constants, from the specs of a model, a GPU, a format and a KV format.

``specs`` arguments are mappings of the spec fields each function reads (``model``, ``gpu``,
``quant``, ``kv_dtype`` dicts, their values scalars or arrays of one shape): :class:`toolkit.CostModel`
passes those of one configuration, the planner arrays of one element per candidate. The formulas
that use the constants are in :mod:`toolkit._model.terms`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from toolkit._model.memory import _budget, _kv_budget_tokens, _kv_layer_bytes, efficiency_value

__all__: list[str] = []


def weight_terms(model: Mapping[str, Any], quant: Mapping[str, Any], tp: Any) -> tuple[Any, Any, Any, Any]:
    """(embedding parameters, non-embedding active parameters, weight bytes per GPU, one expert's
    bytes per GPU; 0 for a dense model).

    Raises
    ------
    ValueError
        If the active parameters do not exceed the embeddings (of any element).
    """
    embed = model["vocab_size"] * model["hidden_size"]
    body = model["active_params_b"] * 1e9 - embed * (2 - model["tied_embeddings"])
    if np.any(body <= 0):
        raise ValueError("model['active_params_b'] must exceed the embedding parameters (vocab x hidden)")
    bytes_per_weight = quant["bits_per_weight"] / 8
    weights = model["params_b"] * 1e9 * bytes_per_weight / tp
    # one expert's gate, up and down projections over all layers
    expert = 3 * model["hidden_size"] * model["intermediate_size"] * model["layers"] * bytes_per_weight / tp
    return embed, body, weights, expert * (model["experts"] > 0)


def tp_factor(nvlink_factor: Any, interconnect_gb_s: Any) -> Any:
    """MBU kept per doubling of tensor parallel: ``nvlink_factor`` on GPUs whose interconnect reaches
    ``nvlink_min_gb_s``, ``tp_mbu_factor_pcie`` (efficiency.csv) on PCIe-only cards."""
    nvlink = np.asarray(interconnect_gb_s) >= efficiency_value("nvlink_min_gb_s")
    return np.where(nvlink, nvlink_factor, efficiency_value("tp_mbu_factor_pcie"))


def allreduce_bandwidth(interconnect_gb_s: Any) -> Any:
    """Bus bandwidth (GB/s) of a tensor-parallel all-reduce: ``allreduce_bw_efficiency_nvlink`` of the
    interconnect on NVLink-class GPUs (``interconnect_gb_s`` >= ``nvlink_min_gb_s``),
    ``allreduce_bw_efficiency_pcie`` of it on PCIe-only cards (efficiency.csv)."""
    nvlink = np.asarray(interconnect_gb_s) >= efficiency_value("nvlink_min_gb_s")
    shares = efficiency_value("allreduce_bw_efficiency_nvlink"), efficiency_value("allreduce_bw_efficiency_pcie")
    return interconnect_gb_s * np.where(nvlink, *shares)


def fp16_rate(gpu: Mapping[str, Any], fp16_accumulate: Any) -> Any:
    """Dense 16-bit tensor rate (TFLOPS) of an engine's GEMMs: ``fp16_acc16_tflops`` where the engine
    accumulates in fp16 and the GPU lists that rate, else ``fp16_tflops`` (FP32 accumulate)."""
    acc16 = np.asarray(gpu["fp16_acc16_tflops"], dtype=float)
    with np.errstate(invalid="ignore"):
        faster = np.asarray(fp16_accumulate, dtype=bool) & (acc16 > 0)
    return np.where(faster, acc16, gpu["fp16_tflops"])


def cost_constants(
    specs: Mapping[str, Mapping[str, Any]],
    tp: Any,
    efficiencies: Mapping[str, float],
    *,
    gpu_memory_utilization: float,
    activation_tokens: int,
    reserved_gb: Any,
    fp16_accumulate: Any,
    kv_free_fraction: Any = np.nan,
) -> dict[str, Any]:
    """The numeric fields of :class:`CostModel` (per GPU) from validated specs and efficiencies.

    Parameters
    ----------
    specs : mapping
        ``model``, ``gpu``, ``quant`` and ``kv_dtype`` spec mappings (scalars or arrays).
    tp : int or numpy.ndarray
        Tensor-parallel degree(s), dividing the attention heads.
    efficiencies : mapping
        The validated tunable efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ...).
    gpu_memory_utilization : float
        Fraction of GPU memory the engine may use.
    activation_tokens : int
        Tokens of the largest forward pass (activation reserve).
    reserved_gb : float or numpy.ndarray
        Runtime memory outside weights, KV and activations (GB).
    fp16_accumulate : bool or numpy.ndarray
        Whether the engine's 16-bit GEMMs accumulate in fp16: they then run at the GPU's
        ``fp16_acc16_tflops`` where it has one (GeForce cards), else at ``fp16_tflops``.
    kv_free_fraction : float or numpy.ndarray
        The backend's share of the memory free after weights, runtime and activations given to its
        KV cache (TensorRT-LLM); NaN where the KV cache is what ``gpu_memory_utilization`` leaves.

    Returns
    -------
    dict
        ``mbu`` ... ``kv_block_tokens`` as in :class:`CostModel`, broadcast over the inputs.
    """
    model, gpu, quant = specs["model"], specs["gpu"], specs["quant"]
    embed, body, weights, expert = weight_terms(model, quant, tp)
    # the weight matrices (every parameter but the embeddings) of a weight-only format (GGUF blocks,
    # int4): packed bytes per GPU, and their 16-bit copy where an engine dequantizes before its GEMMs
    packed = (quant["compute"] == "fp16") & (quant["bits_per_weight"] < 16)
    matrices = (model["params_b"] * 1e9 - embed * (2 - model["tied_embeddings"])) / tp * packed
    value_bytes = efficiency_value("activation_bytes_per_value")
    budget = _budget(
        model,
        gpu,
        quant,
        specs["kv_dtype"],
        tensor_parallel=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        reserved_gb=reserved_gb,
        activation_tokens=activation_tokens,
        kv_free_fraction=kv_free_fraction,
    )
    block = int(efficiency_value("kv_block_tokens"))
    fp8 = gpu["fp8_tflops"]
    layer_bytes = _kv_layer_bytes(model, specs["kv_dtype"], tp)
    return {
        "mbu": efficiencies["mbu"] * tp_factor(efficiencies["tp_mbu_factor"], gpu["interconnect_gb_s"]) ** np.log2(tp),
        "mfu": efficiencies["mfu"],
        "step_overhead_ms": efficiencies["step_overhead_ms"],
        "request_overhead_ms": efficiencies["request_overhead_ms"],
        "allreduce_latency_us": efficiencies["allreduce_latency_us"],
        "serial_share": efficiencies["serial_share"],
        "batched_mbu_factor": efficiencies["batched_mbu_factor"],
        "seq_overhead_us": efficiencies["seq_overhead_us"],
        "attention_score_bytes": efficiencies["attention_score_bytes"],
        "dequant_gemm_tokens": efficiencies["dequant_gemm_tokens"],
        "masked_pair_share": efficiencies["masked_pair_share"],
        "logit_remainder_reads": efficiencies["logit_remainder_reads"],
        "logit_batched_reads": efficiencies["logit_batched_reads"],
        "dequant_weights_bytes": matrices * quant["bits_per_weight"] / 8,
        "dequant_copy_bytes": matrices * value_bytes,
        "bandwidth_gb_s": gpu["bandwidth_gb_s"],
        "tflops": np.where((quant["compute"] == "fp8") & (fp8 > 0), fp8, fp16_rate(gpu, fp16_accumulate)),
        "interconnect_gb_s": gpu["interconnect_gb_s"],
        "allreduce_gb_s": allreduce_bandwidth(gpu["interconnect_gb_s"]),
        "weights_bytes": weights,
        "weight_read_efficiency": quant["weight_read_efficiency"],
        "shared_weights_bytes": weights - expert * model["experts"],
        "expert_bytes": expert,
        "kv_bytes_per_token": layer_bytes * model["layers"],
        "kv_layer_bytes": layer_bytes,
        "active_params": model["active_params_b"] * 1e9,
        "body_flops_per_token": 2 * body / tp,
        "logits_flops_per_token": 2 * embed / tp,
        "output_weights_bytes": embed * quant["bits_per_weight"] / 8 / tp,
        "attention_flops_per_pair": 4 * model["attention_heads"] / tp * model["head_dim"],
        "kv_budget_bytes": budget["kv_budget"],
        "kv_budget_tokens": _kv_budget_tokens(model, budget, block),
        "kv_block_tokens": block,
    }

"""The serving model against a real GPU this project measured: one H200 running a minimal reference engine.

``toolkit/_data/gpu_reference_h200.csv`` holds engine steps of a Llama-3.1-8B-shaped model in bf16
measured on one NVIDIA H200 (``tests/benchmarks/gpu_reference_engine.py``, PyTorch, decode as one
CUDA graph): prompts prefilled alone, decode steps over batches and contexts, and decodes beside a
prompt chunk. Each is predicted here by the one cost model's ``step_ms`` for the same step.
"""

from __future__ import annotations

import pandas as pd

from toolkit._data import load_csv
from toolkit._model.serving import cost_model

__all__ = ["gpu_reference_check"]

_STEPS = ("prefill", "decode", "mixed")


def gpu_reference_check(calibration: object = None) -> pd.DataFrame:
    """Predict every engine step measured on this project's H200 and compare.

    Parameters
    ----------
    calibration : dict, Series or one-row DataFrame, optional
        Tunable efficiencies replacing the defaults (``mbu``, ``mfu``, ``serial_share``, ...), as
        :func:`toolkit.cost_model` takes them, for Llama-3.1-8B on an H200 in bf16; None: the
        defaults.

    Returns
    -------
    pandas.DataFrame
        One row per measured step: ``kind`` (``prefill``: one prompt alone; ``decode``: a decode
        step; ``mixed``: decodes beside a prompt chunk), ``decode_seqs``, ``context_tokens`` (KV
        tokens per decoding sequence), ``kv_tokens`` (their total), ``prefill_tokens``,
        ``measured_ms``, ``predicted_ms``, ``memory_ms`` and ``compute_ms`` (the model's two
        roofline terms), ``error`` (predicted / measured - 1).
    """
    cm = cost_model("Llama-3.1-8B", "H200", "bf16", calibration=calibration)
    data = load_csv("gpu_reference_h200.csv")
    steps = data[data["kind"].isin(_STEPS)].reset_index(drop=True)
    seqs = steps["decode_seqs"].astype(int)
    context = steps["context_tokens"].astype(int)
    prompt = steps["prefill_tokens"].astype(int)
    kv = seqs * context
    terms = cm.step_terms(seqs.to_numpy(), kv.to_numpy(), prompt.to_numpy(), 0)
    out = pd.DataFrame(
        {
            "kind": steps["kind"],
            "decode_seqs": seqs,
            "context_tokens": context,
            "kv_tokens": kv,
            "prefill_tokens": prompt,
            "measured_ms": steps["value"].astype(float),
            "predicted_ms": terms["step_ms"],
            "memory_ms": terms["memory_ms"],
            "compute_ms": terms["compute_ms"],
        }
    )
    out["error"] = out["predicted_ms"] / out["measured_ms"] - 1
    return out

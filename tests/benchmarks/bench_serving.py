"""Benchmark: the batching curve over the whole catalog (every GPU x model x quant, batch 1..512).

Two paths are timed: the whole-catalog path (one CostModel per combination, its ``step_terms``
broadcast over all 512 batches, one DataFrame at the end; target well under a second) and the same
through the public ``batching_curve`` (one DataFrame per combination), which must agree with it.
Writes reports/bench/serving.json and reports/bench/serving.png and prints a one-line summary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import toolkit  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "bench"
CONTEXT_TOKENS = 1024
BATCHES = np.arange(1, 513)
TARGET_S = 1.0


def whole_catalog(gpus: list[str], models: list[str], quants: list[str]) -> pd.DataFrame:
    """Every combination's curve through CostModel with numpy broadcasting over the batch."""
    combos = [(model, gpu, quant) for model in models for gpu in gpus for quant in quants]
    steps, max_seqs = [], []
    for model, gpu, quant in combos:
        cm = toolkit.cost_model(model, gpu, quant)
        steps.append(cm.step_terms(BATCHES, BATCHES * CONTEXT_TOKENS)["step_ms"])
        max_seqs.append(cm.max_concurrent_seqs(CONTEXT_TOKENS))
    step = np.concatenate(steps)
    which = np.repeat(np.arange(len(combos)), BATCHES.size)
    batch = np.tile(BATCHES, len(combos))
    # combos run model-major, then gpu, then quant: recover each name's index from the combination index
    model_code, rest = np.divmod(which, len(gpus) * len(quants))
    gpu_code, quant_code = np.divmod(rest, len(quants))
    return pd.DataFrame(
        {
            "model": pd.Categorical.from_codes(model_code, models),
            "gpu": pd.Categorical.from_codes(gpu_code, gpus),
            "quant": pd.Categorical.from_codes(quant_code, quants),
            "batch": batch,
            "step_ms": step,
            "aggregate_tok_s": batch * 1e3 / step,
            "feasible": batch <= np.asarray(max_seqs)[which],
        }
    )


def public_api(gpus: list[str], models: list[str], quants: list[str]) -> pd.DataFrame:
    frames = [
        toolkit.batching_curve(model, gpu, quant, CONTEXT_TOKENS, batch_sizes=BATCHES)
        for model in models
        for gpu in gpus
        for quant in quants
    ]
    return pd.concat(frames, ignore_index=True)


def figure(table: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    picks = table[(table["model"] == "Llama-3.1-8B") & (table["quant"] == "bf16")]
    for gpu in ["T4", "L4", "RTX 4090", "A100 80GB", "H100 SXM", "H200", "B200"]:
        curve = picks[picks["gpu"] == gpu]
        ok = curve[curve["feasible"]]
        (line,) = ax.plot(ok["batch"], ok["aggregate_tok_s"], label=gpu)
        rest = curve[~curve["feasible"]]
        ax.plot(rest["batch"], rest["aggregate_tok_s"], ls=":", color=line.get_color())
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="running sequences (batch)",
        ylabel="decode tokens/s (all sequences)",
        title=f"Llama-3.1-8B bf16 at {CONTEXT_TOKENS} context (dotted: beyond the KV budget)",
    )
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    gpus = list(toolkit.gpus()["name"])
    models = list(toolkit.models()["name"])
    quants = list(toolkit.quantizations()["name"])
    toolkit.cost_model(models[0], gpus[0], quants[0])  # load the catalogs once, outside the timing

    start = time.perf_counter()
    table = whole_catalog(gpus, models, quants)
    fast_s = time.perf_counter() - start

    start = time.perf_counter()
    reference = public_api(gpus, models, quants)
    api_s = time.perf_counter() - start
    np.testing.assert_allclose(table["step_ms"].to_numpy(), reference["step_ms"].to_numpy(), rtol=1e-12)
    assert (table["feasible"].to_numpy() == reference["feasible"].to_numpy()).all()

    OUT.mkdir(parents=True, exist_ok=True)
    combos = len(gpus) * len(models) * len(quants)
    result = {
        "combinations": combos,
        "batches_per_combination": int(BATCHES.size),
        "rows": int(len(table)),
        "context_tokens": CONTEXT_TOKENS,
        "whole_catalog_s": round(fast_s, 4),
        "batching_curve_loop_s": round(api_s, 4),
        "target_s": TARGET_S,
        "meets_target": fast_s < TARGET_S,
    }
    (OUT / "serving.json").write_text(json.dumps(result, indent=2) + "\n")
    figure(table, OUT / "serving.png")
    print(
        f"serving: {combos} GPU x model x quant curves, {len(table):,} rows in {fast_s:.3f} s via CostModel "
        f"(target < {TARGET_S:.0f} s: {'ok' if fast_s < TARGET_S else 'MISSED'}); "
        f"public batching_curve loop {api_s:.2f} s"
    )
    return 0 if fast_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())

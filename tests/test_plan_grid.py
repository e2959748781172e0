"""plan()'s array-evaluated candidate grid against the straightforward path: one CostModel per row.

The reference below builds every configuration's cost model with ``toolkit.cost_model`` (a Python loop
over model x GPU x format x TP x backend, as the planner did before it evaluated the grid as arrays),
reads its KV-bound batch cap, step table and TTFT from the CostModel's own methods, and lists every
candidate as its own evaluation unit. plan() must return the same rows with the same values.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import toolkit
from toolkit._model.efficiency import engine_efficiencies
from toolkit._planning import planner
from toolkit._planning.grid import _Grid, _thaw
from toolkit._planning.inputs import _support, quality_score

SUBSET = dict(
    models=["Llama-3.1-8B", "Mixtral-8x7B", "Gemma-3-270M", "Mistral-7B", "Llama-3.1-70B", "Llama-2-7B"],
    gpus=["T4", "L4", "H100 SXM", "H100 PCIe", "MI300X", "RTX 4090"],
)


def _reference_grid(models, gpus, quants, backends, tensor_parallel, prompt, output, cached, calib, grid_max, curve):
    """The candidate grid with one ``toolkit.cost_model`` per configuration and backend (no reuse curve: every
    candidate finds ``cached`` tokens)."""
    assert curve is None
    support = _support()
    context = prompt + output
    configs, tables, ttft, prefill, cost_hour = [], [], [], [], []
    candidates = []  # (config, backend, batch, at its cap, what caps it)
    for m in map(_thaw, models):
        if context > m["max_context"]:
            continue
        for g in map(_thaw, gpus):
            for q in map(_thaw, quants):
                for tp in tensor_parallel:
                    if m["attention_heads"] % tp or (tp > 1 and not g["interconnect_gb_s"] > 0):
                        continue
                    # one configuration per kind of step cost among the backends serving it: GEMMs
                    # accumulating in fp16 or not, and the engine's efficiency defaults
                    kind = lambda b: (b["fp16_accumulate"], sorted(engine_efficiencies(b["name"]).items()))
                    kinds = []
                    for b in map(_thaw, backends):
                        kinds += [kind(b)] if kind(b) not in kinds else []
                    for step_kind in kinds:
                        caps = []
                        for b in map(_thaw, backends):
                            formats, shards = support.get(b["name"], (frozenset(), False))
                            if q["name"] not in formats or (tp > 1 and not shards) or kind(b) != step_kind:
                                continue
                            cm = toolkit.cost_model(m, g, q, tensor_parallel=tp, calibration=dict(calib), backend=b)
                            kv_cap = cm.max_concurrent_seqs(context)
                            limit = b["max_batch"] if b["continuous_batching"] else 1
                            limit = grid_max if math.isnan(limit) else min(grid_max, int(limit))
                            if kv_cap >= 1:
                                caps.append(
                                    (b["name"], min(kv_cap, limit), "kv_memory" if kv_cap < limit else "max_batch")
                                )
                        if not caps:
                            continue
                        n = np.arange(max(cap for _, cap, _ in caps) + 1)
                        tables.append(cm.step_ms(n, n * (prompt + output / 2)))
                        ttft.append(cm.ttft_ms(prompt, cached))
                        prefill.append(ttft[-1] - cm.request_overhead_ms)
                        cost_hour.append(g["price_usd_hour"] * tp)
                        quality = quality_score(m["name"], q["name"])
                        configs.append((m["name"], g["name"], q["name"], tp, g["interconnect_gb_s"], quality))
                        for name, cap, why in caps:
                            for batch in sorted({2**i for i in range(int(math.log2(cap)) + 1)} | {cap}):
                                candidates.append((len(configs) - 1, name, batch, batch == cap, why))
    table = np.full((len(tables), max((t.size for t in tables), default=1)), np.nan)
    for i, row in enumerate(tables):
        table[i, : row.size] = row
    column = lambda i, dtype=object: np.array([c[i] for c in candidates], dtype=dtype)
    names = ("model", "gpu", "quant", "tensor_parallel", "interconnect_gb_s", "quality")
    dtypes = (object, object, object, int, float, float)
    return _Grid(
        cfg=column(0, int),
        batch=column(2, int),
        unit=np.arange(len(candidates)),
        cap_reason=column(4),
        at_cap=column(3, bool),
        backend=column(1),
        step_table=table,
        ttft_ms=np.array(ttft)[column(0, int)],
        prefill_ms=np.array(prefill)[column(0, int)],
        prefix_hit_rate=np.full(len(candidates), cached / prompt),
        gpu_cost_hour=np.array(cost_hour),
        configs={k: np.array([c[i] for c in configs], dtype=t) for i, (k, t) in enumerate(zip(names, dtypes))},
    )


def _hybrid_model() -> dict:
    """A spec outside the catalog with both sliding-window layers and routed experts."""
    spec = dict(toolkit.models().set_index("name").loc["Mixtral-8x7B"])
    return {**spec, "name": "hybrid-test", "sliding_window": 1024, "sliding_window_layers": 24}


def _bare_gpu() -> dict:
    """A GPU spec without FP8, price or interconnect (so no tensor parallel on it)."""
    return {"name": "bare-test", "memory_gb": 48.0, "bandwidth_gb_s": 900.0, "fp16_tflops": 150.0}


QUESTIONS = {
    "readme_subset": dict(arrival_rate=3, prompt_tokens=512, output_tokens=128, slo_e2e_ms=5000, **SUBSET),
    "tight_slos_calibrated": dict(
        arrival_rate=25,
        prompt_tokens=2000,
        output_tokens=300,
        slo_ttft_ms=800,
        slo_tpot_ms=60,
        percentile=0.9,
        workload="steady",
        prefix_cache_hit_rate=0.5,
        budget_usd_month=30000,
        calibration={"mbu": 0.6, "mfu": 0.4, "step_overhead_ms": 1.0, "allreduce_latency_us": 20},
        **SUBSET,
    ),
    "long_context_custom_specs": dict(
        arrival_rate=0.5,
        prompt_tokens=6000,
        output_tokens=500,
        slo_e2e_ms=60000,
        models=["Llama-3.1-8B", "Llama-2-7B", "Gemma-3-270M", _hybrid_model()],
        gpus=["L4", "H200", _bare_gpu()],
        workload="bursty",
    ),
}


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_plan_equals_the_per_configuration_cost_model_evaluation(monkeypatch, name):
    question = QUESTIONS[name]
    fast = planner.plan(**question)
    monkeypatch.setattr(planner, "_build_grid", _reference_grid)
    slow = planner.plan(**question)
    assert len(slow) > 50
    pd.testing.assert_frame_equal(fast, slow, check_exact=False, rtol=1e-9, atol=0)


def test_the_questions_cover_every_kind_of_configuration(monkeypatch):
    # so that the equality above exercises MoE, sliding windows, tensor parallel, both batch caps,
    # single-stream backends and specs outside the catalog
    grids = []
    monkeypatch.setattr(planner, "_build_grid", lambda *args: grids.append(_reference_grid(*args)) or grids[-1])
    tables = [planner.plan(**question) for question in QUESTIONS.values()]
    models = set().union(*(t["model"] for t in tables))
    assert {"Mixtral-8x7B", "Gemma-3-270M", "Mistral-7B", "hybrid-test"} <= models
    assert "bare-test" in set(tables[2]["gpu"])
    assert set(tables[0]["tensor_parallel"]) == {1, 2, 4, 8}
    assert {"ollama", "llamacpp", "vllm", "sglang", "tgi"} <= set(tables[0]["backend"])
    assert set(np.concatenate([g.cap_reason for g in grids])) == {"kv_memory", "max_batch"}

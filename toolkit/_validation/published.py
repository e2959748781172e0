"""The default serving model against published measurements (data/published_measurements.csv).

Each row is predicted from its own conditions with the default efficiencies (no calibration): those
of ``data/efficiency.csv``, then the engine's and its release's rows of ``data/engine_efficiency.csv``.

- ``single`` (one request alone): TTFT is :meth:`CostModel.ttft_ms` of the prompt; ITL/TPOT is one
  decode step at batch 1 (:meth:`CostModel.step_ms`) at the mean context ``input + output / 2``; a
  llama-bench ``decode_tok_s`` (tg N) is ``1000 /`` the mean step over contexts 0..N, and its
  ``prefill_tok_s`` (pp N) is ``N`` over the prompt's TTFT less the request overhead (llama-bench
  times the engine alone).
- ``closed`` / ``open``: :func:`toolkit.simulate` at that concurrency or request rate, the row's
  statistic (mean or median) of TTFT or TPOT, or its output tokens/s. Where the source states its
  run's ``requests``, the simulation sends that many and counts every one, as the source's client
  does (no warm-up: above capacity the queue, and so TTFT, grows with the length of the run); else
  ``SIM_REQUESTS``, the first 10% left out as warm-up. The simulated engine takes steps of the cost
  model's ``max_num_batched_tokens`` and runs at most the backend's ``max_batch`` sequences (TensorRT-
  LLM, without one: as many as a step decodes and, its default GUARANTEED_NO_EVICT admission reserving
  each request's prompt and whole output, as many as the KV cache holds whole).
- ``offline`` with the engine choosing the batch: the steady state of continuous batching at the
  batch the KV cache (and the backend's cap) holds for ``input + output`` tokens: each decode step
  of that batch at the mean context is followed by the ``batch x input / output`` prompt tokens
  that keep it full, prefilled in separate steps of ``max_num_batched_tokens``, as engines without
  chunked prefill (TensorRT-LLM's default) schedule them. A step holds as many whole prompts as fit
  (it reads the weights once, and each prompt's tokens attend only to that prompt: the step's
  memory and overhead parts for all its tokens, its compute part that many times one prompt's); a
  prompt longer than the step is prefilled in chunks, each attending to the chunks before it. With
  ``load_level`` set (static batching): one prefill of the whole batch (its prompts packed in one
  step, each attending to itself), then ``output`` steps of the batch.
- ``kv_capacity``: :attr:`CostModel.kv_budget_tokens`.

Rows without fixed input/output lengths or with a model or GPU outside the catalogs get no prediction
(``predicted`` NaN, ``skipped`` says why). ``below_floor`` flags a measurement faster than physics
allows: the same prediction with every efficiency at 1 and no overheads (a latency below it, or a
rate above it); such rows are reported, and left out of :func:`accuracy_summary`.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._data import load_csv
from toolkit._model.catalog import backends
from toolkit._model.cost import CostModel
from toolkit._model.serving import cost_model
from toolkit._model.terms import combine, step_parts
from toolkit._queueing.simulator import simulate
from toolkit._stats import quantile_ci95

__all__ = ["accuracy_against_published", "accuracy_summary"]

_CONDITIONS = [
    "model",
    "weights",
    "kv_dtype",
    "gpu",
    "tensor_parallel",
    "engine",
    "engine_version",
    "input_tokens",
    "output_tokens",
    "load_mode",
    "load_level",
    "requests",
    "statistic",
]
# the floor: every efficiency at 1, no overheads, no conversion of the weights (the all-reduce at the link's rate)
_IDEAL = dict.fromkeys(("mbu", "mfu", "tp_mbu_factor"), 1.0) | dict.fromkeys(
    ("step_overhead_ms", "request_overhead_ms", "seq_overhead_us", "dequant_gemm_tokens"), 0.0
)
_LATENCY = {"ttft_ms", "itl_ms", "tpot_ms"}
# requests simulated per closed- or open-loop row whose source does not state its own (the first 10% are warm-up)
SIM_REQUESTS = 400


def _setup(row: pd.Series) -> tuple:
    """The hashable deployment of a row: model, gpu, weights, kv_dtype, TP, engine, release (or None)."""
    version = row["engine_version"]
    return (
        row["model"],
        row["gpu"],
        row["weights"],
        row["kv_dtype"],
        int(row["tensor_parallel"]),
        row["engine"],
        None if pd.isna(version) else str(version),
    )


def _cost(setup: tuple, ideal: bool) -> CostModel:
    model, gpu, weights, kv_dtype, tp, engine, version = setup
    backend = engine if engine in set(backends()["name"]) else None
    extra = {**_IDEAL, "allreduce_latency_us": 0.0} if ideal else {}
    release = version if backend else None
    cm = cost_model(
        model, gpu, weights, tensor_parallel=tp, kv_dtype=kv_dtype, backend=backend, engine_version=release, **extra
    )
    # the floor reads at full bandwidth whatever the tensor parallel and all-reduces at the link's rate
    full = {"mbu": 1.0, "allreduce_gb_s": cm.interconnect_gb_s, "weight_read_efficiency": 1.0}
    return dataclasses.replace(cm, **full) if ideal else cm


def _single(cm: CostModel, metric: str, isl: float, osl: float) -> float:
    if metric == "ttft_ms":
        return cm.ttft_ms(int(isl))
    if metric == "prefill_tok_s":
        return isl * 1000 / (cm.ttft_ms(int(isl)) - cm.request_overhead_ms)
    if metric == "decode_tok_s":
        return 1000 / float(np.mean(cm.step_ms(1, np.arange(int(osl) + 1))))
    return cm.step_ms(1, (isl or 0) + osl / 2)  # itl_ms, tpot_ms


def _packed_prefill_ms(cm: CostModel, prompt: int, prompts: int) -> float:
    """One step prefilling ``prompts`` whole prompts of ``prompt`` tokens: the weights read once
    (memory and overhead parts of all the step's tokens) and each prompt attending only to itself
    (its compute part ``prompts`` times one prompt's)."""
    constants = vars(cm)
    memory_ms, _, overhead_ms = step_parts(constants, 0, 0, prompts * prompt, 0, prompts)
    compute_ms = step_parts(constants, 0, 0, prompt, 0)[1]
    return float(combine(constants, memory_ms, prompts * compute_ms, overhead_ms))


def _prefill_ms_per_token(cm: CostModel, prompt: int) -> float:
    """Prefill time per prompt token when prompts of ``prompt`` tokens fill steps of
    ``max_num_batched_tokens``: whole prompts packed into one step, or one prompt in chunks, each
    attending to the chunks before it, when it is longer than a step."""
    full = cm.max_num_batched_tokens
    if prompt >= full:
        starts = np.arange(0, prompt, full)
        chunks = np.minimum(full, prompt - starts)
        return float(np.sum(cm.step_ms(0, 0, chunks, starts, starts + chunks >= prompt))) / prompt
    k = full // prompt
    return _packed_prefill_ms(cm, prompt, k) / (k * prompt)


def _offline(cm: CostModel, metric: str, isl: float, osl: float, batch: float) -> float:
    if math.isnan(batch):  # the engine picks the batch: steady continuous batching
        batch = min(float(cm.max_concurrent_seqs(int(isl + osl))), cm.max_batch)
        decode_ms = cm.step_ms(batch, batch * (isl + osl / 2))
        out_tok_s = batch * 1000 / (decode_ms + batch * isl / osl * _prefill_ms_per_token(cm, int(isl)))
    else:  # static batching: the whole batch prefills, then decodes every token together
        prefill = _packed_prefill_ms(cm, int(isl), int(batch)) + cm.request_overhead_ms
        decode = np.sum(cm.step_ms(batch, batch * (isl + np.arange(int(osl)))))
        out_tok_s = batch * osl * 1000 / (prefill + decode)
    if metric == "total_tok_s":
        return out_tok_s * (isl + osl) / osl
    if metric == "output_tok_s_per_gpu":
        return out_tok_s / cm.tensor_parallel
    return out_tok_s


@lru_cache(maxsize=256)
def _simulated(setup: tuple, isl: int, osl: int, mode: str, level: float, requests: int | None) -> pd.Series:
    """Summary of one simulated run (cached: a row's TTFT, TPOT and throughput share a run) of the
    source's ``requests``, all counted, or where None of ``SIM_REQUESTS`` after a 10% warm-up."""
    cm = _cost(setup, False)
    load = {"concurrency": int(level)} if mode == "closed" else {"arrival_rate": level}
    # the engine's own limits (steps of the max_num_batched_tokens its memory was sized for, its cap on running
    # sequences, or as many as those steps decode), not simulate()'s defaults (256 and 2,048)
    budget = cm.max_num_batched_tokens
    batch = int(min(cm.max_batch, budget))
    if setup[5] == "trtllm":  # GUARANTEED_NO_EVICT (engine_scheduling.csv): prompt and whole output reserved
        batch = max(1, min(batch, int(cm.max_concurrent_seqs(isl + osl))))
    runs = {"num_requests": SIM_REQUESTS} if requests is None else {"num_requests": requests, "warmup_fraction": 0.0}
    engine = {"cost": cm, "progress": False, "max_batch": batch, "max_num_batched_tokens": budget}
    result = simulate(prompt_tokens=isl, output_tokens=osl, **runs, **load, **engine)
    return result.summary.iloc[0]


def _loaded(row: pd.Series, isl: float, osl: float) -> float:
    requests = None if pd.isna(row["requests"]) else int(row["requests"])
    summary = _simulated(_setup(row), int(isl), int(osl), row["load_mode"], float(row["load_level"]), requests)
    metric = row["metric"]
    if metric == "output_tok_s":
        return float(summary["output_tok_s"])
    stat = "p50" if row["statistic"] in ("median", "p50") else "mean"
    name = "ttft" if metric == "ttft_ms" else "tpot"
    return float(summary[f"{name}_{stat}_s"]) * 1000


def _predict(row: pd.Series, ideal: bool) -> float:
    cm = _cost(_setup(row), ideal)
    metric, mode = row["metric"], row["load_mode"]
    isl, osl = float(row["input_tokens"]), float(row["output_tokens"])
    if metric == "kv_capacity_tokens":
        return float(cm.kv_budget_tokens)
    if mode == "single":
        return float(_single(cm, metric, 0 if math.isnan(isl) else isl, 0 if math.isnan(osl) else osl))
    if mode == "offline" or ideal:  # the floor of a loaded run: the same work at full batch, no queueing
        if ideal and mode in ("closed", "open"):
            return float(_single(cm, metric, isl, osl)) if metric in _LATENCY else math.nan
        return float(_offline(cm, metric, isl, osl, float(row["load_level"])))
    return _loaded(row, isl, osl)


def _skip_reason(row: pd.Series, known: dict[str, set]) -> str:
    for field, names in known.items():
        if row[field] not in names:
            return f"{field} {row[field]!r} not in the catalog"
    needs = {"ttft_ms": ["input_tokens"], "prefill_tok_s": ["input_tokens"], "decode_tok_s": ["output_tokens"]}
    fields = ["input_tokens", "output_tokens"]
    if row["load_mode"] == "single":
        fields = needs.get(row["metric"], fields)
    if row["family"] != "kv_capacity" and any(pd.isna(row[f]) for f in fields):
        return "input/output lengths not fixed by the source"
    return ""


def accuracy_against_published(
    measurements: pd.DataFrame | str | Path | None = None,
    *,
    split: str | None = None,
) -> pd.DataFrame:
    """The default serving model's prediction for every published measurement, with its error.

    Parameters
    ----------
    measurements : pandas.DataFrame, str or Path, optional
        Rows in the layout of ``data/published_measurements.csv`` (the default), or a CSV path; the
        ``requests`` column may be left out (every run then simulated with ``SIM_REQUESTS``).
    split : {"dev", "holdout"}, optional
        Keep only that split; default every row.

    Returns
    -------
    pandas.DataFrame
        One row per measurement: ``id``, ``family``, ``metric``, ``split``, ``predicted``,
        ``measured``, ``signed_err`` (predicted / measured - 1), ``abs_err``, ``below_floor`` (the
        measurement beats the ideal hardware), ``skipped`` (why no prediction, else ""), then the
        conditions (``model`` ... ``statistic``).

    Raises
    ------
    ValueError
        If ``split`` is not "dev", "holdout" or None.
    """
    if split not in (None, "dev", "holdout"):
        raise ValueError(f"split must be 'dev', 'holdout' or None, got {split!r}")
    if measurements is None:
        table = load_csv("published_measurements.csv")
    elif isinstance(measurements, (str, Path)):
        table = pd.read_csv(measurements, comment="#")
    else:
        table = measurements.copy()
    if split is not None:
        table = table[table["split"] == split]
    if "requests" not in table.columns:  # an optional condition (tables of the layout before it)
        table = table.assign(requests=math.nan)
    known = {
        "model": set(load_csv("models.csv")["name"]),
        "gpu": set(load_csv("gpus.csv")["name"]),
        "weights": set(load_csv("quantizations.csv")["name"]),
    }
    predicted, floor, skipped = [], [], []
    for _, row in table.iterrows():
        reason = _skip_reason(row, known)
        skipped.append(reason)
        predicted.append(math.nan if reason else _predict(row, False))
        floor.append(math.nan if reason else _predict(row, True))
    out = table[["id", "family", "metric", "split"]].copy()
    out["predicted"] = predicted
    out["measured"] = table["value"].astype(float)
    out["signed_err"] = out["predicted"] / out["measured"] - 1
    out["abs_err"] = out["signed_err"].abs()
    floor = np.array(floor, dtype=float)
    latency = table["metric"].isin(_LATENCY).to_numpy()
    measured = out["measured"].to_numpy()
    out["below_floor"] = np.where(latency, measured < floor, measured > floor) & ~np.isnan(floor)
    out["skipped"] = skipped
    for column in _CONDITIONS:
        out[column] = table[column]
    return out.reset_index(drop=True)


def accuracy_summary(accuracy: pd.DataFrame) -> pd.DataFrame:
    """Median ``|error|`` overall and per family, p90 TTFT ``|error|`` and row counts, per split.

    Rows without a prediction and rows below the physical floor are left out (and counted).

    Parameters
    ----------
    accuracy : pandas.DataFrame
        :func:`accuracy_against_published` output.

    Returns
    -------
    pandas.DataFrame
        One row per split and family (family ``all`` for every family together): ``split``,
        ``family``, ``rows`` (predicted and kept), ``median_abs_err``, ``p90_abs_err``,
        ``median_signed_err``, ``below_floor``, ``skipped`` (row counts), and the 95% intervals
        ``median_abs_err_low`` / ``_high`` and ``p90_abs_err_low`` / ``_high`` of those quantiles
        over the population of figures the rows were drawn from (order statistics, taking the rows
        as independent draws; rows of one source table are not, so they are if anything too narrow).
    """
    records = []
    for split_name, part in accuracy.groupby("split", sort=True):
        for family in ["all", *sorted(part["family"].unique())]:
            rows = part if family == "all" else part[part["family"] == family]
            kept = rows[rows["predicted"].notna() & ~rows["below_floor"]]
            records.append(
                {
                    "split": split_name,
                    "family": family,
                    "rows": len(kept),
                    "median_abs_err": kept["abs_err"].median(),
                    "p90_abs_err": kept["abs_err"].quantile(0.9) if len(kept) else math.nan,
                    "median_signed_err": kept["signed_err"].median(),
                    **dict(zip(("median_abs_err_low", "median_abs_err_high"), quantile_ci95(kept["abs_err"], 0.5))),
                    **dict(zip(("p90_abs_err_low", "p90_abs_err_high"), quantile_ci95(kept["abs_err"], 0.9))),
                    "below_floor": int(rows["below_floor"].sum()),
                    "skipped": int(rows["predicted"].isna().sum()),
                }
            )
    return pd.DataFrame(records)

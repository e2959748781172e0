"""Predict the recorded llama-server sweep, calibrate on half its levels, predict the other half.

The recorded run (``data/llamacpp_sweep_gemma3_270m_{levels,lanes}.csv``, from the sweep harness of
issue 5) served Gemma-3-270M Q4_K_M with llama.cpp on this project's 2-core build machine. The gpu
is that machine as measured by :func:`toolkit.measure_host`, recorded beside the run in
``data/host_llamacpp_sweep.csv`` (measuring again on another machine would predict a different
host); pass ``gpu=measure_host()`` to predict for the machine at hand.

The workload is taken from the record: each level is predicted with its own lanes' prompt, cached
and output tokens, so only the times are predicted. Levels are simulated with
:func:`toolkit._calibration.predict.predict_sweep` (the simulator, one request per lane, ``concurrency`` =
the level's limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._calibration.calibrate import accuracy, calibrate
from toolkit._calibration.predict import predict_sweep
from toolkit._data import has_data, load_csv
from toolkit._model.host import measure_host

__all__: list[str] = []

RECORDED_LEVELS = "llamacpp_sweep_gemma3_270m_levels.csv"
RECORDED_LANES = "llamacpp_sweep_gemma3_270m_lanes.csv"
RECORDED_HOST = "host_llamacpp_sweep.csv"
MODEL, QUANT = "Gemma-3-270M", "q4_k_m"
FIT_LIMITS = (1, 4)


class _Recorded:
    """A sweep's lanes and levels (the shape of ``SweepResult`` that :func:`calibrate` reads)."""

    def __init__(self, lanes: pd.DataFrame, levels: pd.DataFrame):
        self.lanes = lanes
        self.levels = levels

    def only(self, limits: Sequence[int]) -> _Recorded:
        return _Recorded(
            self.lanes[self.lanes["in_flight"].isin(limits)], self.levels[self.levels["in_flight"].isin(limits)]
        )


def _load(recorded: object) -> _Recorded:
    if recorded is None:
        return _Recorded(load_csv(RECORDED_LANES), load_csv(RECORDED_LEVELS))
    if isinstance(recorded, (str, Path)):
        folder = Path(recorded)
        lanes = folder / "lanes.csv"
        if not lanes.exists():
            lanes_jsonl = folder / "lanes.jsonl"
            return _Recorded(pd.read_json(lanes_jsonl, lines=True), pd.read_csv(folder / "levels.csv", comment="#"))
        return _Recorded(pd.read_csv(lanes, comment="#"), pd.read_csv(folder / "levels.csv", comment="#"))
    if hasattr(recorded, "lanes") and hasattr(recorded, "levels"):
        return _Recorded(recorded.lanes, recorded.levels)
    if isinstance(recorded, tuple) and len(recorded) == 2:
        return _Recorded(*recorded)
    raise ValueError(
        "recorded must be None (the run under data/), a sweep folder, a SweepResult or (lanes, levels), "
        f"got {type(recorded).__name__}"
    )


def _default_gpu() -> pd.DataFrame:
    if has_data(RECORDED_HOST):
        return load_csv(RECORDED_HOST)

    return measure_host()


def _workload(lanes: pd.DataFrame, limit: int) -> pd.DataFrame:
    """Per-lane tokens of one level (mean over repeats), from its successful attempts."""
    df = lanes[lanes["in_flight"] == limit]
    if "outcome" in df.columns:
        df = df[df["outcome"] == "ok"]
    tokens = df.groupby("lane")[["prompt_tokens", "cached_tokens", "output_tokens"]].mean()
    tokens["cached_tokens"] = tokens["cached_tokens"].fillna(0.0).clip(upper=tokens["prompt_tokens"] - 1).clip(lower=0)
    return tokens.dropna()


def _predict(
    run: _Recorded,
    gpu: object,
    calibration: object,
    max_batch: int,
    *,
    model: object = MODEL,
    quant: object = QUANT,
    scheduling: dict | None = None,
) -> pd.DataFrame:
    """Every level of ``run`` predicted with the simulator; ``scheduling`` holds the server's
    ``max_num_batched_tokens`` and ``prefill_breaks`` (the simulator's defaults when None)."""
    levels = []
    for limit in sorted(run.levels["in_flight"].unique()):
        tokens = _workload(run.lanes, limit)
        if tokens.empty:
            continue
        levels.append(
            predict_sweep(
                model,
                gpu,
                quant,
                prompt_tokens=tokens["prompt_tokens"].to_numpy(),
                output_tokens=np.maximum(tokens["output_tokens"].to_numpy(), 1),
                cached_tokens=tokens["cached_tokens"].to_numpy(),
                lanes=len(tokens),
                limits=[int(limit)],
                calibration=calibration,
                max_batch=max_batch,
                **(scheduling or {}),
            )
        )
    return pd.concat(levels, ignore_index=True)


def llamacpp_closed_loop_check(
    recorded: object = None,
    gpu: object = None,
    fit_limits: Sequence[int] = FIT_LIMITS,
    max_batch: int | None = None,
) -> pd.DataFrame:
    """Accuracy of the serving model on the recorded llama-server sweep, before and after calibration.

    Parameters
    ----------
    recorded : None, path, SweepResult or (lanes, levels)
        The run; None reads the one recorded under ``data/``.
    gpu : str or spec, optional
        The gpu the run was measured on; default the host row recorded beside the run.
    fit_limits : sequence of int
        In-flight limits the calibration is fitted on; the other levels are held out.
    max_batch : int, optional
        The server's slots (``--parallel``); default the largest limit of the run.

    Returns
    -------
    pandas.DataFrame
        The rows of :func:`toolkit.accuracy` (``in_flight``, ``metric``, ``predicted``, ``measured``,
        ``rel_err``) for the uncalibrated and the calibrated prediction, with ``calibration``
        (``none`` or ``fitted on limits 1,4``) and ``split`` (``fit`` or ``holdout``: whether the level
        was used by the calibration). ``.attrs["calibration"]`` holds the fitted row.
    """
    run = _load(recorded)
    gpu = _default_gpu() if gpu is None else gpu
    limits = sorted(int(x) for x in run.levels["in_flight"].unique())
    fit_limits = [int(x) for x in fit_limits]
    if not set(fit_limits) <= set(limits):
        raise ValueError(f"fit_limits must be limits of the run {limits}, got {fit_limits}")
    max_batch = max(limits) if max_batch is None else max_batch
    fitted = calibrate(run.only(fit_limits), MODEL, gpu, QUANT)
    label = "fitted on limits " + ",".join(map(str, fit_limits))
    tables = []
    for name, calibration in (("none", None), (label, fitted)):
        table = accuracy(_predict(run, gpu, calibration, max_batch), run.levels)
        table.insert(0, "calibration", name)
        table.insert(1, "split", np.where(table["in_flight"].isin(fit_limits), "fit", "holdout"))
        tables.append(table)
    out = pd.concat(tables, ignore_index=True)
    out.attrs["calibration"] = fitted
    return out


def summarize_errors(table: pd.DataFrame) -> pd.DataFrame:
    """Median and largest absolute relative error per calibration, split and metric of a check table."""
    grouped = table.assign(abs_err=table["rel_err"].abs()).groupby(["calibration", "split", "metric"], sort=False)
    return grouped["abs_err"].agg(median_abs_rel_err="median", max_abs_rel_err="max").reset_index()

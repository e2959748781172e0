"""The held-out replay's check: the replayed requests simulated as the server saw them, their
percentiles compared with the measured ones, and how precisely one replay measures that error.

A replay of a few dozen requests fixes its percentiles loosely: which requests happen to land at
the 90th percentile of TTFT moves it by tens of percent. The model's prediction and the measurement
come from the same requests, so both are resampled together (the same requests drawn, with
replacement, for the predicted and the measured percentile), and the error of each percentile, and
the median |error| over them, is recomputed on every resample (Efron and Tibshirani, *An
Introduction to the Bootstrap*, 1993, ch. 13: the percentile interval). Requests are drawn in runs
of consecutive ones (:func:`toolkit._stats.block_resamples`), not one by one: a request's wait
depends on the requests just before it, so neighbours' latencies move together (lag-1
autocorrelation of the log latencies about 0.3 in a report's replay, under 0.1 by lag 3), and drawing them one by one would count them as more independent evidence than they
are. The interval says how far another slice of the same traffic could move the error; it does not
hold the drift of a server's speed between two replays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from toolkit._calibration.intervals import DRAWS, LEVEL, parameter_draws
from toolkit._queueing.simulator import simulate
from toolkit._stats import block_resamples
from toolkit._vocab.metrics import LATENCY_METRICS, ms_from_s

__all__: list[str] = []

REPLAY_METRICS = tuple(f"{metric}_ms" for metric in LATENCY_METRICS)
REPLAY_PERCENTILES = (50, 90)

# enough that the median |error|'s interval moves by under a percentage point between seeds (each
# percentile's by up to 1.5) on a 70-request replay drawn one by one; drawn in runs, a synthetic
# 70-request replay's bounds of it spanned 1.5 points over 10 seeds; 0.7 s
REPLAY_RESAMPLES = 2000


def replay_error_ci95(
    predicted_ms: Mapping[str, np.ndarray],
    measured_ms: Mapping[str, np.ndarray],
    percentiles: Sequence[float],
    *,
    resamples: int = REPLAY_RESAMPLES,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """95% percentile-bootstrap intervals of a replay's relative errors, resampling requests in pairs
    and in runs of consecutive requests (module docstring).

    Parameters
    ----------
    predicted_ms, measured_ms : mapping of str to numpy.ndarray
        Per metric (the same keys, in the same order), one value per request in the order they were
        sent, request ``i`` of one the same request as ``i`` of the other; NaN where a request has
        no value (a TPOT of one token).
    percentiles : sequence of float
        The percentiles compared (0-100).
    resamples : int
        Bootstrap resamples.
    seed : int
        Seed of the resampling.

    Returns
    -------
    low, high : numpy.ndarray
        The interval of ``predicted / measured - 1`` for each metric and percentile, metric-major
        (the order of ``predicted_ms``, then of ``percentiles``).
    median_abs : tuple of float
        The interval of the median |error| over all of them.

    With fewer than two requests there is nothing to resample: every bound is NaN.
    """
    metrics = list(predicted_ms)
    if len(next(iter(measured_ms.values()))) < 2:
        nan = np.full(len(metrics) * len(percentiles), np.nan)
        return nan, nan.copy(), (np.nan, np.nan)
    arrays = [np.asarray(m[k], dtype=float) for k in metrics for m in (predicted_ms, measured_ms)]

    def statistic(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        errors = [
            np.nanpercentile(samples[2 * i], q, axis=axis) / np.nanpercentile(samples[2 * i + 1], q, axis=axis) - 1
            for i in range(len(metrics))
            for q in percentiles
        ]
        return np.stack([*errors, np.median(np.abs(np.stack(errors)), axis=0)])

    rows = block_resamples(len(arrays[0]), resamples=resamples, rng=np.random.default_rng(seed))
    low, high = np.nanpercentile(statistic(*(a[rows] for a in arrays), axis=-1), [2.5, 97.5], axis=-1)
    return low[:-1], high[:-1], (float(low[-1]), float(high[-1]))


def replay_accuracy(
    requests: pd.DataFrame,
    cm: object,
    *,
    max_batch: int,
    max_num_batched_tokens: int = 2048,
    prefill_breaks: tuple[int, ...] = (),
    prefill_start_breaks: tuple[int, ...] = (),
    ubatch_tokens: int | None = None,
) -> pd.DataFrame:
    """Simulate a replay's successful requests as the server saw them and compare percentiles.

    Each request is simulated with the prompt tokens the server counted and the ones it found
    cached (``cached_tokens``: held and attended to, never prefilled, and where its prefill starts).
    ``rel_err_low`` and ``rel_err_high`` bound each latency percentile's error with 95% confidence
    over the requests that happened to be replayed (:func:`replay_error_ci95`).
    """
    table, _ = _replay_comparison(
        requests, cm, max_batch=max_batch, max_num_batched_tokens=max_num_batched_tokens,
        prefill_breaks=prefill_breaks, prefill_start_breaks=prefill_start_breaks, ubatch_tokens=ubatch_tokens,
    )  # fmt: skip
    return table


def replay_intervals(
    table: pd.DataFrame,
    requests: pd.DataFrame,
    calibration: pd.DataFrame,
    cost: Callable[[pd.Series], object],
    *,
    max_batch: int,
    max_num_batched_tokens: int,
    prefill_breaks: tuple[int, ...],
    prefill_start_breaks: tuple[int, ...],
    ubatch_tokens: int | None = None,
    draws: int = DRAWS,
    level: float = LEVEL,
) -> pd.DataFrame:
    """``table`` (:func:`replay_accuracy`'s) with the predictive interval of each predicted figure and
    whether the measured one lies in it.

    The replayed requests are simulated once per parameter set drawn from the calibration's fit
    (:func:`toolkit._calibration.intervals.parameter_draws`, the draws of ``simulate_intervals``;
    ``cost`` turns a drawn row into the cost model), the same requests each time, and each figure's
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles over the draws, widened to hold the point
    prediction, are ``interval_low`` and ``interval_high``; ``inside`` is whether ``measured`` lies
    between them (False where either is missing).
    """
    scheduling = {
        "max_batch": max_batch, "max_num_batched_tokens": max_num_batched_tokens,
        "prefill_breaks": prefill_breaks, "prefill_start_breaks": prefill_start_breaks, "ubatch_tokens": ubatch_tokens,
    }  # fmt: skip
    drawn = np.array(
        [
            _replay_comparison(requests, cost(row), intervals=False, **scheduling)[0]["predicted"].to_numpy(float)
            for row in parameter_draws(calibration, draws=draws, seed=0)
        ]
    )
    low, high = np.nanquantile(drawn, [(1 - level) / 2, (1 + level) / 2], axis=0)
    out = table.assign(interval_low=np.fmin(low, table["predicted"]), interval_high=np.fmax(high, table["predicted"]))
    return out.assign(inside=out["measured"].between(out["interval_low"], out["interval_high"]))


def _replay_comparison(
    requests: pd.DataFrame,
    cm: object,
    *,
    max_batch: int,
    max_num_batched_tokens: int,
    prefill_breaks: tuple[int, ...],
    prefill_start_breaks: tuple[int, ...],
    ubatch_tokens: int | None = None,
    intervals: bool = True,
) -> tuple[pd.DataFrame, tuple[float, float]]:
    """:func:`replay_accuracy`'s table and the 95% interval of its median |error| over the latency
    percentiles; with ``intervals`` False, NaN for every interval and no bootstrap run."""
    ok = requests[requests["outcome"].eq("ok")].sort_values("sent_s")
    prompt = np.maximum(ok["prompt_tokens"].round(), 1).astype(int)
    cached = np.minimum(ok["cached_tokens"].fillna(0.0).clip(lower=0).round(), prompt - 1).astype(int)
    trace = pd.DataFrame(
        {
            "arrival_s": ok["sent_s"].to_numpy(float) - float(ok["sent_s"].min()),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "output_tokens": np.maximum(ok["output_tokens"].round(), 1).astype(int),
        }
    )
    result = simulate(
        trace=trace,
        cost=cm,
        max_batch=max_batch,
        max_num_batched_tokens=max_num_batched_tokens,
        warmup_fraction=0.0,
        progress=False,
        prefill_breaks=prefill_breaks,
        prefill_start_breaks=prefill_start_breaks,
        ubatch_tokens=ubatch_tokens,
    )
    sim = result.requests  # in trace order: row i is request i of ``ok``
    predicted = {f"{m}_ms": ms_from_s(sim[f"{m}_s"].to_numpy()) for m in LATENCY_METRICS}
    measured = {metric: ok[metric].to_numpy(float) for metric in REPLAY_METRICS}
    if intervals:
        low, high, median_ci = replay_error_ci95(predicted, measured, REPLAY_PERCENTILES)
    else:
        low = high = [np.nan] * (len(REPLAY_METRICS) * len(REPLAY_PERCENTILES))
        median_ci = (np.nan, np.nan)
    rows = []
    for metric in REPLAY_METRICS:
        for q in REPLAY_PERCENTILES:
            p = float(np.nanpercentile(predicted[metric], q))
            m = float(np.nanpercentile(measured[metric], q))
            rows.append({"metric": metric, "percentile": q, "predicted": p, "measured": m})
    sim_wall = float((sim["arrival_s"] + sim["e2e_s"]).max())
    real_wall = float((ok["sent_s"] + ok["e2e_ms"] / 1e3).max() - ok["sent_s"].min())
    tokens = float(trace["output_tokens"].sum())
    rows.append(
        {"metric": "output_tok_s", "percentile": np.nan, "predicted": tokens / sim_wall, "measured": tokens / real_wall}
    )
    out = pd.DataFrame(rows)
    out["rel_err"] = (out["predicted"] - out["measured"]) / out["measured"].where(out["measured"] != 0)
    out["rel_err_low"] = [*low, np.nan]
    out["rel_err_high"] = [*high, np.nan]
    return out, median_ci

"""The range a calibration was measured over, and whether a prediction stays inside it.

A calibration (:func:`toolkit.calibrate`) is fitted to observations at some prompt lengths, contexts
and batch sizes; its parameters say nothing about steps it never saw. ``validity_range`` records
that range in the calibration's row:

- ``valid_prompt_tokens_min`` / ``_max``: the prompts whose prefill was measured (its TTFT
  observations: a profile's ``prefill`` cells, a sweep's lanes or levels);
- ``valid_context_tokens_min`` / ``_max``: the KV tokens one decoding sequence held, from its
  prompt to its last output token (``prompt + output`` at the end of its decode), over its TPOT
  observations;
- ``valid_batch_min`` / ``_max``: the sequences decoding together, over its TPOT observations.

A prediction is *extrapolated* where it goes above a maximum by more than ``TOLERANCE``: a longer
prompt, a longer context or a larger batch than any measured. The margin is the spread of lengths
about a mean that a calibration on a sweep's levels sees (a level's observation is its mean lane,
while a prediction of the same sweep takes each lane's own prompt, a few percent longer or shorter);
a batch of 9 over a measured 8 is still flagged. Below a minimum is not flagged: there the terms that grow with
length and batch (compute-bound prefill, attention, the per-sequence cost) shrink toward the fixed
costs (one read of the weights, the step and request overheads) that every measured step paid, so
the fit covers them; above the maximum those growing terms reach sizes no observation weighed.
The default efficiencies (no calibration) have no measured range, and nothing is flagged.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

__all__: list[str] = []

# relative margin above a measured maximum that is not yet flagged (module docstring)
TOLERANCE = 0.1

# quantity -> what it counts, for the warning and the report's sentence
QUANTITIES = {
    "prompt_tokens": "prompt tokens",
    "context_tokens": "context tokens per decoding sequence",
    "batch": "sequences decoding together",
}


def validity_range(obs: pd.DataFrame) -> dict[str, float]:
    """The calibration's measured range from its observations (module docstring), NaN where none.

    ``obs`` is the frame of :func:`toolkit._calibration.observations.observations` (``kind``,
    ``prompt_tokens``, ``context_tokens`` = prompt + output / 2, ``batch``)."""
    ttft, tpot = obs[obs["kind"].eq("ttft")], obs[obs["kind"].eq("tpot")]
    values = {
        "prompt_tokens": ttft["prompt_tokens"],
        # context_tokens is the mean over the decode (prompt + output / 2): its end is prompt + output
        "context_tokens": 2 * tpot["context_tokens"] - tpot["prompt_tokens"],
        "batch": tpot["batch"],
    }
    row = {}
    for name, series in values.items():
        finite = series.astype(float)[np.isfinite(series.astype(float))]
        row[f"valid_{name}_min"] = float(finite.min()) if len(finite) else math.nan
        row[f"valid_{name}_max"] = float(finite.max()) if len(finite) else math.nan
    return row


def measured_range(calibration: object) -> dict[str, tuple[float, float]]:
    """``{quantity: (min, max)}`` of a calibration row (DataFrame, Series or dict) that records its
    range; empty for None, for the default efficiencies and for a row without ``valid_*`` fields."""
    if calibration is None:
        return {}
    if isinstance(calibration, pd.DataFrame):
        if len(calibration) != 1:
            return {}
        calibration = calibration.iloc[0]
    out = {}
    for name in QUANTITIES:
        low, high = (_number(calibration, f"valid_{name}_{end}") for end in ("min", "max"))
        if math.isfinite(high):
            out[name] = (low, high)
    return out


def _number(row: object, key: str) -> float:
    try:
        value = float(row.get(key, math.nan))  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return math.nan
    return value


def extrapolation(calibration: object, **largest: float) -> tuple[bool, str]:
    """Whether a prediction reaching ``largest`` (``prompt_tokens``, ``context_tokens``, ``batch``:
    the largest value it reaches) goes above the calibration's measured range (by more than
    ``TOLERANCE`` of its maximum), and why.

    Returns
    -------
    tuple of (bool, str)
        ``extrapolated`` and its reason: one clause per quantity above its range ("prompt_tokens 2000
        above the measured 128-768"), ``"; "``-separated; ``(False, "")`` inside the range or
        without a measured range (no calibration, or the default efficiencies)."""
    known = measured_range(calibration)
    reasons = []
    for name, value in largest.items():
        if name not in QUANTITIES:
            raise ValueError(f"extrapolation: unknown quantity {name!r}; one of {', '.join(QUANTITIES)}")
        if name in known and math.isfinite(float(value)) and float(value) > known[name][1] * (1 + TOLERANCE):
            low, high = known[name]
            reasons.append(f"{name} {float(value):g} above the measured {low:g}-{high:g}")
    return bool(reasons), "; ".join(reasons)


def warn_extrapolated(where: str, reason: str) -> None:
    """One ``UserWarning`` per quantity of ``reason`` (from :func:`extrapolation`), naming ``where``."""
    for clause in filter(None, reason.split("; ")):
        warnings.warn(f"{where}: {clause} of the calibration: the prediction extrapolates", UserWarning, stacklevel=3)


def flag(calibration: object, where: str, **largest: float) -> dict[str, object]:
    """``{"extrapolated": bool, "extrapolated_reason": str}`` for a prediction reaching ``largest``,
    warning once per quantity above the range; ``{}`` without a measured range (no columns added)."""
    if not measured_range(calibration):
        return {}
    extrapolated, reason = extrapolation(calibration, **largest)
    warn_extrapolated(where, reason)
    return {"extrapolated": extrapolated, "extrapolated_reason": reason}


def peak_running(start_s: np.ndarray, end_s: np.ndarray) -> int:
    """The most intervals ``[start_s, end_s)`` open at one time (0 for none); an interval ending at
    the moment another starts does not overlap it."""
    start, end = np.asarray(start_s, float), np.asarray(end_s, float)
    keep = np.isfinite(start) & np.isfinite(end)
    times = np.concatenate([start[keep], end[keep]])
    steps = np.concatenate([np.ones(keep.sum()), -np.ones(keep.sum())])
    order = np.lexsort((steps, times))  # at equal times, ends (-1) before starts (+1)
    return int(np.cumsum(steps[order]).max(initial=0))


def simulated_extent(requests: pd.DataFrame, *, max_batch: int, overhead_s: float) -> dict[str, float]:
    """The largest prompt, context (prompt + output) and running batch of a simulation's requests:
    each request runs from reaching the engine (arrival + overhead) plus its queue wait to its end,
    per replica, at most ``max_batch`` at once."""
    start = requests["arrival_s"] + overhead_s + requests["queue_wait_s"]
    end = requests["arrival_s"] + requests["e2e_s"]
    by_replica = requests["replica"] if "replica" in requests.columns else pd.Series(0, index=requests.index)
    peak = max((peak_running(start[g.index], end[g.index]) for _, g in requests.groupby(by_replica)), default=0)
    context = requests["prompt_tokens"] + requests["output_tokens"]
    return {
        "prompt_tokens": float(requests["prompt_tokens"].max()),
        "context_tokens": float(context.max()),
        "batch": float(min(peak, max_batch)),
    }


def simulation_flag(calibration: object, requests: pd.DataFrame, max_batch: int, overhead_s: float) -> dict:
    """:func:`flag` for :func:`toolkit.simulate`'s summary, from its requests (``{}`` without a range)."""
    if not measured_range(calibration) or requests.empty:
        return {}
    return flag(calibration, "simulate", **simulated_extent(requests, max_batch=max_batch, overhead_s=overhead_s))


def range_text(calibration: object) -> str:
    """The measured range in words ("prompts of 128-768 tokens, ..."), '' without one."""
    known = measured_range(calibration)
    return ", ".join(f"{QUANTITIES[n]} {lo:g}-{hi:g}" for n, (lo, hi) in known.items())


def range_sentence(calibration: object, what: str, **largest: float) -> str:
    """The report's sentence on whether ``what`` (e.g. "The held-out sweep") lies inside the
    calibration's measured range: '' inside it (or without a range), else one sentence naming each
    quantity above it."""
    extrapolated, reason = extrapolation(calibration, **largest)
    if not extrapolated:
        return ""
    return (
        f"{what} goes beyond the range the calibration was measured over ({reason}): there the prediction"
        " extrapolates, and its error says less about the model than inside the range."
    )


def candidate_flags(calibration: object, batch: pd.Series, *, prompt_tokens: float, output_tokens: float) -> dict:
    """The ``extrapolated`` and ``extrapolated_reason`` columns of a plan's candidates (each with its
    ``batch``, all with the workload's ``prompt_tokens`` and context ``prompt_tokens + output_tokens``),
    warning once per quantity at its largest value; ``{}`` without a measured range."""
    if not measured_range(calibration):
        return {}
    context = float(prompt_tokens) + float(output_tokens)
    flags = [extrapolation(calibration, prompt_tokens=prompt_tokens, context_tokens=context, batch=b) for b in batch]
    largest = float(batch.max()) if len(batch) else math.nan
    warn_extrapolated(
        "plan", extrapolation(calibration, prompt_tokens=prompt_tokens, context_tokens=context, batch=largest)[1]
    )
    return {"extrapolated": [f for f, _ in flags], "extrapolated_reason": [r for _, r in flags]}

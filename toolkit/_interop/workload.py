"""A run's workload as :func:`toolkit.predict_sweep`'s arguments, so that a run read from another tool is predicted
and checked (``accuracy``) like a local sweep."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from toolkit._sweep.result import SweepResult

__all__ = ["run_workload"]


def run_workload(run: SweepResult | str | os.PathLike) -> dict[str, Any]:
    """The workload of a closed-loop run as the keyword arguments of :func:`toolkit.predict_sweep`.

    A closed-loop sweep sends the same requests at every in-flight limit, so the first level's completed
    requests stand for the workload: their prompt and output tokens (and cached prompt tokens, where the
    run records them) in order, their number as ``lanes``, and every level's limit.

    Parameters
    ----------
    run : SweepResult, str or os.PathLike
        A run, or a path :func:`toolkit.read_run` reads, with per-request records.

    Returns
    -------
    dict
        ``prompt_tokens``, ``output_tokens``, ``cached_tokens`` (lists of ints, one per request; cached 0
        where the run does not record it), ``lanes`` (int, the requests) and ``limits`` (list of int): pass
        them as ``predict_sweep(model, gpu, quant, **run_workload(run), calibration=...)``.

    Raises
    ------
    ValueError
        A run whose levels are set by request rate (``predict_sweep`` predicts closed-loop levels), or
        whose first level has no completed request with its prompt and output tokens recorded.
    """
    if not isinstance(run, SweepResult):
        from toolkit._interop.read import read_run

        run = read_run(run)
    levels = run.levels
    if not len(levels) or levels["in_flight"].isna().any():
        raise ValueError("run must have closed-loop levels (in_flight); predict_sweep does not predict request rates")
    lanes = run.lanes
    first = levels["in_flight"].iloc[0]
    if len(lanes):
        lanes = lanes[(lanes["in_flight"] == first) & (lanes["outcome"] == "ok")]
        if "final" in lanes.columns:
            lanes = lanes[lanes["final"].fillna(True).astype(bool)]
    if not len(lanes) or lanes[["prompt_tokens", "output_tokens"]].isna().any().any():
        raise ValueError(
            "run must hold its requests with prompt_tokens and output_tokens (a summary-only file does not):"
            " pass predict_sweep the tool's workload settings instead"
        )
    cached = lanes["cached_tokens"].fillna(0) if "cached_tokens" in lanes.columns else np.zeros(len(lanes))
    return {
        "prompt_tokens": [int(x) for x in lanes["prompt_tokens"]],
        "output_tokens": [int(x) for x in lanes["output_tokens"]],
        "cached_tokens": [int(x) for x in cached],
        "lanes": len(lanes),
        "limits": [int(x) for x in levels["in_flight"]],
    }

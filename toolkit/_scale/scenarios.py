"""One scenario of a grid: its arguments checked, its seed derived, its trace found, and its run.

A scenario is a mapping of :func:`toolkit.simulate` keyword arguments, plus ``trace_*`` options of
:func:`toolkit.load_trace` when ``trace`` names a trace instead of holding a frame. The functions
that run on a worker (``run_chunk`` and what it calls) only touch their arguments and the package
data of the worker's own installation, so a task can be rerun anywhere with the same outcome.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit._queueing.simulator import simulate
from toolkit._vocab.metrics import SIMULATED_METRICS, quantile_column
from toolkit._workload.traces import load_trace

__all__: list[str] = []

SIMULATE_ARGS = tuple(inspect.signature(simulate).parameters)
# trace_start_s, trace_duration_s, trace_time_scale, ...: load_trace's options, for a trace given by name
TRACE_OPTIONS = {f"trace_{p}": p for p in inspect.signature(load_trace).parameters if p != "name_or_path"}
# simulate's summary row, in its order (a failed scenario has NaN in each)
SUMMARY_COLUMNS = (
    "requests",
    *(f"{metric}_{stat}_s" for metric in SIMULATED_METRICS for stat in ("mean", "p50", "p95", "p99")),
    "throughput_rps",
    "output_tok_s",
    "achieved_concurrency",
    "preemptions",
    "prefix_hit_rate",
    "prefill_tokens_saved",
    "utilization",
    "kv_budget_tokens",
    "queue_wait_growth",
    "stable",
)
INTEGER_COLUMNS = ("requests", "preemptions", "prefill_tokens_saved", "kv_budget_tokens")
BOOLEAN_COLUMNS = ("stable",)
# shipped traces sliced and scaled, kept per worker process
TRACE_CACHE_SIZE = 32


@dataclass(frozen=True)
class FrameRef:
    """Stands for the ``key``-th trace frame of a grid, shipped to each worker once."""

    key: int


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


def scenario_rows(scenarios: object) -> tuple[list[dict[str, Any]], pd.Index, list[str]]:
    """(the scenarios as dicts without missing values, the index of the result, the column order).

    Raises ``ValueError`` naming ``scenarios`` for anything but a non-empty frame or iterable of
    mappings whose keys are arguments of ``simulate`` or ``trace_*`` options.
    """
    if isinstance(scenarios, pd.DataFrame):
        raw = scenarios.to_dict("records")
        index, columns = scenarios.index, [str(c) for c in scenarios.columns]
    elif isinstance(scenarios, (Mapping, str, bytes)) or not isinstance(scenarios, Iterable):
        raise ValueError(f"scenarios must be a DataFrame or a list of dicts of simulate arguments, got {scenarios!r}")
    else:
        raw = list(scenarios)
        if not all(isinstance(row, Mapping) for row in raw):
            raise ValueError("scenarios must be a DataFrame or a list of dicts of simulate arguments")
        index, columns = pd.RangeIndex(len(raw)), list(dict.fromkeys(str(k) for row in raw for k in row))
    if not raw:
        raise ValueError("scenarios must hold at least one scenario")
    allowed = set(SIMULATE_ARGS) | set(TRACE_OPTIONS)
    unknown = [c for c in columns if c not in allowed]
    if unknown:
        raise ValueError(
            f"scenarios has keys that are neither simulate arguments nor trace options: {unknown}; "
            f"allowed: {', '.join(SIMULATE_ARGS)}, {', '.join(TRACE_OPTIONS)}"
        )
    rows = [{str(k): v for k, v in row.items() if not _missing(v)} for row in raw]
    return rows, index, columns


def scenario_seed(base_seed: int, position: int) -> int:
    """The seed of the scenario at ``position``: the first 64-bit word of
    ``numpy.random.SeedSequence(base_seed, spawn_key=(position,))`` (the ``position``-th child of
    ``SeedSequence(base_seed).spawn``), shifted right one bit so that it fits an int64."""
    word = np.random.SeedSequence(base_seed, spawn_key=(position,)).generate_state(1, dtype=np.uint64)[0]
    return int(word >> np.uint64(1))


def ship_frames(rows: list[dict[str, Any]]) -> dict[int, pd.DataFrame]:
    """Replace each trace frame in ``rows`` by a ``FrameRef``; the frames by key (one per distinct frame)."""
    frames: dict[int, pd.DataFrame] = {}
    keys: dict[int, int] = {}
    for row in rows:
        trace = row.get("trace")
        if isinstance(trace, pd.DataFrame):
            key = keys.setdefault(id(trace), len(keys))
            frames[key] = trace
            row["trace"] = FrameRef(key)
    return frames


def label(value: object) -> object:
    """What the result shows of a scenario value: a trace frame by its name and size."""
    if isinstance(value, pd.DataFrame):
        return f"{value.attrs.get('name', 'trace frame')} ({len(value)} requests)"
    return value


@lru_cache(maxsize=TRACE_CACHE_SIZE)
def named_trace(name: str, options: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    """A shipped trace (or a file every worker can read) with ``load_trace`` options, once per process."""
    return load_trace(name, **dict(options))


def _simulate_kwargs(args: Mapping[str, Any], frames: Mapping[int, pd.DataFrame]) -> dict[str, Any]:
    kwargs = {k: v for k, v in args.items() if k not in TRACE_OPTIONS}
    options = tuple(sorted((TRACE_OPTIONS[k], v) for k, v in args.items() if k in TRACE_OPTIONS))
    trace = kwargs.get("trace")
    if isinstance(trace, FrameRef):
        kwargs["trace"] = frames[trace.key]
    elif isinstance(trace, (str, Path)):
        kwargs["trace"] = named_trace(str(trace), options)
    if options and not isinstance(trace, (str, Path)):
        raise ValueError(f"{', '.join(f'trace_{k}' for k, _ in options)} apply to a trace given by name or path")
    if "trace" in kwargs:
        for name in ("prompt_tokens", "output_tokens", "num_requests"):
            kwargs.setdefault(name, None)
    return kwargs


def run_scenario(
    args: Mapping[str, Any], frames: Mapping[int, pd.DataFrame], percentiles: tuple[float, ...]
) -> dict[str, Any]:
    """The result row of one scenario: its summary and percentiles, or ``error`` (type: message)."""
    try:
        result = simulate(**_simulate_kwargs(args, frames))
    except Exception as exc:  # a failed scenario is a row with its error
        return {"error": f"{type(exc).__name__}: {exc}"}
    row: dict[str, Any] = result.summary.iloc[0].to_dict()
    measured = result.requests[~result.requests["warmup"]]
    for q in percentiles:
        for metric in SIMULATED_METRICS:
            values = measured[f"{metric}_s"].to_numpy(dtype=float)
            finite = values[np.isfinite(values)]
            row[quantile_column(metric, q, "s")] = float(np.percentile(finite, 100 * q)) if finite.size else math.nan
    row["error"] = None
    return row


def run_chunk(
    chunk: list[tuple[int, dict[str, Any]]], frames: Mapping[int, pd.DataFrame], percentiles: tuple[float, ...]
) -> list[tuple[int, dict[str, Any]]]:
    """Run the scenarios of one task: (position in the grid, result row) for each."""
    return [(position, run_scenario(args, frames, percentiles)) for position, args in chunk]

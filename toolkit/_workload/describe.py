"""Describing a workload: its rate, how bursty its arrivals are at several time scales, its token
distributions, and the variance preset it is nearest to.

Burstiness depends on the scale one looks at. Besides the squared coefficient of variation of the
gaps between arrivals (``ca2``: 1 for Poisson), the description gives the index of dispersion of the
counts in windows of ``w`` seconds, ``var(N_w) / mean(N_w)``: 1 at every scale for a Poisson stream,
approaching ``ca2`` at long windows for a renewal process, and growing with ``w`` when the rate
itself drifts (diurnal load, bursts of minutes), which no preset describes.

A trace with prefix blocks (``prefix_blocks``, as the Mooncake traces have) is described by its
reuse too: the share of prompt tokens an unbounded prefix cache serves, the working set, and the
hit rate against the cache's capacity, exact at every capacity (LRU stack distances;
:mod:`toolkit._workload.prefix` states the cache model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit._args import check_array
from toolkit._queueing.closed_forms import workload_presets
from toolkit._workload.prefix import COLUMN, reuse_curve, reuse_summary

__all__ = ["WorkloadDescription", "describe_workload"]

DEFAULT_WINDOWS_S = (1.0, 10.0, 60.0, 600.0)
# The per-minute counts hold a row per minute of the trace: this span (about 116 days) bounds them,
# far beyond any production trace published (hours to weeks).
MAX_SPAN_S = 1e7


@dataclass(frozen=True)
class WorkloadDescription:
    """What :func:`describe_workload` returns: four tidy frames.

    Attributes
    ----------
    summary : pandas.DataFrame
        One row: ``requests``, ``duration_s``, ``rate_rps``, ``ca2`` (squared coefficient of variation
        of inter-arrival gaps), ``prompt_mean``, ``prompt_p50``, ``prompt_p95``, ``prompt_cs2``,
        ``output_mean``, ``output_p50``, ``output_p95``, ``output_cs2`` (tokens; cs2 = variance over
        squared mean), ``peak_minute_rps``, ``nearest_preset`` (by output-token cs2, the service
        variability the presets stand for), ``preset_cs2`` and ``preset_cs2_gap`` (trace minus preset).
        With prefix blocks also ``prefix_block_tokens``, ``reuse_hit_rate`` (the share of prompt
        tokens an unbounded prefix cache serves: their block was seen before),
        ``reuse_block_share`` (the share of block references that repeat an earlier block),
        ``reuse_working_set_tokens`` (distinct blocks times the block size: the KV capacity an
        unbounded cache fills) and ``reuse_unique_prompt_tokens`` (the tokens of the distinct blocks).
    dispersion : pandas.DataFrame
        One row per window: ``window_s``, ``windows`` (how many), ``mean_count``,
        ``index_of_dispersion`` (1 for Poisson).
    per_minute : pandas.DataFrame
        ``minute`` (from 0), ``requests``, ``rate_rps``.
    reuse_curve : pandas.DataFrame
        For a trace with prefix blocks, the LRU prefix cache's hit rate against its capacity:
        ``capacity_tokens``, ``hit_rate`` (share of all prompt tokens), ``hit_tokens``, from one
        block to the working set; empty without prefix blocks.
    """

    summary: pd.DataFrame
    dispersion: pd.DataFrame
    per_minute: pd.DataFrame
    reuse_curve: pd.DataFrame = field(default_factory=pd.DataFrame)


def _column(trace: pd.DataFrame, name: str) -> np.ndarray:
    """A trace column as floats: finite, and for token counts not negative, or a ValueError naming it."""
    try:
        values = trace[name].to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"trace {name} must be numbers") from None
    tokens = name != "arrival_s"
    bad = ~np.isfinite(values) | (tokens & (values < 0))
    if bad.any():
        kind = "token counts (>= 0)" if tokens else "seconds"
        raise ValueError(f"trace {name} must be finite {kind}; {int(bad.sum())} of {values.size} are not")
    return values


def describe_workload(trace: pd.DataFrame, windows_s: Sequence[float] = DEFAULT_WINDOWS_S) -> WorkloadDescription:
    """Describe a trace frame (:func:`toolkit.load_trace`) as a capacity planner needs it.

    Parameters
    ----------
    trace : pandas.DataFrame
        Columns ``arrival_s`` (s), ``prompt_tokens``, ``output_tokens``; at least two rows, spanning
        at most 1e7 s. With ``prefix_blocks`` and ``attrs["prefix_block_tokens"]`` (a Mooncake trace,
        :func:`toolkit.session_workload`), its reuse is described too.
    windows_s : sequence of float
        Window lengths (s, > 0 and at most 1e9) of the index of dispersion; windows longer than the
        trace are left out.

    Returns
    -------
    WorkloadDescription
        ``summary`` (one row), ``dispersion`` (one row per window), ``per_minute`` (one row per
        minute), ``reuse_curve`` (with prefix blocks); see :class:`WorkloadDescription` for the columns.
    """
    if not isinstance(trace, pd.DataFrame) or not {"arrival_s", "prompt_tokens", "output_tokens"} <= set(trace.columns):
        raise ValueError("trace must be a DataFrame with arrival_s, prompt_tokens and output_tokens columns")
    if len(trace) < 2:
        raise ValueError(f"trace must have at least 2 requests, got {len(trace)}")
    windows = list(check_array("windows_s", windows_s, low=0, low_inclusive=False, high=1e9))
    if not windows:
        raise ValueError("windows_s must name at least one window (seconds, > 0)")
    arrival, prompt, output = (_column(trace, name) for name in ("arrival_s", "prompt_tokens", "output_tokens"))
    arrival = np.sort(arrival)
    duration = float(arrival[-1] - arrival[0])
    if duration > MAX_SPAN_S:
        raise ValueError(f"trace arrival_s must span at most {MAX_SPAN_S:g} s (about 116 days), got {duration:.4g} s")
    gaps = np.diff(arrival)
    per_minute = _per_minute(arrival)
    summary = {
        "requests": len(arrival),
        "duration_s": duration,
        "rate_rps": len(arrival) / duration if duration > 0 else np.nan,
        "ca2": _scv(gaps),
        **_tokens("prompt", prompt),
        **_tokens("output", output),
        "peak_minute_rps": float(per_minute["rate_rps"].max()),
        **_nearest_preset(_scv(output)),
    }
    dispersion = pd.DataFrame([_dispersion(arrival, w) for w in windows if w <= duration])
    if COLUMN not in trace.columns:
        return WorkloadDescription(pd.DataFrame([summary]), dispersion, per_minute)
    summary.update(reuse_summary(trace))
    return WorkloadDescription(pd.DataFrame([summary]), dispersion, per_minute, reuse_curve(trace))


def _scv(values: np.ndarray) -> float:
    mean = float(np.mean(values))
    return float(np.var(values) / mean**2) if mean > 0 else np.nan


def _tokens(prefix: str, values: np.ndarray) -> dict[str, float]:
    p50, p95 = np.percentile(values, [50, 95])
    return {
        f"{prefix}_mean": float(values.mean()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p95": float(p95),
        f"{prefix}_cs2": _scv(values),
    }


def _per_minute(arrival: np.ndarray) -> pd.DataFrame:
    minutes = ((arrival - arrival[0]) // 60).astype(int)
    counts = np.bincount(minutes)
    return pd.DataFrame({"minute": np.arange(len(counts)), "requests": counts, "rate_rps": counts / 60.0})


def _dispersion(arrival: np.ndarray, window_s: float) -> dict[str, float]:
    """Counts per window from the windows that hold a request (the empty ones add only to ``n``), so
    memory grows with the requests, not with the span over the window."""
    n = int((arrival[-1] - arrival[0]) // window_s)
    which = ((arrival - arrival[0]) // window_s).astype(np.int64)
    counts = np.unique(which[which < n], return_counts=True)[1].astype(float)
    mean = counts.sum() / n
    variance = (((counts - mean) ** 2).sum() + (n - counts.size) * mean**2) / n
    return {
        "window_s": window_s,
        "windows": n,
        "mean_count": float(mean),
        "index_of_dispersion": float(variance / mean) if mean > 0 else np.nan,
    }


def _nearest_preset(output_cs2: float) -> dict[str, object]:
    presets = workload_presets()
    gap = output_cs2 - presets["cs2"].to_numpy(dtype=float)
    best = int(np.argmin(np.abs(gap)))
    return {
        "nearest_preset": str(presets["preset"].iloc[best]),
        "preset_cs2": float(presets["cs2"].iloc[best]),
        "preset_cs2_gap": float(gap[best]),
    }

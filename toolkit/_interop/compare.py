"""A pair of runs side by side: what changed between them, and which differences exceed the runs' own noise.

Each metric's difference (b - a) at each level gets a confidence interval from the runs' own spread:

- with two or more repeats on both sides, Welch's t interval over the repeats' values: it sees what
  moves between repeats (other load on the host, the server's state), which the requests of one run
  cannot;
- else, with per-request records on both sides, a bootstrap over requests (:func:`scipy.stats.bootstrap`,
  percentile method, each run resampled on its own); ITL pools the gaps of the resampled requests,
  so a request's gaps move together;
- the success rate's difference: the Agresti-Caffo interval (one success and one failure added to each
  run), which keeps its coverage when both rates are near 1;
- else no interval (NaN) and ``method`` says why.

A difference is flagged (``beyond_noise``) when its interval excludes zero. At ``confidence`` 0.95
each metric of each level is flagged by chance in about 5% of comparisons of runs drawn from one
distribution; with a dozen metrics per level, expect one chance flag in every two levels compared,
so read a flag together with its size and the conditions that differ.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from toolkit._args import check_int, check_number
from toolkit._interop.frames import CONDITION_KEYS
from toolkit._interop.intervals import agresti_caffo, bootstrap_difference, hit_rate_difference, welch
from toolkit._sweep.result import SweepResult

__all__ = ["compare_runs", "RunComparison"]

NAN = math.nan
_LATENCIES = ("ttft", "tpot", "itl", "e2e")
_PERCENTILES = (50, 95, 99)
_THROUGHPUTS = ("dec_tok_s", "achieved_rps")


@dataclass(frozen=True)
class RunComparison:
    """What :func:`compare_runs` returns.

    Attributes
    ----------
    conditions : pandas.DataFrame
        The conditions that differ between the runs, first: ``condition``, ``a``, ``b`` (text;
        ``(not recorded)`` where a run does not say).
    metrics : pandas.DataFrame
        One row per matched level and metric: ``in_flight``, ``rate_rps`` (NaN where a run's levels are
        set by the other), ``metric``, ``a``, ``b``, ``diff`` (b - a, the metric's unit), ``ci_low``,
        ``ci_high`` (NaN where there is no interval), ``beyond_noise`` (the interval excludes zero),
        ``method`` (how the interval was found, or why there is none), ``n_a``, ``n_b``.
    unmatched : pandas.DataFrame
        Levels present in only one run: ``run`` (a or b), ``in_flight``, ``rate_rps``.
    """

    conditions: pd.DataFrame
    metrics: pd.DataFrame
    unmatched: pd.DataFrame

    def to_text(self) -> str:
        """The comparison as plain text: conditions that differ, then every flagged difference."""
        lines = ["Conditions that differ:"]
        if self.conditions.empty:
            lines.append("  none (the runs record the same conditions, or none)")
        lines += [f"  {r.condition}: {r.a} -> {r.b}" for r in self.conditions.itertuples()]
        flagged = self.metrics[self.metrics["beyond_noise"]]
        lines.append(f"Differences beyond the noise ({len(flagged)} of {len(self.metrics)} level metrics):")
        for r in flagged.itertuples():
            level = f"in_flight {r.in_flight:g}" if not math.isnan(r.in_flight) else f"rate {r.rate_rps:g}/s"
            lines.append(
                f"  {level} {r.metric}: {r.a:.4g} -> {r.b:.4g} ({r.diff:+.4g}, CI {r.ci_low:+.4g} .. {r.ci_high:+.4g})"
            )
        for r in self.unmatched.itertuples():
            lines.append(f"  level only in run {r.run}: in_flight {r.in_flight}, rate {r.rate_rps}")
        return "\n".join(lines)


def compare_runs(
    a: SweepResult | str | os.PathLike,
    b: SweepResult | str | os.PathLike,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> RunComparison:
    """Compare a pair of runs level by level, with an interval for each difference from the runs' own noise.

    Parameters
    ----------
    a, b : SweepResult, str or os.PathLike
        The runs (``b`` is compared against ``a``): sweep results, or paths :func:`toolkit.read_run` reads.
    confidence : float
        Confidence level of the intervals (0.5 to 0.999).
    n_resamples : int
        Bootstrap resamples per metric (100 to 100000).
    seed : int
        Seed of the bootstrap, so that a comparison repeats exactly.

    Returns
    -------
    RunComparison
        The conditions that differ, then per matched level (by ``in_flight`` where both runs have
        it, else by ``rate_rps``) the difference of the throughputs (``dec_tok_s``, ``achieved_rps``),
        the TTFT/TPOT/ITL/E2E p50, p95, p99 (ms), the success rate and the prompt-cache hit rate, each
        with its interval and flag (see the module notes for the methods and the false-flag rate).

    Raises
    ------
    ValueError
        A run that cannot be read, or an argument out of range.
    """
    confidence = check_number("confidence", confidence, low=0.5, high=0.999)
    n_resamples = check_int("n_resamples", n_resamples, low=100, high=100_000)
    seed = check_int("seed", seed, low=0)
    runs = [_as_run(x, name) for x, name in ((a, "a"), (b, "b"))]
    key = "in_flight" if all(r.levels["in_flight"].notna().all() for r in runs) else "rate_rps"
    rng = np.random.default_rng(seed)
    rows, unmatched = [], []
    levels_b = {round(float(v), 9): i for i, v in runs[1].levels[key].items() if not _nan(v)}
    for _, la in runs[0].levels.iterrows():
        match = levels_b.pop(round(float(la[key]), 9), None) if not _nan(la[key]) else None
        if match is None:
            unmatched.append({"run": "a", "in_flight": la["in_flight"], "rate_rps": la["rate_rps"]})
            continue
        lb = runs[1].levels.loc[match]
        rows += _level_rows(runs, la, lb, key=key, confidence=confidence, n_resamples=n_resamples, rng=rng)
    for i in levels_b.values():
        lb = runs[1].levels.loc[i]
        unmatched.append({"run": "b", "in_flight": lb["in_flight"], "rate_rps": lb["rate_rps"]})
    columns = ["in_flight", "rate_rps", "metric", "a", "b", "diff", "ci_low", "ci_high", "beyond_noise", "method"]
    metrics = pd.DataFrame(rows, columns=[*columns, "n_a", "n_b"])
    metrics["beyond_noise"] = metrics["beyond_noise"].astype(bool)
    return RunComparison(
        conditions=_conditions(runs),
        metrics=metrics,
        unmatched=pd.DataFrame(unmatched, columns=["run", "in_flight", "rate_rps"]),
    )


def _as_run(x: Any, name: str) -> SweepResult:
    if isinstance(x, SweepResult):
        return x
    if isinstance(x, (str, os.PathLike)):
        from toolkit._interop.read import read_run

        return read_run(x)
    raise ValueError(f"{name} must be a SweepResult or a path to a run, got {type(x).__name__}")


def _conditions(runs: list[SweepResult]) -> pd.DataFrame:
    found = [dict(r.levels.attrs.get("conditions") or r.params.get("conditions") or {}) for r in runs]
    for f, r in zip(found, runs, strict=True):
        f.setdefault("format", r.levels.attrs.get("format") or r.params.get("format") or "toolkit sweep")
    keys = [*CONDITION_KEYS, "format", *sorted((set(found[0]) | set(found[1])) - {*CONDITION_KEYS, "format"})]
    rows = []
    for k in keys:
        va, vb = (_text(f.get(k)) for f in found)
        if va != vb:
            rows.append({"condition": k, "a": va, "b": vb})
    return pd.DataFrame(rows, columns=["condition", "a", "b"])


def _text(value: Any) -> str:
    if value is None or value == "" or value == {}:
        return "(not recorded)"
    return str(value)


def _level_rows(runs, la, lb, *, key, confidence, n_resamples, rng) -> list[dict[str, Any]]:
    lanes = [_level_lanes(r, level) for r, level in zip(runs, (la, lb), strict=True)]
    repeats = [_level_repeats(r, level, key) for r, level in zip(runs, (la, lb), strict=True)]
    base = {"in_flight": la["in_flight"], "rate_rps": la["rate_rps"]}
    out = []

    def add(metric, va, vb, low, high, method, n_a, n_b):
        flagged = bool(not _nan(low) and (low > 0 or high < 0))
        out.append(base | {"metric": metric, "a": va, "b": vb, "diff": vb - va, "ci_low": low, "ci_high": high,
                           "beyond_noise": flagged, "method": method, "n_a": n_a, "n_b": n_b})  # fmt: skip

    for metric in _THROUGHPUTS:
        low, high, method = welch(repeats, metric, confidence)
        add(metric, la[metric], lb[metric], low, high, method, *(len(r) for r in repeats))
    for stem in _LATENCIES:
        for p in _PERCENTILES:
            column = f"{stem}_p{p}_ms"
            if all(len(r) >= 2 for r in repeats) or not all(len(x) >= 2 for x in lanes):
                (low, high, method), ns = welch(repeats, column, confidence), [len(r) for r in repeats]
            else:
                low, high = bootstrap_difference(lanes, stem, p, confidence, n_resamples, rng)
                method, ns = "bootstrap over requests", [len(x) for x in lanes]
            add(column, la[column], lb[column], low, high, method, *ns)
    ok = [float(level["lanes_ok"]) for level in (la, lb)]
    failed = [float(level["lanes_failed"]) if not _nan(level["lanes_failed"]) else NAN for level in (la, lb)]
    rates = [o / (o + f) if o + f > 0 else NAN for o, f in zip(ok, failed, strict=True)]
    low, high = agresti_caffo(ok, failed, confidence)
    add(
        "success_rate",
        rates[0],
        rates[1],
        low,
        high,
        "Agresti-Caffo over requests",
        *(o + f for o, f in zip(ok, failed, strict=True)),
    )
    hit_a, hit_b, low, high, method = hit_rate_difference(la, lb, lanes, confidence, n_resamples, rng)
    add("prefix_hit_rate", hit_a, hit_b, low, high, method, len(lanes[0]), len(lanes[1]))
    return out


def _level_lanes(run: SweepResult, level: pd.Series) -> pd.DataFrame:
    lanes = run.lanes
    if lanes.empty:
        return lanes
    ok = lanes["outcome"] == "ok"
    if "final" in lanes.columns:
        ok &= lanes["final"].fillna(True).astype(bool)
    same = _same(lanes["in_flight"], level["in_flight"]) & _same(lanes["rate_rps"], level["rate_rps"])
    return lanes[ok & same]


def _level_repeats(run: SweepResult, level: pd.Series, key: str) -> pd.DataFrame:
    runs = run.runs
    if runs is None or runs.empty or key not in runs.columns:
        return pd.DataFrame()
    return runs[_same(runs[key], level[key])]


def _same(column: pd.Series, value: Any) -> pd.Series:
    if _nan(value):
        return column.isna()
    return np.isclose(column.astype(float), float(value), rtol=0, atol=1e-9)


def _nan(value: Any) -> bool:
    try:
        return value is None or math.isnan(float(value))
    except (TypeError, ValueError):
        return True

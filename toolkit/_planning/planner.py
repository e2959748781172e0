"""Capacity planner: the cheapest fleets that serve a request rate under TTFT, TPOT and end-to-end SLOs.

For every model x GPU x weight format x backend x tensor-parallel degree that fits, the planner
evaluates a grid of per-replica batch limits ``batch`` (the engine's ``max_num_seqs``: powers of two
up to the cap set by the KV cache, the backend or ``max_batch_grid``, plus the cap itself; 1 for a
single-stream backend) and, for each, finds the fewest replicas that meet every SLO given. So each
configuration contributes one row per batch, which is what the Pareto frontier trades along.

The model of one replica (every step time from :class:`toolkit.CostModel`, every wait from
:func:`toolkit.queue_wait`; no formula for either is re-derived here):

* Each replica is a ``c``-server FIFO queue, ``c = batch`` slots. Requests are spread round robin, so
  a replica sees every ``replicas``-th arrival of the Poisson stream: Erlang inter-arrival times with
  ``ca2 = 1 / replicas``. The service-time variance ``cs2`` is the workload preset.
* Mean service ``S = ttft + output_tokens x tpot``. ``ttft`` is ``CostModel.ttft_ms(prompt,
  cached = hit_rate x prompt)``. The mean ``tpot`` is one decode step,
  ``CostModel.step_ms(n, n x (prompt + output / 2))``, at the batch ``n`` a request sees: itself plus
  the mean number of others in service, ``n = min(c, 1 + lambda_r x S)`` (the M/G/inf count an
  arrival sees), solved by fixed-point iteration from ``n = c``, each iterate an upper bound. With
  more than one slot, other requests' prefills pause decoding: steps stretch by ``1 / (1 - f)``,
  ``f = lambda_r x prefill`` the share of time spent prefilling (vLLM without chunked prefill; an
  upper bound when prefill chunks ride along decode steps, as the simulator schedules them).
* Stable when ``rho = lambda_r x S / c < 1`` (and ``f < 1``); ``utilization`` is that ``rho``.
* Latency columns are at the SLO ``percentile`` ``p``: ``ttft_ms`` = the p-quantile queue wait +
  ``ttft``; ``tpot_ms`` = the decode step at the p-quantile batch (``1 +`` the Poisson p-quantile of
  the others in service, capped at ``c``) plus the p-quantile number of other prefills (Poisson with
  mean ``lambda_r x`` decode time) spread over the output tokens; ``e2e_p{pct}_ms`` =
  ``ttft_ms + q x output_tokens x tpot_ms`` with ``q`` the p-quantile of a request's length over
  its mean (gamma with the workload's ``cs2``: 1 for steady, ``-ln(1 - p)`` for chatbot). Adding
  quantiles errs high: against :func:`toolkit.simulate`, within ~20% for fixed-length requests and
  up to ~50% high for exponential lengths (tests/test_planner.py).

Replicas are found by a vectorised bisection over ``1..max_replicas`` (every check is monotone in
the per-replica load); batch, replicas and every latency are numpy array math over all candidates
at once. Only building one :class:`CostModel` per model x GPU x format x tensor parallel x runtime
reservation (and tabulating its decode step over batch 0..cap) is a Python loop; those, and the
whole candidate grid for a given set of specs and request shape, are cached across calls. Queue waits
come from the array core of :func:`toolkit.queue_wait` (the same formula, no DataFrame per call).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import gammainccinv
from scipy.stats import gamma

from toolkit._args import check_choice, check_int, check_number
from toolkit._data import load_csv
from toolkit._model.catalog import backends as backend_catalog
from toolkit._model.catalog import gpus as gpu_catalog
from toolkit._model.catalog import models as model_catalog
from toolkit._model.catalog import quantizations as quant_catalog
from toolkit._model.catalog import resolve_backend, resolve_gpu, resolve_model, resolve_quant
from toolkit._model.efficiency import TUNABLE_EFFICIENCIES, _calibration_mapping
from toolkit._model.serving import cost_model
from toolkit._queueing.closed_forms import _waits, workload_presets

__all__ = ["plan"]

_CHECKS = ("capacity", "slo_ttft", "slo_tpot", "slo_e2e")
_CONFIG_COLUMNS = {
    "model": object,
    "gpu": object,
    "quant": object,
    "tensor_parallel": int,
    "interconnect_gb_s": float,
    "quality": float,
}


@lru_cache(maxsize=1)
def _constants() -> dict[str, float]:
    table = load_csv("planner.csv")
    return {str(k): float(v) for k, v in zip(table["parameter"], table["value"])}


@lru_cache(maxsize=1)
def _support() -> dict[str, tuple[frozenset[str], bool]]:
    table = load_csv("backend_support.csv")
    return {
        str(row.backend): (frozenset(str(row.weight_formats).split(";")), str(row.tensor_parallel).lower() == "true")
        for row in table.itertuples()
    }


@lru_cache(maxsize=1)
def _quality_parts() -> tuple[dict[str, float], dict[str, float]]:
    table = load_csv("quality.csv")
    base = {resolve_model(row.model)["name"]: float(row.value) for row in table[table["kind"] == "base"].itertuples()}
    recovery = {
        resolve_quant(row.quant)["name"]: float(row.value) for row in table[table["kind"] == "recovery"].itertuples()
    }
    return base, recovery


def quality_score(model_name: str, quant_name: str) -> float:
    """MMLU (%) of the 16-bit model x the format's measured recovery; NaN when either is unknown."""
    base, recovery = _quality_parts()
    return base.get(model_name, math.nan) * recovery.get(quant_name, math.nan)


def length_quantile(cs2: float, percentile: float) -> float:
    """The ``percentile`` of a request's length relative to its mean: a gamma distribution with mean 1
    and squared coefficient of variation ``cs2`` (1 for ``cs2 = 0``; ``-ln(1 - p)`` for ``cs2 = 1``,
    the exponential lengths of geometric outputs)."""
    return 1.0 if cs2 == 0 else float(gamma.ppf(percentile, 1.0 / cs2, scale=cs2))


@lru_cache(maxsize=64)
def _poisson_thresholds(percentile: float, top: int) -> np.ndarray:
    """Means at which the Poisson ``percentile`` steps up: it is >= k exactly when
    P(X <= k - 1) = Q(k, mean) < percentile, i.e. when mean > gammainccinv(k, percentile)."""
    return gammainccinv(np.arange(1, top + 1), percentile)


def _poisson_quantile(percentile: float, mean: np.ndarray) -> np.ndarray:
    """Smallest k with P(X <= k) >= percentile for X ~ Poisson(mean), vectorised (= scipy's ppf)."""
    high = float(np.max(mean, initial=0.0))
    top = int(2 ** np.ceil(np.log2(high + 10 * np.sqrt(high) + 20)))  # far beyond the quantile
    return np.searchsorted(_poisson_thresholds(percentile, top), mean, side="left").astype(float)


def _specs(argument: str, value: object, catalog, resolve) -> list[dict[str, Any]]:
    if value is None:
        value = list(catalog()["name"])
    elif isinstance(value, pd.DataFrame):  # e.g. a filtered catalog: one spec per row
        value = [row for _, row in value.iterrows()]
    elif isinstance(value, (str, dict, pd.Series)):
        value = [value]
    elif not isinstance(value, Iterable):
        raise ValueError(f"{argument} must be None, a name, a spec or a list of them, got {value!r}")
    specs = [resolve(v) for v in value]
    if not specs:
        raise ValueError(f"{argument} must name at least one entry")
    return specs


def _percentile_label(percentile: float) -> str:
    return f"{100 * percentile:g}"


@dataclass
class _Grid:
    """Candidate arrays (one element per configuration x backend x batch) and per-config tables."""

    cfg: np.ndarray  # index into the per-config arrays
    batch: np.ndarray  # slots c (int)
    cap_reason: np.ndarray  # what caps the batch at its largest value: kv_memory / max_batch
    at_cap: np.ndarray  # batch equals its cap
    backend: np.ndarray  # names
    step_table: np.ndarray  # (configs, max_cap + 1): decode step ms at n = 0..cap sequences
    ttft_ms: np.ndarray  # per config: prefill of the uncached prompt + request overhead
    prefill_ms: np.ndarray  # per config: the prefill alone (GPU time)
    gpu_cost_hour: np.ndarray  # per config: price x tensor parallel
    configs: dict[str, np.ndarray]  # per config: model, gpu, quant, tensor_parallel, interconnect_gb_s, quality


def _freeze(spec: dict[str, Any]) -> tuple:
    """A hashable, equality-stable key for a resolved spec (NaN, which equals nothing, becomes None,
    which the resolvers read back as 'blank')."""
    return tuple(sorted((k, None if isinstance(v, float) and math.isnan(v) else v) for k, v in spec.items()))


# Cost models and their tables are cached across calls: a sweep over request rates, SLOs or
# workloads re-plans the same configurations, and a CostModel is immutable.
@lru_cache(maxsize=16384)
def _cost_model(model: tuple, gpu: tuple, quant: tuple, tp: int, calib: tuple, reserved_gb: float):
    return cost_model(
        dict(model), dict(gpu), dict(quant), tensor_parallel=tp, calibration=dict(calib), reserved_gb=reserved_gb
    )


@lru_cache(maxsize=16384)
def _kv_cap(
    model: tuple, gpu: tuple, quant: tuple, tp: int, calib: tuple, reserved_gb: float, context_tokens: int
) -> int:
    return _cost_model(model, gpu, quant, tp, calib, reserved_gb).max_concurrent_seqs(context_tokens)


@lru_cache(maxsize=16384)
def _tables(
    model: tuple,
    gpu: tuple,
    quant: tuple,
    tp: int,
    calib: tuple,
    reserved_gb: float,
    top: int,
    prompt: int,
    output: int,
    cached: float,
):
    """(decode step ms at 0..top sequences of mean context prompt + output/2, TTFT ms, prefill ms).
    The step time does not depend on the runtime reservation, so any reservation's model serves."""
    cm = _cost_model(model, gpu, quant, tp, calib, reserved_gb)
    n = np.arange(top + 1, dtype=float)
    first = cm.ttft_ms(prompt, cached)
    return cm.step_ms(n, n * (prompt + output / 2)), first, first - cm.request_overhead_ms


def _calibration_key(calibration: object) -> tuple:
    """The calibration's efficiencies as a hashable key for the cost-model caches."""
    mapping = _calibration_mapping(calibration)
    return tuple(sorted((k, float(mapping[k])) for k in TUNABLE_EFFICIENCIES if k in mapping and pd.notna(mapping[k])))


@lru_cache(maxsize=1024)
def _batch_grid(cap: int) -> np.ndarray:
    powers = 2 ** np.arange(int(math.log2(cap)) + 1)
    return np.unique(np.append(powers, cap))


def _thaw(frozen: tuple) -> dict[str, Any]:
    """The spec dict back from :func:`_freeze`, blanks as NaN again."""
    return {k: math.nan if v is None else v for k, v in frozen}


# The grid does not depend on the rate, the SLOs, the percentile, the workload or the budget, so a
# sweep over those re-uses it; its arrays are read-only.
@lru_cache(maxsize=32)
def _build_grid(
    models: tuple,
    gpus: tuple,
    quants: tuple,
    backends: tuple,
    tensor_parallel: tuple,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: float,
    calib: tuple,
    grid_max: int,
) -> _Grid:
    """Loop over the few (model, GPU, format, TP) combinations (frozen specs) to build their cost
    models and tables."""
    support = _support()
    context = prompt_tokens + output_tokens
    entries = []  # (config index, backend name, batch cap, what caps it), one per config x backend
    tables, ttft, prefill, cost_hour, rows = [], [], [], [], []  # rows: per config, its _CONFIG_COLUMNS
    gpu_specs = [(fg, _thaw(fg)) for fg in gpus]
    quant_specs = [(fq, _thaw(fq)) for fq in quants]
    backend_specs = [_thaw(fb) for fb in backends]
    for fm in models:
        m = _thaw(fm)
        if not (math.isnan(m["max_context"]) or context <= m["max_context"]):
            continue
        for fg, g in gpu_specs:
            for fq, q in quant_specs:
                usable = [b for b in backend_specs if q["name"] in support.get(b["name"], (frozenset(), False))[0]]
                for tp in tensor_parallel:
                    if m["attention_heads"] % tp or (tp > 1 and not g["interconnect_gb_s"] > 0):
                        continue
                    tp_backends = [b for b in usable if tp == 1 or support[b["name"]][1]]
                    specs = (fm, fg, fq, tp, calib)
                    caps = []
                    for b in tp_backends:
                        kv_cap = _kv_cap(*specs, b["reserved_gb"], context)
                        limit = b["max_batch"] if b["continuous_batching"] else 1
                        limit = min(grid_max, grid_max if math.isnan(limit) else int(limit))
                        if kv_cap >= 1:
                            caps.append((b, min(kv_cap, limit), "kv_memory" if kv_cap < limit else "max_batch"))
                    if not caps:
                        continue
                    index = len(rows)
                    step, first, alone = _tables(
                        *specs,
                        caps[0][0]["reserved_gb"],
                        max(c for _, c, _ in caps),
                        prompt_tokens,
                        output_tokens,
                        cached_tokens,
                    )
                    tables.append(step)
                    ttft.append(first)
                    prefill.append(alone)
                    cost_hour.append(g["price_usd_hour"] * tp)
                    rows.append(
                        (
                            m["name"],
                            g["name"],
                            q["name"],
                            tp,
                            g["interconnect_gb_s"],
                            quality_score(m["name"], q["name"]),
                        )
                    )
                    entries.extend((index, b["name"], cap, why) for b, cap, why in caps)
    width = max((t.size for t in tables), default=1)
    table = np.full((len(tables), width), np.nan)
    for i, t in enumerate(tables):
        table[i, : t.size] = t
    grids = [_batch_grid(cap) for _, _, cap, _ in entries]
    sizes = [grid.size for grid in grids]
    per_entry = lambda k, dtype: np.repeat(np.array([e[k] for e in entries], dtype=dtype), sizes)
    batch = np.concatenate(grids) if grids else np.array([], dtype=int)
    grid = _Grid(
        cfg=per_entry(0, int),
        batch=batch,
        cap_reason=per_entry(3, object),
        at_cap=batch == per_entry(2, int),
        backend=per_entry(1, object),
        step_table=table,
        ttft_ms=np.array(ttft, dtype=float),
        prefill_ms=np.array(prefill, dtype=float),
        gpu_cost_hour=np.array(cost_hour, dtype=float),
        configs={
            name: np.array([r[i] for r in rows], dtype=dtype) for i, (name, dtype) in enumerate(_CONFIG_COLUMNS.items())
        },
    )
    for value in (*vars(grid).values(), *grid.configs.values()):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return grid


class _Evaluator:
    """Latency, utilisation and the SLO checks of candidates at given replica counts (array math)."""

    def __init__(self, grid: _Grid, request_rate, output_tokens, cs2, percentile, slos, iterations):
        self.g = grid
        self.rate = request_rate
        self.output = output_tokens
        self.cs2 = cs2
        self.percentile = percentile
        self.slos = slos
        self.iterations = iterations
        self.long_output = output_tokens * length_quantile(cs2, percentile)
        self._flat = grid.step_table.ravel()
        self._row_start = grid.cfg * grid.step_table.shape[1]  # per candidate: its row in _flat

    def _step(self, idx: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Decode step (ms) at a fractional batch, linear between the tabulated whole batches."""
        return self._interpolate(self._row_start[idx], self.g.batch[idx], n)

    def _interpolate(self, row_start: np.ndarray, cap: np.ndarray, n: np.ndarray) -> np.ndarray:
        lo = np.floor(n).astype(int)
        below = self._flat[row_start + lo]
        return below + (n - lo) * (self._flat[row_start + np.minimum(lo + 1, cap)] - below)

    def latency(self, idx: np.ndarray, replicas: np.ndarray, *, iterations: int | None = None) -> dict[str, np.ndarray]:
        g, cfg = self.g, self.g.cfg[idx]
        c = g.batch[idx].astype(float)
        lam = self.rate / replicas
        paused = np.where(c > 1, lam * g.prefill_ms[cfg] / 1e3, 0.0)  # share of time prefilling others
        stretch = np.where(paused < 1, 1.0 / np.maximum(1.0 - paused, 1e-300), np.inf)
        first = g.ttft_ms[cfg]
        n = self._implied_batch(idx, c, lam, first, stretch, self.iterations if iterations is None else iterations)
        tpot = self._step(idx, n) * stretch
        service_s = (first + self.output * tpot) / 1e3
        utilization = lam * service_s / c
        return {
            "lam": lam,
            "c": c,
            "tpot_ms": tpot,
            "stretch": stretch,
            "service_s": service_s,
            "utilization": utilization,
            "stable": np.isfinite(service_s) & (utilization < 1.0),
        }

    def _implied_batch(self, idx, c, lam, first, stretch, iterations: int) -> np.ndarray:
        """``iterations`` steps of n <- min(c, 1 + lambda_r x S(n)) from n = c. An element whose iterate
        repeats exactly is at its fixed point and would only repeat it, so it leaves the loop: the
        same result as iterating every element the full count."""
        n = c.copy()
        live = np.arange(idx.size)
        x_n, x_c, x_lam, x_first, x_stretch = n.copy(), c, lam, first, stretch
        x_start, x_cap = self._row_start[idx], self.g.batch[idx]
        for _ in range(iterations):
            service_s = (x_first + self.output * self._interpolate(x_start, x_cap, x_n) * x_stretch) / 1e3
            new = np.minimum(x_c, 1.0 + x_lam * service_s)
            moved = new != x_n
            x_n = new
            if moved.all():
                continue
            n[live] = x_n
            live, x_n, x_c, x_lam, x_first, x_stretch, x_start, x_cap = (
                v[moved] for v in (live, x_n, x_c, x_lam, x_first, x_stretch, x_start, x_cap)
            )
            if not live.size:
                break
        n[live] = x_n
        return n

    def evaluate(self, idx: np.ndarray, replicas: np.ndarray) -> dict[str, np.ndarray]:
        out = self.latency(idx, replicas)
        cfg, stable = self.g.cfg[idx], out["stable"]
        wait = np.full(idx.size, np.inf)
        if stable.any():
            wait[stable] = self._wait(
                out["lam"][stable], out["service_s"][stable], out["c"][stable], 1.0 / replicas[stable]
            )
        out["mean_tpot_ms"] = out.pop("tpot_ms")
        out["tpot_ms"] = np.where(stable, self._tail_tpot(idx, out), np.inf)
        out["ttft_ms"] = wait * 1e3 + self.g.ttft_ms[cfg]
        out["e2e_ms"] = out["ttft_ms"] + self.long_output * out["tpot_ms"]
        out["capacity"] = stable
        for name, column in (("slo_ttft", "ttft_ms"), ("slo_tpot", "tpot_ms"), ("slo_e2e", "e2e_ms")):
            limit = self.slos[name]
            out[name] = stable if limit is None else stable & (out[column] <= limit)
        out["meets"] = out["slo_ttft"] & out["slo_tpot"] & out["slo_e2e"]
        return out

    def _tail_tpot(self, idx: np.ndarray, out: dict[str, np.ndarray]) -> np.ndarray:
        """TPOT (ms) of a request at the latency percentile: it decodes beside the percentile number
        of others (Poisson with mean lambda_r x S, the M/G/inf count, capped by the batch) and is
        paused by the percentile number of other requests' prefills during its decode (Poisson with
        mean lambda_r x decode time). Single-slot replicas see neither."""
        c, lam = out["c"], out["lam"]
        multi = c > 1
        stable = out["stable"]
        others = _poisson_quantile(self.percentile, np.where(multi & stable, lam * out["service_s"], 0.0))
        step = self._step(idx, np.minimum(c, 1.0 + others))
        decode_s = self.output * step * np.where(stable, out["stretch"], 1.0) / 1e3
        pauses = _poisson_quantile(self.percentile, np.where(multi & stable, lam * decode_s, 0.0))
        return step + pauses * self.g.prefill_ms[self.g.cfg[idx]] / self.output

    def _wait(self, lam: np.ndarray, service_s: np.ndarray, servers: np.ndarray, ca2: np.ndarray) -> np.ndarray:
        """Percentile queue wait (s): the closed form of :func:`toolkit.queue_wait`, through its array
        core (the planner's inputs are valid by construction and it words the high-variance warning
        itself)."""
        return _waits(lam, service_s, servers, ca2, self.cs2, (self.percentile,))["waits"][0]


def _holds(ev: _Evaluator, idx: np.ndarray, replicas: np.ndarray, key: str) -> np.ndarray:
    if key == "capacity":
        # Stable exactly when the full batch drains faster than it fills, lambda_r x S(c) < c: then the
        # fixed point lies below c; otherwise c itself is the fixed point. No iteration, no queue wait.
        return ev.latency(idx, replicas, iterations=0)["stable"]
    return ev.evaluate(idx, replicas)[key]


def _fewest_replicas(ev: _Evaluator, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, key: str) -> np.ndarray:
    """Smallest replicas in (lo, hi] where ``key`` holds, given that it fails at ``lo`` and holds at
    ``hi``: a vectorised bisection (every check is monotone in the per-replica load)."""
    lo, hi = lo.copy(), hi.copy()
    active = np.flatnonzero(hi - lo > 1)
    while active.size:
        mid = (lo[active] + hi[active]) // 2
        ok = _holds(ev, idx[active], mid, key)
        hi[active] = np.where(ok, mid, hi[active])
        lo[active] = np.where(ok, lo[active], mid)
        active = active[hi[active] - lo[active] > 1]
    return hi


def _search(ev: _Evaluator, n: int, max_replicas: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(fewest replicas keeping the queue stable, fewest meeting every SLO, 0 where none up to
    ``max_replicas`` does; the evaluation at the fewest stable replicas of the candidates stable at
    all). Most candidates meet the SLOs as soon as they are stable, so the SLO search starts there
    and only the rest are bisected further."""
    idx = np.arange(n)
    top = np.full(n, max_replicas)
    stable_top = _holds(ev, idx, top, "capacity")
    stable = np.zeros(n, dtype=int)
    stable[stable_top] = _fewest_replicas(
        ev, idx[stable_top], np.zeros(stable_top.sum(), dtype=int), top[stable_top], "capacity"
    )
    meets = np.zeros(n, dtype=int)
    first = np.flatnonzero(stable > 0)
    at_stable = ev.evaluate(first, stable[first])
    meets[first[at_stable["meets"]]] = stable[first[at_stable["meets"]]]
    rest = first[~at_stable["meets"] & (stable[first] < max_replicas)]
    rest = rest[_holds(ev, rest, top[rest], "meets")]
    meets[rest] = _fewest_replicas(ev, rest, stable[rest], top[rest], "meets")
    return stable, meets, at_stable


def _headroom(ev: _Evaluator, at: dict[str, np.ndarray], cost: np.ndarray, budget: float | None) -> np.ndarray:
    """Name of the constraint with the least relative headroom (for plans that need no extra replica)."""
    names = ["capacity"]
    room = [1.0 - at["utilization"]]
    for name, column in (("slo_ttft", "ttft_ms"), ("slo_tpot", "tpot_ms"), ("slo_e2e", "e2e_ms")):
        if ev.slos[name] is not None:
            names.append(name)
            room.append(1.0 - at[column] / ev.slos[name])
    if budget is not None:
        names.append("budget")
        room.append(1.0 - cost / budget)
    return np.array(names, dtype=object)[np.argmin(np.vstack(room), axis=0)]


def _first_failure(at: dict[str, np.ndarray]) -> np.ndarray:
    failed = np.vstack([~at[name] for name in _CHECKS])
    return np.array(_CHECKS, dtype=object)[np.argmax(failed, axis=0)]


def plan(
    request_rate: float,
    prompt_tokens: int,
    output_tokens: int,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_e2e_ms: float | None = None,
    percentile: float = 0.95,
    models: object = None,
    gpus: object = None,
    quants: object = None,
    backends: object = None,
    tensor_parallel: Iterable[int] = (1, 2, 4, 8),
    max_replicas: int = 64,
    workload: str = "chatbot",
    prefix_cache_hit_rate: float = 0.0,
    budget_usd_month: float | None = None,
    calibration: object = None,
) -> pd.DataFrame:
    """Every fleet that can serve ``request_rate`` requests/s, with its latency, cost and SLO verdict.

    See the module docstring for the queueing and batching model. Each model x GPU x format x backend
    x tensor-parallel combination that fits contributes one row per batch of its batch grid, with the
    fewest replicas that meet every SLO given (or, where no count up to ``max_replicas`` does, the
    fewest that keep the queue stable, flagged ``meets_slo=False``). Combinations that cannot be
    stable even with ``max_replicas`` replicas are left out.

    Parameters
    ----------
    request_rate : float
        Arrival rate of the whole fleet, requests per second (> 0).
    prompt_tokens, output_tokens : int
        Tokens per request in and out (>= 1).
    slo_ttft_ms, slo_tpot_ms, slo_e2e_ms : float, optional
        Targets for the time to first token, the time per output token and the end-to-end latency,
        each at ``percentile``, in ms (> 0); None leaves that latency unconstrained.
    percentile : float
        Quantile of the latency SLOs, in (0, 1); names the ``e2e_p{100 x percentile}_ms`` column.
    models, gpus, quants, backends : name, spec or list of them, optional
        Candidates; None takes the whole catalog (``toolkit.models()``, ``gpus()``,
        ``quantizations()``, ``backends()``). Backends only meet the formats they load
        (``data/backend_support.csv``).
    tensor_parallel : iterable of int
        Tensor-parallel degrees to try (each 1..64). Used where it divides the model's attention
        heads, the GPU has an interconnect figure, and the backend shards models.
    max_replicas : int
        Most replicas considered per candidate (1..100000).
    workload : str
        Service-time variance preset of :func:`toolkit.workload_presets` (steady, chatbot, bursty, agent).
    prefix_cache_hit_rate : float
        Fraction of each prompt served from the prefix cache, in [0, 1).
    budget_usd_month : float, optional
        Monthly budget in USD (> 0); dearer plans get ``meets_slo=False``, binding ``budget``.
    calibration : dict, Series or one-row DataFrame, optional
        Efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``) replacing the
        defaults of the serving model, e.g. the row :func:`toolkit.calibrate` returns.

    Returns
    -------
    pandas.DataFrame
        One row per candidate, cheapest first among those meeting the SLOs: ``model``, ``gpu``,
        ``quant``, ``backend``, ``tensor_parallel`` (GPUs per replica), ``replicas``, ``batch``
        (concurrent sequences allowed per replica), ``utilization`` (mean busy slots / batch, 0-1),
        ``ttft_ms`` (queue wait at the percentile + prefill, ms), ``tpot_ms`` (time per output token
        at the percentile batch and prefill interruptions, ms), ``e2e_p{pct}_ms`` (``ttft_ms + q x
        output_tokens x tpot_ms``, ``q`` the percentile request length over the mean for the
        workload: 1 for steady; ms),
        ``cost_usd_month`` (price x tensor_parallel x replicas x ``hours_per_month``),
        ``cost_usd_per_1m_tokens`` (USD per million output tokens at the planned load),
        ``quality`` (MMLU % x format recovery, NaN when unknown), ``meets_slo`` (bool: stable, every
        SLO met, within budget), ``binding_constraint`` (``capacity``, ``kv_memory``,
        ``max_batch``, ``slo_ttft``, ``slo_tpot``, ``slo_e2e`` or ``budget``: for plans that need
        more than one replica the constraint the plan with one replica fewer breaks, with
        ``kv_memory`` / ``max_batch`` when capacity fails at the largest batch those allow; for
        single-replica plans the constraint with the least relative headroom; for failing plans the
        first one broken), ``warnings`` (``"; "``-separated).
    """
    rate = check_number("request_rate", request_rate, low=0, low_inclusive=False)
    prompt = check_int("prompt_tokens", prompt_tokens, low=1)
    output = check_int("output_tokens", output_tokens, low=1)
    slos = {
        name: None if value is None else check_number(f"{name}_ms", value, low=0, low_inclusive=False)
        for name, value in (("slo_ttft", slo_ttft_ms), ("slo_tpot", slo_tpot_ms), ("slo_e2e", slo_e2e_ms))
    }
    pct = check_number("percentile", percentile, low=0, high=1, low_inclusive=False, high_inclusive=False)
    if isinstance(tensor_parallel, (int, np.integer)):
        tensor_parallel = (tensor_parallel,)
    tps = sorted({check_int("tensor_parallel", tp, low=1, high=64) for tp in tensor_parallel})
    if not tps:
        raise ValueError("tensor_parallel must list at least one degree (1..64)")
    replicas_max = check_int("max_replicas", max_replicas, low=1, high=100_000)
    presets = workload_presets().set_index("preset")
    check_choice("workload", workload, tuple(presets.index))
    cs2 = float(presets.loc[workload, "cs2"])
    underestimated = str(presets.loc[workload, "tail_underestimated"]).lower() == "true"
    hit = check_number("prefix_cache_hit_rate", prefix_cache_hit_rate, low=0, high=1, high_inclusive=False)
    budget = (
        None
        if budget_usd_month is None
        else check_number("budget_usd_month", budget_usd_month, low=0, low_inclusive=False)
    )

    frozen = lambda *args: tuple(_freeze(spec) for spec in _specs(*args))
    grid = _build_grid(
        frozen("models", models, model_catalog, resolve_model),
        frozen("gpus", gpus, gpu_catalog, resolve_gpu),
        frozen("quants", quants, quant_catalog, resolve_quant),
        frozen("backends", backends, backend_catalog, resolve_backend),
        tuple(tps),
        prompt,
        output,
        hit * prompt,
        _calibration_key(calibration),
        int(_constants()["max_batch_grid"]),
    )
    const = _constants()
    ev = _Evaluator(grid, rate, output, cs2, pct, slos, int(const["implied_batch_iterations"]))
    n = grid.batch.size

    stable_at, meeting, at = _search(ev, n, replicas_max)
    keep = stable_at > 0
    replicas = np.where(meeting > 0, meeting, stable_at)[keep]
    idx = np.flatnonzero(keep)
    # Only candidates that needed more replicas than the fewest stable are evaluated again.
    moved = np.flatnonzero(replicas != stable_at[keep])
    if moved.size:
        again = ev.evaluate(idx[moved], replicas[moved])
        for key, value in again.items():
            at[key][moved] = value
    cfg = grid.cfg[idx]
    hours = const["hours_per_month"]
    cost = grid.gpu_cost_hour[cfg] * replicas * hours
    per_1m = grid.gpu_cost_hour[cfg] / (at["lam"] * output * 3600.0) * 1e6
    within = np.ones(idx.size, dtype=bool) if budget is None else cost <= budget
    meets = at["meets"] & within

    binding = np.where(at["meets"], _headroom(ev, at, cost, budget), _first_failure(at))
    binding = np.where(at["meets"] & ~within, "budget", binding)
    more = np.flatnonzero(at["meets"] & (replicas > 1))
    if more.size:
        fewer = ev.evaluate(idx[more], replicas[more] - 1)
        broke = _first_failure(fewer)
        capped = (broke == "capacity") & grid.at_cap[idx[more]]
        binding[more] = np.where(capped, grid.cap_reason[idx[more]], broke)
        binding[more] = np.where(within[more], binding[more], "budget")

    columns = {name: grid.configs[name][cfg] for name in ("model", "gpu", "quant")}
    columns.update(
        {
            "backend": grid.backend[idx],
            "tensor_parallel": grid.configs["tensor_parallel"][cfg],
            "replicas": replicas,
            "batch": grid.batch[idx],
            "utilization": at["utilization"],
            "ttft_ms": at["ttft_ms"],
            "tpot_ms": at["tpot_ms"],
            f"e2e_p{_percentile_label(pct)}_ms": at["e2e_ms"],
            "cost_usd_month": cost,
            "cost_usd_per_1m_tokens": per_1m,
            "quality": grid.configs["quality"][cfg],
            "meets_slo": meets,
            "binding_constraint": binding.astype(str),
        }
    )
    columns["warnings"] = _warnings(
        columns, grid.configs["interconnect_gb_s"][cfg], workload, cs2, underestimated, const
    )
    order = np.lexsort((at["e2e_ms"], cost, ~meets))
    return pd.DataFrame({name: column[order] for name, column in columns.items()})


def _warnings(
    out: dict[str, np.ndarray], interconnect: np.ndarray, workload: str, cs2: float, underestimated: bool, const: dict
) -> np.ndarray:
    """One '; '-joined string per row: each row's set of warnings is coded as a bit pattern, and each
    pattern that occurs is joined once."""
    rows = out["utilization"].size
    util = out["utilization"]
    pcie = (out["tensor_parallel"] > 1) & (interconnect <= const["pcie_interconnect_gb_s"])
    checks = [
        (
            np.full(rows, underestimated),
            f"high service-time variance ({workload}, cs2={cs2:g}): the closed-form wait under-estimates the "
            "tail at this variance (workload_presets()); validate with simulate() or a load test",
        ),
        (
            util > const["utilization_warning"],
            f"utilization above {const['utilization_warning']:g}: little headroom for load spikes",
        ),
        (np.isnan(out["quality"]), "quality unknown (no published score for this model and format)"),
        (pcie, "tensor parallel over PCIe: all-reduces are slow without NVLink"),
        (np.isnan(out["cost_usd_month"]), "price unknown for this GPU"),
    ]
    code = np.zeros(rows, dtype=np.int64)
    for bit, (mask, _) in enumerate(checks):
        code |= mask.astype(np.int64) << bit
    patterns, inverse = np.unique(code, return_inverse=True)
    joined = np.array(
        ["; ".join(message for bit, (_, message) in enumerate(checks) if pattern >> bit & 1) for pattern in patterns],
        dtype=object,
    )
    return joined[inverse] if rows else np.array([], dtype=object)


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``plan`` subcommand: ``python -m toolkit plan --rate 3 --prompt-tokens 512 ...``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``add_subparsers()`` object of the toolkit's command line.

    Returns
    -------
    None
        The subparser's ``func`` prints the plans (or their Pareto frontier) and returns 0.
    """
    p = subparsers.add_parser("plan", help="cheapest fleets meeting a request rate under latency SLOs")
    p.add_argument("--rate", type=float, required=True, help="requests per second")
    p.add_argument("--prompt-tokens", type=int, required=True)
    p.add_argument("--output-tokens", type=int, required=True)
    p.add_argument("--slo-ttft-ms", type=float)
    p.add_argument("--slo-tpot-ms", type=float)
    p.add_argument("--slo-e2e-ms", type=float)
    p.add_argument("--percentile", type=float, default=0.95)
    p.add_argument("--model", action="append", dest="models", help="repeatable; default: whole catalog")
    p.add_argument("--gpu", action="append", dest="gpus")
    p.add_argument("--quant", action="append", dest="quants")
    p.add_argument("--backend", action="append", dest="backends")
    p.add_argument("--tensor-parallel", type=int, action="append", help="repeatable; default 1 2 4 8")
    p.add_argument("--max-replicas", type=int, default=64)
    p.add_argument("--workload", default="chatbot")
    p.add_argument("--prefix-cache-hit-rate", type=float, default=0.0)
    p.add_argument("--budget-usd-month", type=float)
    p.add_argument("--pareto", action="store_true", help="show only the Pareto frontier of plans meeting the SLOs")
    p.add_argument("--all", action="store_true", help="include plans that miss the SLOs")
    p.add_argument("--top", type=int, default=20, help="groups of rows to print (table output)")
    p.add_argument("--json", action="store_true", help="JSON records instead of a table")
    p.set_defaults(func=_run_cli)


def _run_cli(args: argparse.Namespace) -> int:
    from toolkit._planning.pareto import pareto

    table = plan(
        args.rate,
        args.prompt_tokens,
        args.output_tokens,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        slo_e2e_ms=args.slo_e2e_ms,
        percentile=args.percentile,
        models=args.models,
        gpus=args.gpus,
        quants=args.quants,
        backends=args.backends,
        tensor_parallel=args.tensor_parallel or (1, 2, 4, 8),
        max_replicas=args.max_replicas,
        workload=args.workload,
        prefix_cache_hit_rate=args.prefix_cache_hit_rate,
        budget_usd_month=args.budget_usd_month,
    )
    if not args.all:
        table = table[table["meets_slo"]]
    if args.pareto:
        latency = f"e2e_p{_percentile_label(args.percentile)}_ms"
        table = pareto(table, minimize=("cost_usd_month", latency))
    if args.json:
        print(json.dumps(json.loads(table.to_json(orient="records")), indent=1))
        return 0
    shown = _compact(table)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 40):
        print(shown.head(args.top).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(
        f"{len(table)} plan(s) in {len(shown)} groups of equal latency and cost (backends and batch limits "
        f"that behave alike are merged); showing {min(args.top, len(shown))}; --json lists every row"
    )
    return 0


def _compact(table: pd.DataFrame) -> pd.DataFrame:
    """Merge rows that differ only in backend or batch limit but plan the same latency and cost."""
    merged = {"backend": "backend", "batch": "batch", "utilization": "utilization"}
    keys = [c for c in table.columns if c not in (*merged, "binding_constraint", "warnings")]
    grouped = table.groupby(keys, sort=False, dropna=False)
    out = grouped.agg(
        backend=("backend", lambda s: "|".join(dict.fromkeys(s))),
        batch=("batch", lambda s: str(s.min()) if s.min() == s.max() else f"{s.min()}-{s.max()}"),
        utilization=("utilization", "max"),
    ).reset_index()
    return out[[c for c in table.columns if c in out.columns]]

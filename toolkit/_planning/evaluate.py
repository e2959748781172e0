"""Evaluating the candidate grid as arrays: queue waits, SLO checks and the fewest replicas by a galloping search."""

from __future__ import annotations

import math

import numpy as np

from toolkit._planning.gamma import log_factorial
from toolkit._planning.grid import _Grid
from toolkit._planning.inputs import _CHECKS, _CONSTRAINTS, _poisson_quantile, length_quantile
from toolkit._queueing.closed_forms import _waits
from toolkit._vocab.metrics import LATENCY_METRICS

__all__: list[str] = []


class _Evaluator:
    """Latency, utilisation and the SLO checks of candidates at given replica counts (array math)."""

    def __init__(self, grid: _Grid, arrival_rate, output_tokens, cs2, percentile, slos, iterations, ca2=1.0):
        self.g = grid
        self.ca2 = ca2  # of the whole stream; a replica sees it split round robin
        self.rate = arrival_rate
        self.output = output_tokens
        self.cs2 = cs2
        self.percentile = percentile
        self.slos = slos
        self.iterations = iterations
        self.long_output = output_tokens * length_quantile(cs2, percentile)
        self._row_start = grid.cfg * grid.step_table.shape[1]  # per unit: its row's flat position ...
        self._row_end = self._row_start + grid.batch  # ... and its batch's there
        self._at_batch = self._bracket(np.arange(grid.batch.size), grid.batch.astype(float))

    def _step(self, idx: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Decode step (ms) at a fractional batch, linear between the tabulated whole batches."""
        lo = np.floor(n)
        low, rise = self._bracket(idx, lo)
        return low + (n - lo) * rise

    def _bracket(self, idx: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the decode step at the whole batch ``lo``, its rise to ``lo + 1``, 0 at the unit's batch)."""
        at = self._row_start[idx] + lo.astype(np.intp)
        both = self.g.steps(np.concatenate((at, np.minimum(at + 1, self._row_end[idx]))))
        low = both[: at.size]
        return low, both[at.size :] - low

    def latency(self, idx: np.ndarray, replicas: np.ndarray, *, iterations: int | None = None) -> dict[str, np.ndarray]:
        g = self.g
        c = g.batch[idx].astype(float)
        lam = self.rate / replicas
        paused = np.where(c > 1, lam * g.prefill_ms[idx] / 1e3, 0.0)  # share of time prefilling others
        stretch = np.where(paused < 1, 1.0 / np.maximum(1.0 - paused, 1e-300), np.inf)
        first = g.ttft_ms[idx]
        n, lo, low, rise = self._implied_batch(
            idx, c, lam, first, stretch, self.iterations if iterations is None else iterations
        )
        tpot = (low + (n - lo) * rise) * stretch  # the decode step at n (_step)
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

    def _implied_batch(self, idx, c, lam, first, stretch, iterations: int) -> tuple[np.ndarray, ...]:
        """``iterations`` steps of n <- min(c, 1 + lambda_r x S(n)) from n = c: (n, and its step bracket
        as :meth:`_bracket` gives it: the whole batch below n, the step there, the rise to the next).
        An element whose iterate repeats exactly is at its fixed point and would only repeat it, so it
        may leave the loop: the same result as iterating every element the full count. They leave in
        bulk, once a quarter of those left are done (each leaving gathers every per-element input
        anew). The step table is read only where an iterate crosses to another whole batch: most
        iterates after the first few refine the fraction between the same two."""
        low, rise = (at.take(idx) for at in self._at_batch)
        if not iterations:
            return c, c, low, rise
        out = tuple(np.empty(idx.size) for _ in range(4))
        # the elements still iterated: their positions, iterates and brackets, and inputs
        position, x_n, x_lo, x_low, x_rise = np.arange(idx.size), c, c, low, rise
        inputs = (c, lam, first, stretch, idx)
        for _ in range(iterations):
            x_c, x_lam, x_first, x_stretch, x_idx = inputs
            # 1 + lambda_r x (ttft + output x tpot(n) x stretch) / 1e3, in place, in that order of operations
            new = x_n - x_lo
            new *= x_rise
            new += x_low
            new *= self.output
            new *= x_stretch
            new += x_first
            new /= 1e3
            new *= x_lam
            new += 1.0
            np.minimum(x_c, new, out=new)
            moving = new != x_n
            x_n, lo = new, np.floor(new)
            crossed = np.flatnonzero(lo != x_lo)
            x_lo = lo
            if crossed.size:
                x_low[crossed], x_rise[crossed] = self._bracket(x_idx[crossed], lo[crossed])
            left = np.count_nonzero(moving)
            if left > 0.75 * moving.size:
                continue
            done = np.flatnonzero(~moving)
            for o, x in zip(out, (x_n, x_lo, x_low, x_rise)):
                o[position[done]] = x[done]
            if not left:
                return out
            keep = np.flatnonzero(moving)
            position, x_n, x_lo, x_low, x_rise = (x.take(keep) for x in (position, x_n, x_lo, x_low, x_rise))
            inputs = tuple(x.take(keep) for x in inputs)
        for o, x in zip(out, (x_n, x_lo, x_low, x_rise)):
            o[position] = x
        return out

    def evaluate(self, idx: np.ndarray, replicas: np.ndarray) -> dict[str, np.ndarray]:
        out = self.latency(idx, replicas)
        stable = out["stable"]
        wait = np.full(idx.size, np.inf)
        if stable.any():
            wait[stable] = self._wait(
                out["lam"][stable], out["service_s"][stable], out["c"][stable], self.ca2 / replicas[stable]
            )
        out["mean_tpot_ms"] = out.pop("tpot_ms")
        out["tpot_ms"] = np.where(stable, self._tail_tpot(idx, out), np.inf)
        out["ttft_ms"] = wait * 1e3 + self.g.ttft_ms[idx]
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
        return step + pauses * self.g.prefill_ms[idx] / self.output

    def _wait(self, lam: np.ndarray, service_s: np.ndarray, servers: np.ndarray, ca2: np.ndarray) -> np.ndarray:
        """Percentile queue wait (s) of stable queues: the closed form of :func:`toolkit.queue_wait`,
        through its array core (the planner's inputs are valid by construction and it words the
        high-variance warning itself). That wait is 0 wherever the probability of waiting is at most
        ``1 - percentile``; where even an upper bound of it, ``c B / (c - a)`` with the Erlang B
        ``B <= a^c / c!``, is well below that, the wait is 0 without the Erlang recursion, whose cost
        grows with ``c`` (most slots of a large batch are never all busy)."""
        load = lam * service_s
        with np.errstate(divide="ignore"):
            bound = np.log(servers) + servers * np.log(load) - log_factorial(servers) - np.log(servers - load)
        waits = np.zeros(lam.size)
        need = ~(bound < math.log(1.0 - self.percentile) - 1.0)
        if need.any():
            core = _waits(lam[need], service_s[need], servers[need], ca2[need], self.cs2, (self.percentile,))
            waits[need] = core["waits"][0]
        return waits


def _holds(ev: _Evaluator, idx: np.ndarray, replicas: np.ndarray, key: str) -> np.ndarray:
    if key == "capacity":
        # Stable exactly when the full batch drains faster than it fills, lambda_r x S(c) < c: then the
        # fixed point lies below c; otherwise c itself is the fixed point. No iteration, no queue wait.
        return ev.latency(idx, replicas, iterations=0)["stable"]
    return ev.evaluate(idx, replicas)[key]


def _fewest_replicas(
    ev: _Evaluator,
    idx: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    key: str,
    seen: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None,
) -> np.ndarray:
    """Smallest replicas in (lo, hi] where ``key`` holds, given that it fails at ``lo`` and holds at
    ``hi``: a vectorised galloping search (every check is monotone in the per-replica load, so any
    search finds the same count). Most answers lie just above ``lo``, so it probes ``lo + 1``,
    ``lo + 3``, ``lo + 7``, ... until a probe holds, then bisects. ``seen``, for a key of
    :meth:`_Evaluator.evaluate`: its evaluations at ``lo`` and at ``hi`` (the columns they hold), kept
    at the final bounds."""
    lo, hi = lo.copy(), hi.copy()
    step = np.ones(lo.size, dtype=lo.dtype)
    active = np.flatnonzero(hi - lo > 1)
    while active.size:
        mid = np.minimum(lo[active] + step[active], (lo[active] + hi[active]) // 2)
        if seen is None:
            ok = _holds(ev, idx[active], mid, key)
        else:
            out = ev.evaluate(idx[active], mid)
            ok = out[key]
            for at, mask in zip(seen, (~ok, ok)):
                for name, values in at.items():
                    values[active[mask]] = out[name][mask]
        hi[active] = np.where(ok, mid, hi[active])
        lo[active] = np.where(ok, lo[active], mid)
        step[active] = np.where(ok, hi[active], 2 * step[active])  # once a probe holds: bisect
        active = active[hi[active] - lo[active] > 1]
    return hi


# what plans read of an evaluation (see fleet_columns)
_KEPT = ("lam", "utilization", *(f"{metric}_ms" for metric in LATENCY_METRICS), *_CHECKS, "meets")


def _search(
    ev: _Evaluator, n: int, max_replicas: int
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """(fewest replicas keeping the queue stable, 0 where none up to ``max_replicas`` does; fewest
    meeting every SLO, 0 where none does; for the units stable at all, in order: the evaluation at
    the fewest meeting the SLOs, else at the fewest stable, and the code in ``_CONSTRAINTS`` of the
    first check one replica fewer breaks, -1 for one replica). Most candidates meet the SLOs as soon
    as they are stable, so the SLO search starts there and only the rest are searched further."""
    idx = np.arange(n)
    top = np.full(n, max_replicas)
    stable_top = _holds(ev, idx, top, "capacity")
    stable = np.zeros(n, dtype=int)
    stable[stable_top] = _fewest_replicas(
        ev, idx[stable_top], np.zeros(stable_top.sum(), dtype=int), top[stable_top], "capacity"
    )
    meets = np.zeros(n, dtype=int)
    first = np.flatnonzero(stable > 0)
    at = {k: v for k, v in ev.evaluate(first, stable[first]).items() if k in _KEPT}
    meets[first[at["meets"]]] = stable[first[at["meets"]]]
    # one replica fewer than the fewest stable is unstable (capacity, the first check, fails there)
    below = np.where(stable[first] > 1, _CONSTRAINTS.index("capacity"), -1)
    rest = np.flatnonzero(~at["meets"] & (stable[first] < max_replicas))  # positions in first
    at_top = ev.evaluate(first[rest], top[first[rest]])
    reach = at_top["meets"]
    rest = rest[reach]
    seen = ({k: at[k][rest] for k in _CHECKS}, {k: at_top[k][reach] for k in at})
    units = first[rest]
    meets[units] = _fewest_replicas(ev, units, stable[units], top[units], "meets", seen)
    for name, values in seen[1].items():
        at[name][rest] = values
    below[rest] = _first_failure(seen[0])
    return stable, meets, at, below


def _headroom(ev: _Evaluator, at: dict[str, np.ndarray], cost: np.ndarray, budget: float | None) -> np.ndarray:
    """Code in ``_CONSTRAINTS`` of the constraint with the least relative headroom (for plans that need
    no extra replica)."""
    codes = [_CONSTRAINTS.index("capacity")]
    room = [1.0 - at["utilization"]]
    for name, column in (("slo_ttft", "ttft_ms"), ("slo_tpot", "tpot_ms"), ("slo_e2e", "e2e_ms")):
        if ev.slos[name] is not None:
            codes.append(_CONSTRAINTS.index(name))
            room.append(1.0 - at[column] / ev.slos[name])
    if budget is not None:
        codes.append(_CONSTRAINTS.index("budget"))
        room.append(1.0 - cost / budget)
    return np.array(codes)[np.argmin(np.vstack(room), axis=0)]


def _first_failure(at: dict[str, np.ndarray]) -> np.ndarray:
    """Code in ``_CONSTRAINTS`` of the first check in ``_CHECKS`` order that fails (0 when none does)."""
    return np.argmax(np.vstack([~at[name] for name in _CHECKS]), axis=0)

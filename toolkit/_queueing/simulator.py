"""Discrete-event simulator of a continuous-batching LLM server.

The engine is scheduled per iteration, the way vLLM's is. At the start of every step a replica

1. makes room for this step's decode tokens: while the KV cache cannot take one more token for every
   decoding sequence it preempts the most recently admitted running request (recompute: its KV is
   freed and it re-enters the front of the queue; on readmission it prefills prompt plus generated
   tokens again), counting each preemption;
2. spends a token budget of ``max_num_batched_tokens``: one token per decoding sequence, then prompt
   chunks of the requests still prefilling (admission order), then admits waiting requests (FCFS,
   stopping at the first that does not fit) while fewer than ``max_batch`` run, their whole prompt
   fits in the KV cache and budget is left, giving each a chunk;
3. takes the step's duration from ``CostModel.step_ms(decode_seqs, kv_tokens, prefill_tokens,
   prefill_context_tokens)``, the one cost model of the toolkit.

A request whose last prompt chunk is prefilled emits its first token at the end of that step; it
then decodes one token per step until ``output_tokens``. KV is counted in tokens; each running
sequence is also charged ``kv_block_tokens - 1`` tokens of paging slack (its last, partly filled
block).

Speed: between events (an arrival that can be admitted, a prefill chunk, a completion, the KV cache
filling up) the batch does not change, so a whole run of decode steps is advanced at once. Its
duration is the sum of ``step_ms(n, K + i n)`` over the steps, computed in closed form from a
piecewise-linear fit of ``step_ms`` in ``kv_tokens`` (for each batch size ``n``). The fit is exact
wherever ``step_ms`` is piecewise linear in ``kv_tokens``, as the roofline ``max(memory, compute)`` of
linear terms is: each piece is accepted only when 9 probes lie on its chord to 1e-10 relative.
Steps that prefill are computed one call each.
"""

from __future__ import annotations

import heapq
import math
import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._model.efficiency import MAX_BATCH, MAX_TOKENS
from toolkit._model.serving import cost_model
from toolkit._queueing.arrivals import ARRIVALS, inter_arrival_gaps_s

__all__ = ["SimulationResult", "simulate"]

_ROUTING = ("round_robin", "least_loaded", "shared_queue")
_METRICS = ("queue_wait", "ttft", "tpot", "e2e")
_IDLE, _WAKE, _STEP, _RUN = range(4)
# Validation ceilings: the simulator keeps a Python record per request and per replica, so these keep
# one call within memory and minutes.
MAX_REQUESTS = 10**7
MAX_REPLICAS = 10**4


class _Linear:
    """``f(x) = a_j + b_j x`` on integer pieces ``[start_j, start_{j+1})`` covering ``[0, high]``."""

    __slots__ = ("starts", "a", "b")

    def __init__(self, f: Callable[[np.ndarray], np.ndarray], high: int):
        pieces = []
        stack = [(0, max(int(high), 1))]
        while stack:
            lo, hi = stack.pop()
            xs = np.unique(np.concatenate([np.linspace(lo, hi, 9).round(), [lo + 1, hi - 1]]).clip(lo, hi))
            ys = np.asarray(f(xs), dtype=float)
            slope = (ys[-1] - ys[0]) / (hi - lo) if hi > lo else 0.0
            chord = ys[0] + slope * (xs - lo)
            if hi - lo <= 1 or np.allclose(ys, chord, rtol=1e-10, atol=0.0):
                pieces.append((lo, ys[0] - slope * lo, slope))
                continue
            # a kink: split where the end lines cross (exact for one kink), else in the middle
            left, right = ys[1] - ys[0], ys[-1] - ys[-2]
            cut = (lo + hi) // 2
            if left != right:
                cross = (ys[-1] - ys[0] - right * hi + left * lo) / (left - right)
                if lo <= cross < hi:
                    cut = int(math.floor(cross))
            stack += [(cut + 1, hi), (lo, cut)]
        pieces.sort()
        self.starts = [p[0] for p in pieces]
        self.a = [p[1] for p in pieces]
        self.b = [p[2] for p in pieces]

    def __call__(self, x: int) -> float:
        j = bisect_right(self.starts, x) - 1
        return self.a[j] + self.b[j] * x

    def _pieces(self, x0: int, n: int, k: int):
        """Yield (first step, steps, a, b) for the steps ``x0 + n i``, ``i < k``, piece by piece."""
        starts = self.starts
        j = bisect_right(starts, x0) - 1
        i = 0
        while i < k:
            end = k if j + 1 >= len(starts) or n == 0 else min(k, (starts[j + 1] - x0 + n - 1) // n)
            if end > i:
                yield i, end - i, self.a[j], self.b[j]
                i = end
            j += 1

    def series(self, x0: int, n: int, k: int) -> float:
        """``sum(f(x0 + n i) for i in range(k))`` in closed form."""
        starts = self.starts
        j = bisect_right(starts, x0) - 1
        if j + 1 == len(starts) or x0 + n * (k - 1) < starts[j + 1]:  # the usual case: one piece
            b = self.b[j]
            return k * (self.a[j] + b * x0) + b * n * k * (k - 1) / 2
        total = 0.0
        for i, m, a, b in self._pieces(x0, n, k):
            total += m * (a + b * (x0 + n * i)) + b * n * m * (m - 1) / 2
        return total

    def steps_to_reach(self, x0: int, n: int, k: int, target: float) -> int:
        """Smallest ``m`` in [1, k] with ``series(x0, n, m) >= target`` (``k`` if none)."""
        done = 0.0
        for i, m, a, b in self._pieces(x0, n, k):
            first = a + b * (x0 + n * i)
            whole = m * first + b * n * m * (m - 1) / 2
            if done + whole < target:
                done += whole
                continue
            need = target - done
            half = b * n / 2
            lin = first - half
            if half > 0:
                guess = (-lin + math.sqrt(max(lin * lin + 4 * half * need, 0.0))) / (2 * half)
            else:
                guess = need / first if first > 0 else 1.0
            s = min(max(int(math.ceil(guess)), 1), m)

            def part(s: int) -> float:
                return s * first + half * s * (s - 1)

            while s > 1 and part(s - 1) >= need:
                s -= 1
            while s < m and part(s) < need:
                s += 1
            return max(i + s, 1)
        return k


class _Clock:
    """Step durations in seconds from the cost object: mixed steps one call each, decode runs from a
    piecewise-linear fit of ``step_ms`` in ``kv_tokens`` per batch size."""

    def __init__(self, cost: Any, kv_high: int):
        self._step_ms = cost.step_ms
        self._high = kv_high
        self._fits: dict[int, _Linear] = {}

    def _fit(self, n: int) -> _Linear:
        fit = self._fits.get(n)
        if fit is None:
            fit = _Linear(lambda kv: np.asarray(self._step_ms(n, kv), dtype=float) / 1e3, self._high)
            self._fits[n] = fit
        return fit

    def step(self, n: int, kv: int, p: int, c: int) -> float:
        return float(self._step_ms(n, kv, p, c)) / 1e3

    def run(self, n: int, kv: int, k: int) -> float:
        return self._fit(n).series(kv, n, k)

    def steps_to_reach(self, n: int, kv: int, k: int, seconds: float) -> int:
        return self._fit(n).steps_to_reach(kv, n, k, seconds)


class _Replica:
    __slots__ = (
        "index",
        "queue",
        "running",
        "prefill",
        "chunks",
        "heap",
        "steps",
        "n_dec",
        "kv_dec",
        "kv_used",
        "phase",
        "version",
        "t_start",
        "run_steps",
        "busy_s",
    )

    def __init__(self, index: int, queue: deque):
        self.index = index
        self.queue = queue
        self.running: dict[int, bool] = {}  # admission order; value: decoding (True) or prefilling
        self.prefill: deque = deque()  # [request, tokens left to prefill, tokens prefilled]
        self.chunks: list = []
        self.heap: list = []  # (decode step at which it finishes, request, epoch)
        self.steps = 0  # decode steps taken so far
        self.n_dec = 0
        self.kv_dec = 0  # KV tokens of the decoding sequences
        self.kv_used = 0  # every KV token held or reserved, with paging slack
        self.phase = _IDLE
        self.version = 0
        self.t_start = 0.0
        self.run_steps = 0
        self.busy_s = 0.0


class _Engine:
    """The event loop over all replicas; per-request state lives in flat lists indexed by request."""

    run_cap = sys.maxsize  # most decode steps advanced at once; tests set 1 to replay step by step

    def __init__(
        self,
        clock,
        kv_budget,
        slack,
        max_batch,
        token_budget,
        replicas,
        routing,
        overhead_s,
        prompt,
        output,
        arrival,
        closed_loop,
    ):
        self.clock = clock
        self.budget = kv_budget
        self.slack = slack
        self.max_batch = max_batch
        self.token_budget = token_budget
        self.routing = routing
        self.overhead_s = overhead_s
        n = len(prompt)
        self.prompt = [int(x) for x in prompt]
        self.output = [int(x) for x in output]
        self.arrival = [float(x) for x in arrival] if arrival is not None else [math.nan] * n
        nan = math.nan
        self.admit_t = [nan] * n
        self.first_t = [nan] * n
        self.finish_t = [nan] * n
        self.replica_of = [-1] * n
        self.preempted = [0] * n
        self.gen = [0] * n  # tokens generated (for a decoding request: at the step it joined)
        self.joined = [0] * n  # replica decode step at which it joined the decode batch
        self.kv_join = [0] * n
        self.epoch = [0] * n
        central = deque()
        self.central = central
        shared = routing == "shared_queue"
        self.reps = [_Replica(i, central if shared else deque()) for i in range(replicas)]
        self.events: list = []
        self.next_rr = 0
        self.closed_loop = closed_loop
        self.pending = deque()  # requests arrived at the client side, in time order
        self.next_issue = 0
        self.busy_at_window: list[float] = []  # busy seconds per replica when the measured window opens
        self.window_start = 0.0
        self.window_request = 0

    # ---- arrivals and routing -------------------------------------------------------------------
    def _route(self) -> _Replica:
        reps = self.reps
        if self.routing == "least_loaded":
            return min(reps, key=lambda r: (len(r.queue) + len(r.running), r.index))
        r = reps[self.next_rr % len(reps)]
        self.next_rr += 1
        return r

    def _fits(self, r: _Replica, rid: int) -> bool:
        need = self.prompt[rid] + self.gen[rid] + self.slack
        return len(r.running) < self.max_batch and r.kv_used + r.n_dec + need <= self.budget

    def _wake(self, r: _Replica, t: float) -> None:
        r.phase = _WAKE
        r.version += 1
        heapq.heappush(self.events, (t, r.index, r.version))

    def _truncate(self, r: _Replica, t: float) -> None:
        """End the decode run of ``r`` at the first step boundary at or after ``t``."""
        k = self.clock.steps_to_reach(r.n_dec, r.kv_dec, r.run_steps, t - r.t_start)
        if k < r.run_steps:
            r.run_steps = k
            r.version += 1
            end = max(r.t_start + self.clock.run(r.n_dec, r.kv_dec, k), t)
            heapq.heappush(self.events, (end, r.index, r.version))

    def _offer(self, rid: int, t: float, source: _Replica | None = None) -> None:
        """``rid`` joined the central queue: wake the first idle replica, else end the decode run of
        every other replica that could take it, so it looks at the queue at its next step."""
        others = [r for r in self.reps if r is not source]
        for r in others:
            if r.phase == _IDLE:
                self._wake(r, t)
                return
        for r in others:
            if r.phase == _RUN and self._fits(r, rid):
                self._truncate(r, t)

    def _arrive(self, rid: int, t: float) -> None:
        if rid == self.window_request:
            self.window_start = t
            self.busy_at_window = [r.busy_s + (t - r.t_start if r.phase in (_STEP, _RUN) else 0.0) for r in self.reps]
        if self.routing == "shared_queue":
            self.central.append(rid)
            self._offer(rid, t)
            return
        r = self._route()
        r.queue.append(rid)
        if r.phase == _IDLE:
            self._wake(r, t)
        elif r.phase == _RUN and len(r.queue) == 1 and self._fits(r, rid):
            self._truncate(r, t)

    def _issue(self, t: float) -> None:
        """Closed loop: the next client request leaves at ``t``."""
        rid = self.next_issue
        if rid < len(self.prompt):
            self.next_issue += 1
            self.arrival[rid] = t
            self.pending.append(rid)

    # ---- one replica's steps ----------------------------------------------------------------------
    def _preempt(self, r: _Replica, t: float) -> None:
        rid, decoding = r.running.popitem()  # the most recently admitted
        self.preempted[rid] += 1
        if decoding:
            done = r.steps - self.joined[rid]
            kv = self.kv_join[rid] + done
            self.gen[rid] += done
            self.epoch[rid] += 1  # its entry in the heap is now stale
            r.n_dec -= 1
            r.kv_dec -= kv
            r.kv_used -= kv + self.slack
        else:
            for entry in reversed(r.prefill):
                if entry[0] == rid:
                    r.prefill.remove(entry)
                    r.kv_used -= entry[1] + entry[2] + self.slack
                    break
        r.queue.appendleft(rid)
        if r.queue is self.central:
            self._offer(rid, t, source=r)

    def _complete(self, r: _Replica, rid: int, t: float) -> None:
        del r.running[rid]
        self.finish_t[rid] = t
        if self.closed_loop:
            self._issue(t)

    def _finish_decodes(self, r: _Replica, t: float) -> None:
        heap, steps, epoch = r.heap, r.steps, self.epoch
        while heap and heap[0][0] <= steps:
            _, rid, ep = heapq.heappop(heap)
            if ep != epoch[rid]:
                continue
            kv = self.kv_join[rid] + steps - self.joined[rid]
            r.n_dec -= 1
            r.kv_dec -= kv
            r.kv_used -= kv + self.slack
            self.gen[rid] = self.output[rid]
            self._complete(r, rid, t)

    def _end_phase(self, r: _Replica, t: float) -> None:
        if r.phase == _WAKE:
            return
        r.busy_s += t - r.t_start
        if r.phase == _RUN:
            k = r.run_steps
            r.steps += k
            r.kv_dec += r.n_dec * k
            r.kv_used += r.n_dec * k
            self._finish_decodes(r, t)
            return
        r.steps += 1
        r.kv_dec += r.n_dec
        r.kv_used += r.n_dec
        for entry, chunk in r.chunks:
            entry[1] -= chunk
            entry[2] += chunk
        r.chunks = []
        self._finish_decodes(r, t)
        prefill = r.prefill
        while prefill and prefill[0][1] == 0:
            rid, _, kv = prefill.popleft()
            g = self.gen[rid] + 1
            self.gen[rid] = g
            if self.first_t[rid] != self.first_t[rid]:  # NaN: the first token of this request
                self.first_t[rid] = t
            if g >= self.output[rid]:
                r.kv_used -= kv + self.slack
                self._complete(r, rid, t)
                continue
            r.running[rid] = True
            self.joined[rid] = r.steps
            self.kv_join[rid] = kv
            heapq.heappush(r.heap, (r.steps + self.output[rid] - g, rid, self.epoch[rid]))
            r.n_dec += 1
            r.kv_dec += kv

    def _plan(self, r: _Replica, t: float) -> None:
        """Compose and schedule the next step (or run of decode steps) of ``r`` starting at ``t``."""
        budget = self.budget
        while r.kv_used + r.n_dec > budget:
            self._preempt(r, t)
        room = self.token_budget - r.n_dec
        chunks = []
        p_tokens = p_context = 0
        for entry in r.prefill:
            if room <= 0:
                break
            chunk = min(room, entry[1])
            chunks.append((entry, chunk))
            p_tokens += chunk
            p_context += entry[2]
            room -= chunk
        queue, running = r.queue, r.running
        head = queue[0] if queue else None
        prompt, gen, admit_t, slack, max_batch = self.prompt, self.gen, self.admit_t, self.slack, self.max_batch
        while queue and room > 0 and len(running) < max_batch:
            rid = queue[0]
            need = prompt[rid] + gen[rid]
            if r.kv_used + r.n_dec + need + slack > budget:
                break
            queue.popleft()
            running[rid] = False
            r.kv_used += need + slack
            if admit_t[rid] != admit_t[rid]:  # NaN: first admission
                admit_t[rid] = t
            self.replica_of[rid] = r.index
            entry = [rid, need, 0]
            r.prefill.append(entry)
            chunk = min(room, need)
            chunks.append((entry, chunk))
            p_tokens += chunk
            room -= chunk
        if queue is self.central and queue and queue[0] != head:
            self._offer(queue[0], t, source=r)  # a new head another replica may take
        if chunks:
            r.phase = _STEP
            r.chunks = chunks
            dt = self.clock.step(r.n_dec, r.kv_dec, p_tokens, p_context)
        elif r.n_dec:
            heap, epoch = r.heap, self.epoch
            while heap[0][2] != epoch[heap[0][1]]:
                heapq.heappop(heap)
            k = min(heap[0][0] - r.steps, (budget - r.kv_used) // r.n_dec, self.run_cap)
            r.phase = _RUN
            r.run_steps = k
            dt = self.clock.run(r.n_dec, r.kv_dec, k)
        else:
            r.phase = _IDLE
            return
        r.t_start = t
        r.version += 1
        heapq.heappush(self.events, (t + dt, r.index, r.version))

    # ---- the loop -----------------------------------------------------------------------------
    def run(self, order: Sequence[int] | None, concurrency: int | None) -> float:
        overhead = self.overhead_s
        if self.closed_loop:
            for _ in range(min(concurrency, len(self.prompt))):
                self._issue(0.0)
        else:
            self.pending = deque(order)
        pending, events, reps, arrival = self.pending, self.events, self.reps, self.arrival
        inf = math.inf
        now = 0.0
        while True:
            ta = arrival[pending[0]] + overhead if pending else inf
            te = events[0][0] if events else inf
            if ta == inf and te == inf:
                return now
            if ta <= te:
                now = ta
                self._arrive(pending.popleft(), ta)
                continue
            now, index, version = heapq.heappop(events)
            r = reps[index]
            if version != r.version:
                continue
            self._end_phase(r, now)
            self._plan(r, now)


class SimulationResult:
    """The outcome of :func:`simulate`: one row per request and a one-row summary.

    Parameters
    ----------
    requests : pandas.DataFrame
        One row per request (see :func:`simulate`).
    summary : pandas.DataFrame
        One row of aggregate statistics (see :func:`simulate`).
    config : dict
        The resolved simulation settings (load, batching limits, KV budget in tokens, ...).

    Attributes
    ----------
    requests, summary : pandas.DataFrame
    config : dict
    """

    def __init__(self, requests: pd.DataFrame, summary: pd.DataFrame, config: dict):
        self.requests = requests
        self.summary = summary
        self.config = config

    def __repr__(self) -> str:
        s = self.summary.iloc[0]
        return (
            f"SimulationResult({len(self.requests)} requests, {s['throughput_rps']:.3g} req/s, "
            f"ttft p95 {s['ttft_p95_s']:.3g} s, e2e p95 {s['e2e_p95_s']:.3g} s, "
            f"{int(s['preemptions'])} preemptions)"
        )


def _draw_tokens(name: str, spec: object, rng: np.random.Generator, n: int) -> np.ndarray:
    if callable(spec):
        values = np.asarray(spec(rng, n))
        if values.shape != (n,):
            raise ValueError(f"{name}: the callable must return {n} values, got shape {values.shape}")
    elif isinstance(spec, (tuple, list)) and spec and isinstance(spec[0], str):
        kind = spec[0]
        if kind == "geometric" and len(spec) == 2:
            mean = check_number(f"{name} geometric mean", spec[1], low=1, high=MAX_TOKENS)
            values = rng.geometric(1.0 / mean, n)
        elif kind == "lognormal" and len(spec) == 3:
            mean = check_number(f"{name} lognormal mean", spec[1], low=1, high=MAX_TOKENS)
            cv = check_number(f"{name} lognormal cv", spec[2], low=0)
            sigma2 = math.log1p(cv * cv)
            values = np.maximum(np.rint(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)), 1)
        else:
            raise ValueError(
                f"{name} must be an int >= 1, a callable(rng, n), ('geometric', mean) or "
                f"('lognormal', mean, cv); got {spec!r}"
            )
    else:
        return np.full(n, check_int(name, spec, low=1, high=MAX_TOKENS), dtype=np.int64)
    if not (
        np.all(np.isfinite(values))
        and np.all(values == np.round(values))
        and np.all(values >= 1)
        and np.all(values <= MAX_TOKENS)
    ):
        raise ValueError(f"{name} must all be integers (>= 1 and <= {MAX_TOKENS:g})")
    return values.astype(np.int64)


def _trace_columns(trace: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(trace, pd.DataFrame) or len(trace) == 0:
        raise ValueError("trace must be a non-empty DataFrame with arrival_s, prompt_tokens, output_tokens")
    missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(trace.columns)
    if missing:
        raise ValueError(f"trace is missing columns {sorted(missing)}")
    arrival = trace["arrival_s"].to_numpy(dtype=float)
    if not np.all(np.isfinite(arrival)) or np.any(arrival < 0):
        raise ValueError("trace arrival_s must be finite seconds (>= 0)")
    tokens = []
    for col in ("prompt_tokens", "output_tokens"):
        values = trace[col].to_numpy(dtype=float)
        if not (
            np.all(np.isfinite(values))
            and np.all(values == np.round(values))
            and np.all(values >= 1)
            and np.all(values <= MAX_TOKENS)
        ):
            raise ValueError(f"trace {col} must be integers (>= 1 and <= {MAX_TOKENS:g})")
        tokens.append(values.astype(np.int64))
    return arrival, tokens[0], tokens[1]


def _load(rng, prompt_tokens, output_tokens, num_requests, arrival_rate, concurrency, arrivals, ca2, trace):
    """Arrival times (None for a closed loop) and token counts, validated."""
    given = [x is not None for x in (arrival_rate, concurrency, trace)]
    if sum(given) != 1:
        raise ValueError("give exactly one of arrival_rate (open loop), concurrency (closed loop) or trace")
    check_choice("arrivals", arrivals, ARRIVALS)
    burst = check_number("ca2", ca2, low=0, low_inclusive=False)
    if arrivals == "poisson" and burst != 1.0:
        raise ValueError("ca2 applies to arrivals='gamma' only (Poisson inter-arrivals have cv^2 = 1)")
    if trace is not None:
        if prompt_tokens is not None or output_tokens is not None or num_requests is not None:
            raise ValueError("with a trace, prompt_tokens, output_tokens and num_requests must be None")
        arrival, prompt, output = _trace_columns(trace)
        return arrival, prompt, output
    n = check_int("num_requests", num_requests, low=1, high=MAX_REQUESTS)
    if arrival_rate is not None:
        rate = check_number("arrival_rate", arrival_rate, low=0, low_inclusive=False)
        arrival = np.cumsum(inter_arrival_gaps_s(rng, n, rate, arrival=arrivals, cv2=burst))
    else:
        check_int("concurrency", concurrency, low=1)
        arrival = None
    prompt = _draw_tokens("prompt_tokens", prompt_tokens, rng, n)
    output = _draw_tokens("output_tokens", output_tokens, rng, n)
    return arrival, prompt, output


def _cost(cost, model, gpu, quant, tensor_parallel, kv_dtype, calibration, backend, token_budget):
    if cost is None:
        return cost_model(
            model,
            gpu,
            quant,
            tensor_parallel=tensor_parallel,
            kv_dtype=kv_dtype,
            calibration=calibration,
            backend=backend,
            max_num_batched_tokens=token_budget,
        )
    missing = [a for a in ("step_ms", "kv_budget_tokens", "request_overhead_ms") if not hasattr(cost, a)]
    if missing:
        raise ValueError(f"cost must provide step_ms, kv_budget_tokens and request_overhead_ms; missing {missing}")
    return cost


def _percentiles(values: np.ndarray) -> tuple[float, float, float, float]:
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return (math.nan,) * 4
    p50, p95, p99 = np.percentile(finite, [50, 95, 99])
    return float(finite.mean()), float(p50), float(p95), float(p99)


def simulate(
    model: object,
    gpu: object,
    quant: object,
    prompt_tokens: object,
    output_tokens: object,
    num_requests: int | None,
    arrival_rate: float | None = None,
    concurrency: int | None = None,
    max_batch: int = 256,
    max_num_batched_tokens: int = 2048,
    tensor_parallel: int = 1,
    replicas: int = 1,
    seed: int = 0,
    arrivals: str = "poisson",
    ca2: float = 1.0,
    trace: pd.DataFrame | None = None,
    routing: str = "round_robin",
    kv_dtype: object = "fp16",
    calibration: object = None,
    cost: object = None,
    warmup_fraction: float = 0.1,
    backend: object = None,
) -> SimulationResult:
    """Simulate requests through replicas of a continuous-batching LLM server.

    Each replica schedules iteration by iteration like vLLM (see the module docstring): FCFS
    admission bounded by ``max_batch`` and the KV cache, chunked prefill within a per-step token
    budget alongside one decode token per running sequence, recompute preemption when the KV cache
    runs out. Step durations come from :func:`toolkit.cost_model` (``CostModel.step_ms``), the same
    model as ``batching_curve`` and ``ttft_ms``. Each request also pays ``request_overhead_ms``
    (HTTP, tokenisation) before it reaches the engine's queue; it counts in TTFT and end-to-end
    latency but occupies no engine time. Results are reproducible for a given ``seed``.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As for :func:`toolkit.cost_model`; ignored (may be None) when ``cost`` is given.
    prompt_tokens, output_tokens : int, tuple or callable
        Tokens per request: an int (fixed), ``("geometric", mean)`` (1, 2, ... with that mean:
        geometric output lengths make the service time nearly exponential), ``("lognormal", mean,
        cv)`` (rounded, at least 1), or ``callable(rng, n)`` returning ``n`` integers >= 1. Every
        count, and a mean, is at most 10**9. None with a ``trace``.
    num_requests : int
        Requests to simulate (1 to 10**7); None with a ``trace`` (its rows are the requests).
    arrival_rate : float, optional
        Open loop: mean arrival rate in requests per second over all replicas.
    concurrency : int, optional
        Closed loop: this many clients, each sending its next request as soon as the previous one
        completes (all start at time 0).
    max_batch : int
        Most sequences running at once per replica (vLLM ``max_num_seqs``; 1 to 10**6). A backend's
        own cap, when ``backend`` is given, also applies.
    max_num_batched_tokens : int
        Token budget of one step (decode tokens plus prefill chunks; from ``max_batch`` to 10**9).
        It also sizes the activation reserve of the KV budget, so a large one leaves less KV cache.
    tensor_parallel : int
        GPUs per replica.
    replicas : int
        Identical engine replicas (1 to 10**4).
    seed : int
        Seed of the numpy ``Generator`` drawing arrivals and token counts.
    arrivals : {"poisson", "gamma"}
        Open-loop inter-arrival distribution: exponential, or gamma with squared coefficient of
        variation ``ca2``.
    ca2 : float
        cv^2 of gamma inter-arrival times (> 0; 1 is Poisson, larger is burstier). Only with
        ``arrivals="gamma"``.
    trace : pandas.DataFrame, optional
        Open loop from a trace: columns ``arrival_s`` (seconds from start), ``prompt_tokens``,
        ``output_tokens`` (integers, 1 to 10**9); one request per row.
    routing : {"round_robin", "least_loaded", "shared_queue"}
        How requests reach replicas: in turn; to the replica with the fewest requests waiting plus
        running; or held in one central FIFO queue and taken by the first replica with room (c
        replicas of ``max_batch=1`` are then an M/G/c queue).
    kv_dtype : str or spec
        KV-cache format.
    calibration : dict, Series or one-row DataFrame, optional
        Efficiency overrides for the cost model.
    cost : object, optional
        Replaces the cost model: any object with ``step_ms(decode_seqs, kv_tokens, prefill_tokens,
        prefill_context_tokens)`` (ms, numpy-broadcasting), ``kv_budget_tokens`` and
        ``request_overhead_ms`` (optional ``kv_block_tokens``, ``max_batch``). Lets tests inject exact
        service times.
    warmup_fraction : float
        Fraction of the requests (the first ones sent) left out of ``summary`` as warm-up, in [0, 1).
    backend : str or spec, optional
        Serving backend passed to the cost model (its memory reservation and batch cap).

    Returns
    -------
    SimulationResult
        ``.requests``: one row per request, in sending order: ``arrival_s`` (s, when the client sent
        it), ``queue_wait_s`` (s from reaching the engine to first admission), ``ttft_s`` (s to the
        first token, including the request overhead), ``tpot_s`` (s per output token after the
        first; NaN for one-token outputs), ``e2e_s`` (s), ``prompt_tokens``, ``output_tokens``,
        ``replica`` (the replica that finished it), ``preempted`` (times preempted), ``warmup`` (bool).
        ``.summary``: one row with ``requests`` (measured, after warm-up), ``{metric}_mean_s``,
        ``{metric}_p50_s``, ``{metric}_p95_s``, ``{metric}_p99_s`` for queue_wait, ttft, tpot and e2e;
        ``throughput_rps`` and ``output_tok_s`` (measured requests and their output tokens over the
        span from the first measured arrival to the last measured completion), ``achieved_concurrency``
        (mean requests in flight, client side: throughput times mean e2e, by Little's law),
        ``preemptions`` (all requests), ``utilization`` (fraction of the time from the first measured
        request reaching the engine to the end of the simulation that the replicas spent computing
        steps, averaged over replicas), ``kv_budget_tokens`` (per replica).
        ``.config``: the settings used.
    """
    batch = check_int("max_batch", max_batch, low=1, high=MAX_BATCH)
    token_budget = check_int("max_num_batched_tokens", max_num_batched_tokens, low=1, high=MAX_TOKENS)
    if token_budget < batch:
        raise ValueError(
            f"max_num_batched_tokens must be >= max_batch ({batch}) so every running sequence can decode "
            f"each step; got {token_budget}"
        )
    n_replicas = check_int("replicas", replicas, low=1, high=MAX_REPLICAS)
    check_choice("routing", routing, _ROUTING)
    warm = check_number("warmup_fraction", warmup_fraction, low=0, high=1, high_inclusive=False)
    seed = check_int("seed", seed, low=0)
    rng = np.random.default_rng(seed)
    arrival, prompt, output = _load(
        rng, prompt_tokens, output_tokens, num_requests, arrival_rate, concurrency, arrivals, ca2, trace
    )
    cm = _cost(cost, model, gpu, quant, tensor_parallel, kv_dtype, calibration, backend, token_budget)
    kv_budget = int(cm.kv_budget_tokens)
    slack = max(int(getattr(cm, "kv_block_tokens", 1)) - 1, 0)
    cap = getattr(cm, "max_batch", math.inf)
    if cap is not None and math.isfinite(cap):
        batch = min(batch, int(cap))
    largest = int((prompt + output).max()) + slack
    if largest > kv_budget:
        raise ValueError(
            f"prompt_tokens + output_tokens of a request ({largest - slack}) must fit in the KV budget of "
            f"{kv_budget} tokens per replica (model, gpu, quant or tensor_parallel too small, or "
            f"max_num_batched_tokens={token_budget} reserving too much activation memory)"
        )
    overhead_s = float(cm.request_overhead_ms) / 1e3
    n = len(prompt)
    order = None if arrival is None else np.argsort(arrival, kind="stable")
    # requests are numbered in sending order, so warm-up is simply the first ones
    if order is not None:
        arrival, prompt, output = arrival[order], prompt[order], output[order]
    engine = _Engine(
        _Clock(cm, kv_budget),
        kv_budget,
        slack,
        batch,
        token_budget,
        n_replicas,
        routing,
        overhead_s,
        prompt,
        output,
        arrival,
        closed_loop=arrival is None,
    )
    n_warm = int(warm * n)
    engine.window_request = n_warm
    end = engine.run(range(n) if arrival is not None else None, None if concurrency is None else int(concurrency))

    arrival_s = np.array(engine.arrival)
    enter = arrival_s + overhead_s
    first = np.array(engine.first_t)
    finish = np.array(engine.finish_t)
    out_tokens = output.astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (finish - first) / (out_tokens - 1), np.nan)
    requests = pd.DataFrame(
        {
            "arrival_s": arrival_s,
            "queue_wait_s": np.array(engine.admit_t) - enter,
            "ttft_s": first - arrival_s,
            "tpot_s": tpot,
            "e2e_s": finish - arrival_s,
            "prompt_tokens": prompt.astype(np.int64),
            "output_tokens": out_tokens,
            "replica": np.array(engine.replica_of),
            "preempted": np.array(engine.preempted),
            "warmup": np.arange(n) < n_warm,
        }
    )
    measured = requests[~requests["warmup"]]
    t0 = float(measured["arrival_s"].min())
    span = float((measured["arrival_s"] + measured["e2e_s"]).max()) - t0
    summary: dict[str, Any] = {"requests": len(measured)}
    for metric in _METRICS:
        mean, p50, p95, p99 = _percentiles(measured[f"{metric}_s"].to_numpy())
        summary.update(
            {
                f"{metric}_mean_s": mean,
                f"{metric}_p50_s": p50,
                f"{metric}_p95_s": p95,
                f"{metric}_p99_s": p99,
            }
        )
    throughput = len(measured) / span if span > 0 else math.nan
    busy = sum(r.busy_s for r in engine.reps) - sum(engine.busy_at_window)
    window = end - engine.window_start
    summary.update(
        {
            "throughput_rps": throughput,
            "output_tok_s": float(measured["output_tokens"].sum()) / span if span > 0 else math.nan,
            "achieved_concurrency": throughput * summary["e2e_mean_s"],
            "preemptions": int(requests["preempted"].sum()),
            "utilization": busy / (n_replicas * window) if window > 0 else math.nan,
            "kv_budget_tokens": kv_budget,
        }
    )
    config = {
        "arrival_rate": arrival_rate,
        "concurrency": concurrency,
        "arrivals": arrivals,
        "ca2": ca2,
        "max_batch": batch,
        "max_num_batched_tokens": token_budget,
        "replicas": n_replicas,
        "routing": routing,
        "tensor_parallel": tensor_parallel,
        "kv_budget_tokens": kv_budget,
        "request_overhead_ms": cm.request_overhead_ms,
        "seed": seed,
        "warmup_fraction": warm,
    }
    return SimulationResult(requests, pd.DataFrame([summary]), config)

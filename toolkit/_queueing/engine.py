"""The simulator's engine: per-replica iteration scheduling (admission, chunked prefill, preemption) and the event clock.

A hot loop: it is long for speed (no per-event allocation beyond what the schedule needs).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from toolkit._model.cost import CostModel
from toolkit._model.terms import step_time
from toolkit._queueing.piecewise import _Linear

__all__: list[str] = []

# a replica's phase
_IDLE, _WAKE, _STEP, _RUN = range(4)


class _Clock:
    """Step durations in seconds from the cost object: mixed steps one call each, decode runs from a
    piecewise-linear fit of ``step_ms`` in ``kv_tokens`` per batch size. A :class:`CostModel`'s step
    formula is called without its argument checks: the engine's counts are valid by construction."""

    def __init__(self, cost: Any, kv_high: int):
        self._step_ms = partial(step_time, vars(cost)) if isinstance(cost, CostModel) else cost.step_ms
        self._high = kv_high
        self._fits: dict[int, _Linear] = {}

    def _fit(self, n: int) -> _Linear:
        fit = _Linear(lambda kv: np.asarray(self._step_ms(float(n), kv, 0.0, 0.0), dtype=float) / 1e3, self._high)
        self._fits[n] = fit
        return fit

    def step(self, n: int, kv: int, p: int, c: int) -> float:
        return float(self._step_ms(float(n), float(kv), float(p), float(c))) / 1e3

    def run(self, n: int, kv: int, k: int) -> float:
        fit = self._fits.get(n) or self._fit(n)
        return fit.series(kv, n, k)

    def steps_to_reach(self, n: int, kv: int, k: int, seconds: float) -> int:
        fit = self._fits.get(n) or self._fit(n)
        return fit.steps_to_reach(kv, n, k, seconds)


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

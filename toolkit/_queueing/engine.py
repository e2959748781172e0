"""The simulator's engine: per-replica iteration scheduling (admission, chunked prefill, preemption) and the event clock.

A hot loop: it is long for speed (no per-event allocation beyond what the schedule needs).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from typing import Any

import numpy as np

from toolkit._model.cost import CostModel
from toolkit._model.terms import step_formula
from toolkit._queueing.chunking import prefill_chunk
from toolkit._queueing.piecewise import _Linear

__all__: list[str] = []

# a replica's phase
_IDLE, _WAKE, _STEP, _RUN = range(4)
# requests between progress-bar updates (a power of two)
_TICK = 1 << 14
_TICK_MASK = _TICK - 1


class _Clock:
    """Step durations from the cost object: ``step_ms`` of a mixed step (ms, one call each), decode
    runs in seconds from a piecewise-linear fit of ``step_ms`` in ``kv_tokens`` per batch size. A
    :class:`CostModel`'s step formula is bound once and called without its argument checks: the
    engine's counts are valid by construction."""

    def __init__(self, cost: Any, kv_high: int):
        self._step_ms = step_formula(vars(cost))[2] if isinstance(cost, CostModel) else cost.step_ms
        # one step in ms: the engine's counts are Python ints, which the step formula takes as it takes
        # floats (every product stays far below 2**53, so the values are the same)
        self.step_ms = (
            self._step_ms
            if isinstance(cost, CostModel)
            else lambda n, kv, p, c: float(cost.step_ms(float(n), float(kv), float(p), float(c)))
        )
        self._high = kv_high
        self.fits: dict[int, _Linear] = {}  # per batch size, as the engine asks for them

    def fit(self, n: int) -> _Linear:
        """The decode step time (s) of ``n`` sequences against their KV tokens; ``series(kv, n, k)``
        gives a run of ``k`` steps, ``reach(kv, n, k, seconds)`` the fewest of them that last
        ``seconds`` or more and their seconds."""
        fit = _Linear(lambda kv: np.asarray(self._step_ms(float(n), kv, 0.0, 0.0), dtype=float) / 1e3, self._high)
        self.fits[n] = fit
        return fit


class _Replica:
    __slots__ = (
        "index",
        "queue",
        "running",
        "prefill",
        "chunked",
        "heap",
        "steps",
        "n_dec",
        "kv_dec",
        "kv_used",
        "phase",
        "version",
        "t_start",
        "run_steps",
        "fit",
        "busy_s",
    )

    def __init__(self, index: int, queue: deque):
        self.index = index
        self.queue = queue
        self.running: dict[int, bool] = {}  # admission order; value: decoding (True) or prefilling
        # [request, tokens left to prefill, tokens prefilled, this step's chunk]; the chunked entries
        # of a step are always its first ``chunked`` ones
        self.prefill: deque = deque()
        self.chunked = 0
        self.heap: list = []  # (decode step at which it finishes, request, epoch)
        self.steps = 0  # decode steps taken so far
        self.n_dec = 0
        self.kv_dec = 0  # KV tokens of the decoding sequences
        self.kv_used = 0  # every KV token held or reserved, with paging slack
        self.phase = _IDLE
        self.version = 0
        self.t_start = 0.0
        self.run_steps = 0
        self.fit: Any = None  # the step-time fit of the decode run in progress
        self.busy_s = 0.0


class _Engine:
    """The event loop over all replicas. Per-request state lives in preallocated numpy arrays (one
    element per request, in sending order), read and written through memoryviews, which index at
    list speed while keeping 8 bytes or less per value."""

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
        prefill_breaks=(),
        cached=None,
        prefill_starts=(),
    ):
        self.clock = clock
        # offsets from a prompt's end at which the engine ends a prefill chunk (llama-server on a
        # sliding-window model: the last 4 and the last 4 + n_ubatch tokens go in steps of their own)
        self.breaks = tuple(sorted(prefill_breaks, reverse=True))
        # positions from a prompt's start at which the engine ends a prefill chunk (llama-server: the
        # start of the last user message, right after BOS in a one-message chat prompt)
        self.starts = tuple(sorted(prefill_starts))
        self.budget = kv_budget
        self.slack = slack
        self.max_batch = max_batch
        self.token_budget = token_budget
        self.routing = routing
        self.overhead_s = overhead_s
        n = len(prompt)
        self.n = n
        self.prompt = np.ascontiguousarray(prompt, dtype=np.int64)
        self.output = np.ascontiguousarray(output, dtype=np.int64)
        # prompt tokens found in the cache: held in KV, attended to, never prefilled
        self.cached = np.zeros(n, dtype=np.int64) if cached is None else np.ascontiguousarray(cached, dtype=np.int64)
        self.arrival = np.full(n, np.nan) if arrival is None else np.ascontiguousarray(arrival, dtype=float)
        self.admit_t = np.full(n, np.nan)
        self.first_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.replica_of = np.full(n, -1, dtype=np.int32)
        self.preempted = np.zeros(n, dtype=np.int32)
        self.gen = np.zeros(n, dtype=np.int64)  # tokens generated in flight (a decoding one: when it joined)
        self.joined = np.zeros(n, dtype=np.int64)  # replica decode step at which it joined the decode batch
        self.kv_join = np.zeros(n, dtype=np.int64)
        self.epoch = np.zeros(n, dtype=np.int32)
        self._views = {
            name: memoryview(getattr(self, name))
            for name in (
                "prompt",
                "output",
                "cached",
                "arrival",
                "admit_t",
                "first_t",
                "finish_t",
                "replica_of",
                "preempted",
                "gen",
                "joined",
                "kv_join",
                "epoch",
            )
        }
        central = deque()
        self.central = central
        shared = routing == "shared_queue"
        self.reps = [_Replica(i, central if shared else deque()) for i in range(replicas)]
        self.events: list = []
        self.closed_loop = closed_loop
        self.busy_at_window: list[float] = []  # busy seconds per replica when the measured window opens
        self.window_start = 0.0
        self.window_request = 0

    # ---- arrivals and routing -------------------------------------------------------------------
    def _fits(self, r: _Replica, rid: int) -> bool:
        v = self._views
        need = v["prompt"][rid] + v["gen"][rid] + self.slack
        return len(r.running) < self.max_batch and r.kv_used + r.n_dec + need <= self.budget

    def _wake(self, r: _Replica, t: float) -> None:
        r.phase = _WAKE
        r.version += 1
        heapq.heappush(self.events, (t, r.index, r.version))

    def _shorten(self, r: _Replica, t: float) -> float | None:
        """End the decode run of ``r`` at the first step boundary at or after ``t``: its new end, or
        None where that is the run's own end."""
        k, seconds = r.fit.reach(r.kv_dec, r.n_dec, r.run_steps, t - r.t_start)
        if k == r.run_steps:
            return None
        r.run_steps = k
        end = r.t_start + seconds
        return t if t > end else end

    def _truncate(self, r: _Replica, t: float) -> None:
        """:meth:`_shorten` for a replica whose next event is in the event heap."""
        end = self._shorten(r, t)
        if end is not None:
            r.version += 1
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

    def _open_window(self, t: float) -> None:
        """The first measured request arrives: note the time and every replica's busy seconds so far."""
        self.window_start = t
        self.busy_at_window = [r.busy_s + (t - r.t_start if r.phase in (_STEP, _RUN) else 0.0) for r in self.reps]

    # ---- one replica's steps ----------------------------------------------------------------------
    def _preempt(self, r: _Replica, t: float) -> None:
        v = self._views
        rid, decoding = r.running.popitem()  # the most recently admitted
        v["preempted"][rid] += 1
        if decoding:
            done = r.steps - v["joined"][rid]
            kv = v["kv_join"][rid] + done
            v["gen"][rid] += done
            v["epoch"][rid] += 1  # its entry in the heap is now stale
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

    # ---- the loop -----------------------------------------------------------------------------
    def run(self, concurrency: int | None, bar: Any) -> float:
        """Simulate until every request has finished; return the time of the last event (s).
        ``bar.update`` is told of every ``_TICK`` requests reaching the engine.

        One pass of the loop handles one event of the current replica ``r``, whose state it holds in
        locals: it ends the replica's phase (a mixed step, or a run of decode steps: its decodes and
        prefills that finish, first tokens, completions) and plans its next one (preemptions, prefill
        chunks and admissions in the step's token budget, then a mixed step or the longest run of
        decode steps that nothing can interrupt). It is written out inline: it runs once per event.

        With a queue per replica, nothing but an arrival can change what a replica does, and no
        replica reads another's state except at an arrival: so ``r`` goes on with its next event at
        once while that comes before the next arrival. Otherwise the next arrival, or the earliest
        event of another replica (from the event heap, in (time, replica) order), comes first; an
        arrival for ``r`` changes its next event in place, and only when another replica's event
        comes first does ``r``'s go into the heap. (A shared queue is read by every replica: there
        each event goes through the heap.)
        """
        v = self._views
        prompt, output, arrival, admit_t, first_t, finish_t, cached = (
            v[k] for k in ("prompt", "output", "arrival", "admit_t", "first_t", "finish_t", "cached")
        )
        replica_of, gen, joined, kv_join, epoch = (v[k] for k in ("replica_of", "gen", "joined", "kv_join", "epoch"))
        events, reps, clock = self.events, self.reps, self.clock
        step_ms, fits, new_fit = clock.step_ms, clock.fits, clock.fit
        heappush, heappop = heapq.heappush, heapq.heappop
        overhead, budget, slack, max_batch = self.overhead_s, self.budget, self.slack, self.max_batch
        token_budget, run_cap, closed = self.token_budget, self.run_cap, self.closed_loop
        breaks, starts = self.breaks, self.starts
        cut = bool(breaks or starts)
        shared = self.routing == "shared_queue"
        round_robin, next_rr, n_reps = self.routing == "round_robin", 0, len(reps)
        # per replica: requests waiting plus running (with a queue per replica, they change only as
        # requests arrive and complete)
        loads = [0] * n_reps
        window_request = self.window_request
        inf = math.inf
        n = self.n
        # requests next_arrival .. next_issue - 1 have left the client and not yet reached the engine;
        # a closed loop's clients each send one at time 0, the next as the previous one completes
        next_arrival, next_issue = 0, n
        if closed:
            next_issue = min(concurrency, n)
            self.arrival[:next_issue] = 0.0
        ta = arrival[0] + overhead if next_issue else inf  # when the next request reaches the engine
        # the current replica, its state in locals, and the time of its next event (inf: idle)
        r = reps[0]
        index, phase, steps, n_dec, kv_dec, kv_used = r.index, r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used
        heap, running, queue, prefill = r.heap, r.running, r.queue, r.prefill
        end = inf
        # now: the time of the event or arrival in hand; last: the latest time a replica fell idle or
        # a heap entry went stale (a shortened run's former end), which bounds the simulation's end
        now = last = 0.0
        while True:
            if end >= ta or shared:
                # ---- what comes next: the next arrival, r's next event or another replica's
                r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used = phase, steps, n_dec, kv_dec, kv_used
                if phase == _IDLE:
                    if now > last:
                        last = now
                elif shared:
                    r.version += 1
                    heappush(events, (end, index, r.version))
                if shared:
                    end = inf  # r's event is in the heap
                while True:
                    te = events[0][0] if events else inf  # (the entry may be stale: its replica has moved on)
                    if ta <= te and ta <= end:
                        if ta == inf:
                            return max(now, last)
                        now = ta
                        rid = next_arrival
                        next_arrival += 1
                        if not next_arrival & _TICK_MASK:
                            bar.update(_TICK)
                        ta = arrival[next_arrival] + overhead if next_arrival < next_issue else inf
                        if rid == window_request:
                            self._open_window(now)
                        if shared:
                            self.central.append(rid)
                            self._offer(rid, now)
                            continue
                        if round_robin:
                            target = reps[next_rr % n_reps]
                            next_rr += 1
                        else:  # least loaded: the first replica with the fewest requests waiting plus running
                            target = reps[loads.index(min(loads))]
                        loads[target.index] += 1
                        target.queue.append(rid)
                        if target is not r:
                            if target.phase == _IDLE:
                                self._wake(target, now)
                            elif target.phase == _RUN and len(target.queue) == 1 and self._fits(target, rid):
                                self._truncate(target, now)
                        elif phase == _IDLE:
                            r.phase = phase = _WAKE
                            end = now
                        elif phase == _RUN and len(queue) == 1 and self._fits(r, rid):
                            shorter = self._shorten(r, now)
                            if shorter is not None:
                                if end > last:  # where the loop with every event in the heap left a stale entry
                                    last = end
                                end = shorter
                        continue
                    if te < end or (te == end and events[0][1] < index):
                        te, other, version = heappop(events)
                        if version != reps[other].version:  # stale
                            if te > last:
                                last = te
                            continue
                        if end < inf:
                            r.version += 1
                            heappush(events, (end, index, r.version))
                        now, index, r = te, other, reps[other]
                        phase, steps, n_dec, kv_dec, kv_used = r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used
                        heap, running, queue, prefill = r.heap, r.running, r.queue, r.prefill
                    else:
                        now = end
                    break
            else:
                now = end
            # ---- end the phase that just finished
            if phase != _WAKE:
                r.busy_s += now - r.t_start
                if phase == _RUN:
                    k = r.run_steps
                    steps += k
                    kv_dec += n_dec * k
                    kv_used += n_dec * k
                else:
                    steps += 1
                    kv_dec += n_dec
                    kv_used += n_dec
                    for i in range(r.chunked):
                        entry = prefill[i]
                        entry[1] -= entry[3]
                        entry[2] += entry[3]
                completed = 0
                while heap and heap[0][0] <= steps:
                    _, rid, ep = heappop(heap)
                    if ep != epoch[rid]:
                        continue
                    kv = kv_join[rid] + steps - joined[rid]
                    n_dec -= 1
                    kv_dec -= kv
                    kv_used -= kv + slack
                    del running[rid]
                    finish_t[rid] = now
                    completed += 1
                if phase == _STEP:
                    while prefill and prefill[0][1] == 0:
                        rid, _, kv, _ = prefill.popleft()
                        g = gen[rid] + 1
                        gen[rid] = g
                        if g == 1:  # its first token (one preempted while decoding had generated tokens)
                            first_t[rid] = now
                        if g >= output[rid]:
                            kv_used -= kv + slack
                            del running[rid]
                            finish_t[rid] = now
                            completed += 1
                            continue
                        running[rid] = True
                        joined[rid] = steps
                        kv_join[rid] = kv
                        heappush(heap, (steps + output[rid] - g, rid, epoch[rid]))
                        n_dec += 1
                        kv_dec += kv
                if completed:
                    loads[index] -= completed
                    if closed:  # their clients send their next requests now
                        for rid in range(next_issue, min(next_issue + completed, n)):
                            arrival[rid] = now
                            next_issue = rid + 1
                        ta = arrival[next_arrival] + overhead if next_arrival < next_issue else inf

            # ---- plan the next step (or run of decode steps) from now
            if kv_used + n_dec > budget:
                r.steps, r.n_dec, r.kv_dec, r.kv_used = steps, n_dec, kv_dec, kv_used
                while r.kv_used + r.n_dec > budget:
                    self._preempt(r, now)
                n_dec, kv_dec, kv_used = r.n_dec, r.kv_dec, r.kv_used
            room = token_budget - n_dec
            p_tokens = p_context = chunked = 0
            for entry in prefill:
                if room <= 0:
                    break
                # prefill_chunk's rule, written out where there are no breaks (a call per chunk costs)
                if cut:
                    chunk = prefill_chunk(entry[1], room, breaks, entry[2], starts)
                else:
                    chunk = entry[1] if entry[1] < room else room
                entry[3] = chunk
                chunked += 1
                p_tokens += chunk
                p_context += entry[2]
                room -= chunk
            head = queue[0] if shared and queue else None
            while queue and room > 0 and len(running) < max_batch:
                rid = queue[0]
                need = prompt[rid] + gen[rid]
                if kv_used + n_dec + need + slack > budget:
                    break
                queue.popleft()
                running[rid] = False
                kv_used += need + slack
                if admit_t[rid] != admit_t[rid]:  # NaN: first admission
                    admit_t[rid] = now
                replica_of[rid] = index
                done = cached[rid]
                left = need - done
                chunk = prefill_chunk(left, room, breaks, done, starts) if cut else left if left < room else room
                prefill.append([rid, left, done, chunk])
                chunked += 1
                p_tokens += chunk
                p_context += done
                room -= chunk
            r.chunked = chunked
            r.t_start = now
            if chunked:
                phase = _STEP
                end = now + step_ms(n_dec, kv_dec, p_tokens, p_context) / 1e3
            elif n_dec:
                while heap[0][2] != epoch[heap[0][1]]:
                    heappop(heap)
                # the steps to the next completion, at most those the KV cache holds, at most run_cap
                k = heap[0][0] - steps
                fill = (budget - kv_used) // n_dec
                if fill < k:
                    k = fill
                if run_cap < k:
                    k = run_cap
                phase = _RUN
                r.run_steps = k
                r.fit = fit = fits.get(n_dec) or new_fit(n_dec)
                end = now + fit.series(kv_dec, n_dec, k)
            else:
                phase = _IDLE
                end = inf
            if shared and queue and queue[0] != head:
                r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used = phase, steps, n_dec, kv_dec, kv_used
                self._offer(queue[0], now, source=r)  # a new head another replica may take

"""The simulator's engine: per-replica state, per-request record arrays and the rarer scheduling
steps (waking and cutting short a replica's decode run, the shared queue's offers, preemption).
The event loop itself is :mod:`toolkit._queueing.event_loop`.
"""

from __future__ import annotations

import heapq
import sys
import warnings
from collections import deque
from typing import Any

import numpy as np

from toolkit._queueing.build_check import stale_compiled
from toolkit._queueing.event_loop import run_events
from toolkit._queueing.prefix_cache import _FixedCache
from toolkit._queueing.replica import _IDLE, _RUN, _STEP, _WAKE, _Replica

__all__: list[str] = []

if stale := stale_compiled():
    warnings.warn(
        f"toolkit._queueing: {', '.join(stale)} changed since they were compiled, and the compiled modules run "
        "instead of them; run `pip install -e .` again (or delete the .so files)",
        RuntimeWarning,
        stacklevel=2,
    )


# SGLang router's cache-aware defaults (``sgl-router`` ``CacheAwareConfig::default``)
PREFIX_BALANCE_ABS = 32
PREFIX_BALANCE_REL = 1.1
PREFIX_CACHE_THRESHOLD = 0.5


class _Engine:
    """The state of the event loop over all replicas (:func:`run_events`). Per-request state lives
    in preallocated numpy arrays (one element per request, in sending order), read and written
    through memoryviews, which index at list speed while keeping 8 bytes or less per value."""

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
        caches=None,
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
        if caches is None:  # each request finds the cached_tokens its trace gives, or none
            caches = [_FixedCache(self.cached)] * replicas
        self.reps = [_Replica(i, central if shared else deque(), caches[i]) for i in range(replicas)]
        # the event heap: (time, replica, version), valid while the version is the replica's own
        self.events: list = []
        self.versions = [0] * replicas
        self.closed_loop = closed_loop
        self.busy_at_window: list[float] = []  # busy seconds per replica when the measured window opens
        self.window_start = 0.0
        self.window_request = 0
        self.draw: Any = None  # speculative decoding's accepted-length draw (toolkit._queueing.speculative)

    # ---- arrivals and routing -------------------------------------------------------------------
    def _fits(self, r: _Replica, rid: int) -> bool:
        v = self._views
        need = v["prompt"][rid] + v["gen"][rid] + self.slack
        return len(r.running) < self.max_batch and r.kv_used + r.n_dec + need <= self.budget

    def _wake(self, r: _Replica, t: float) -> None:
        r.phase = _WAKE
        self.versions[r.index] += 1
        heapq.heappush(self.events, (t, r.index, self.versions[r.index]))

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
            self.versions[r.index] += 1
            heapq.heappush(self.events, (end, r.index, self.versions[r.index]))

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

    def route(self, rid: int, loads: list[int]) -> int:
        """``routing="prefix_affinity"``: SGLang router's cache-aware policy (``sgl-router``,
        ``src/policies/cache_aware.rs``, defaults ``balance_abs_threshold`` 32, ``balance_rel_threshold``
        1.1, ``cache_threshold`` 0.5). Loads (requests waiting plus running) out of balance, both
        ``max - min > 32`` and ``max > 1.1 min``: the least loaded replica. Otherwise the replica whose
        cache holds the longest prefix of the prompt, where that is more than half the prompt; else the
        one with the least cached (the router's smallest tree). Ties go to the lowest index. The router
        here sees the replicas' caches as they are (as KV-event-driven routers do), not an estimate."""
        low, high = min(loads), max(loads)
        if high - low > PREFIX_BALANCE_ABS and high > PREFIX_BALANCE_REL * low:
            return loads.index(low)
        matches = [r.cache.match(rid) for r in self.reps]
        best = max(matches)
        if best > PREFIX_CACHE_THRESHOLD * self.prompt[rid]:
            return matches.index(best)
        sizes = [r.cache.size_tokens() for r in self.reps]
        return sizes.index(min(sizes))

    def _open_window(self, t: float) -> None:
        """The first measured request arrives: note the time and every replica's busy seconds so far."""
        self.window_start = t
        self.busy_at_window = [r.busy_s + (t - r.t_start if r.phase in (_STEP, _RUN) else 0.0) for r in self.reps]

    # ---- one replica's steps ----------------------------------------------------------------------
    def _preempt(self, r: _Replica, t: float) -> None:
        v = self._views
        rid, decoding = r.running.popitem()  # the most recently admitted
        r.cache.release(rid, self.budget - r.kv_used)  # its blocks stay cached, unreferenced
        v["preempted"][rid] += 1
        if decoding:
            done = r.steps - v["joined"][rid]
            kv = v["kv_join"][rid] + done
            v["gen"][rid] += done if self.draw is None else self.draw.produced(rid, done)
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

    def run(self, concurrency: int | None, bar: Any) -> float:
        """Simulate until every request has finished; return the time of the last event (s).
        ``bar.update`` is told of every few thousand requests reaching the engine."""
        return run_events(self, concurrency, bar)

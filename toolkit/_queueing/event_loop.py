"""The simulator's event loop: every replica's steps (admission, chunked prefill, completions) in time order.
A hot loop: it is long for speed (no per-event allocation beyond what the schedule needs)."""

from __future__ import annotations

import math
from heapq import heappop, heappush, heapreplace
from typing import Any, Final, cast

from toolkit._queueing.chunking import prefill_chunk
from toolkit._queueing.replica import _IDLE, _RUN, _STEP, _WAKE, _Replica

__all__: list[str] = []

# requests between progress-bar updates (a power of two)
_TICK: Final = 1 << 14
_TICK_MASK: Final = _TICK - 1


def run_events(eng: Any, concurrency: int | None, bar: Any) -> float:
    """Simulate the engine ``eng`` until every request has finished; return the time of the last event (s).
    ``bar.update`` is told of every ``_TICK`` requests reaching the engine.

    One pass of the loop handles one event of the current replica ``r``, its state in locals: it ends the replica's
    phase (a mixed step or a run of decode steps: prefills that finish, first tokens, completions) and plans the next
    (preemptions, prefill chunks and admissions in the step's token budget, then a mixed step or the longest
    uninterruptible run of decode steps). A replica's prefix cache (``r.cache``) is told of admissions and completions.

    With a queue per replica, nothing but an arrival can change what a replica does, and no replica reads another's
    state except at an arrival: so ``r`` goes on with its next event at once while that comes before the next arrival.
    Otherwise the next arrival, or the earliest event of another replica (from the event heap, in (time, replica)
    order), comes first; an arrival changes the next event of its replica in place (``r``'s in locals, another's by a
    new heap entry that makes its old one stale), and only when another replica's event comes first does ``r`` store
    its state and put its event in the heap (one sift); with a shared queue every event goes through the heap.
    """
    v = eng._views
    prompt, output, arrival, admit_t, first_t, finish_t, cached = (
        v[k] for k in ("prompt", "output", "arrival", "admit_t", "first_t", "finish_t", "cached")
    )
    replica_of, gen, joined, kv_join, epoch = (v[k] for k in ("replica_of", "gen", "joined", "kv_join", "epoch"))
    # (the annotations let a compiled build keep these in machine words: see setup.py)
    events: list[tuple[float, int, int]] = eng.events
    versions: list[int] = eng.versions
    reps: list[_Replica] = eng.reps
    clock = eng.clock
    step_ms, fits, new_fit, draw = clock.step_ms, clock.fits, clock.fit, eng.draw
    overhead: float = eng.overhead_s
    budget: int = eng.budget
    slack: int = eng.slack
    max_batch: int = eng.max_batch
    token_budget: int = eng.token_budget
    run_cap: int = eng.run_cap
    closed: bool = eng.closed_loop
    breaks, starts = eng.breaks, eng.starts
    cut = bool(breaks or starts)
    shared, affinity = eng.routing == "shared_queue", eng.routing == "prefix_affinity"
    round_robin, next_rr, n_reps = eng.routing == "round_robin", 0, len(reps)
    # per replica: requests waiting plus running (with a queue per replica, they change as requests arrive and end)
    loads: list[int] = [0] * n_reps
    window_request = eng.window_request
    inf: float = math.inf
    n: int = eng.n
    # requests next_arrival .. next_issue - 1 have left the client and not yet reached the engine; a closed loop's
    # clients each send one at time 0, the next as the previous one completes
    next_arrival, next_issue = 0, n
    if closed:
        next_issue = min(cast(int, concurrency), n)
        eng.arrival[:next_issue] = 0.0
    ta: float = arrival[0] + overhead if next_issue else inf  # when the next request reaches the engine
    # the current replica, its state in locals (stored back into ``r`` when another replica's event comes first),
    # and the time of its next event (inf: idle)
    r: _Replica = reps[0]
    index: int = r.index
    phase: int = r.phase
    steps: int = r.steps
    n_dec: int = r.n_dec
    kv_dec: int = r.kv_dec
    kv_used: int = r.kv_used
    heap, running, queue, prefill = r.heap, r.running, r.queue, r.prefill
    end: float = inf
    te: float
    other: int
    version: int
    rid: int
    j: int
    k: int
    completed: int
    room: int
    chunk: int
    # now: the event or arrival in hand; last: when a replica fell idle or a heap entry went stale (bounds the end)
    now: float = 0.0
    last: float = 0.0
    while True:
        if end >= ta or shared:
            # ---- what comes next: the next arrival, r's next event or another replica's
            if phase == _IDLE:
                if now > last:
                    last = now
            elif shared:
                heappush(events, (end, index, versions[index]))
            if shared:
                r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used = phase, steps, n_dec, kv_dec, kv_used
                end = inf  # r's event is in the heap
            while True:
                if events:
                    te, other, version = events[0]
                    if version != versions[other]:  # stale: its replica has moved on
                        heappop(events)
                        if te > last:
                            last = te
                        continue
                else:
                    te = inf
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
                        r.phase = phase
                        eng._open_window(now)
                    if shared:
                        eng.central.append(rid)
                        eng._offer(rid, now)
                        continue
                    if round_robin:
                        j = next_rr % n_reps
                        next_rr += 1
                    elif affinity:  # the longest cached prefix, within the router's load bounds
                        j = eng.route(rid, loads)
                    else:  # least loaded: the first replica with the fewest requests waiting plus running
                        j = loads.index(min(loads))
                    loads[j] += 1
                    if j != index:
                        target = reps[j]
                        target.queue.append(rid)
                        if target.phase == _IDLE:
                            target.phase = _WAKE
                            versions[j] += 1
                            heappush(events, (now, j, versions[j]))
                        elif (
                            target.phase == _RUN
                            and len(target.queue) == 1
                            and len(target.running) < max_batch
                            and target.kv_used + target.n_dec + prompt[rid] + gen[rid] + slack <= budget
                        ):
                            # its decode run ends at the first step boundary at or after now
                            k, seconds = target.fit.reach(
                                target.kv_dec, target.n_dec, target.run_steps, now - target.t_start
                            )
                            if k != target.run_steps:
                                target.run_steps = k
                                shorter = target.t_start + seconds
                                versions[j] += 1
                                heappush(events, (now if now > shorter else shorter, j, versions[j]))
                        continue
                    queue.append(rid)
                    if phase == _IDLE:
                        phase = _WAKE
                        end = now
                    elif (
                        phase == _RUN
                        and len(queue) == 1
                        and len(running) < max_batch
                        and kv_used + n_dec + prompt[rid] + gen[rid] + slack <= budget
                    ):
                        k, seconds = r.fit.reach(kv_dec, n_dec, r.run_steps, now - r.t_start)
                        if k != r.run_steps:
                            r.run_steps = k
                            if end > last:  # where the loop with every event in the heap left a stale entry
                                last = end
                            end = r.t_start + seconds
                            if now > end:
                                end = now
                    continue
                if te < end or (te == end and other < index):
                    if not shared:  # (a shared queue's r stored its state above, and offers may have woken it since)
                        r.phase, r.steps, r.n_dec, r.kv_dec, r.kv_used = phase, steps, n_dec, kv_dec, kv_used
                    if end < inf:
                        heapreplace(events, (end, index, versions[index]))
                    else:
                        heappop(events)
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
                r.cache.finish(rid, budget - kv_used)
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
                        r.cache.finish(rid, budget - kv_used)
                        kv_used -= kv + slack
                        del running[rid]
                        finish_t[rid] = now
                        completed += 1
                        continue
                    running[rid] = True
                    joined[rid] = steps
                    kv_join[rid] = kv
                    k = output[rid] - g  # the steps to its last token (drawn with speculative decoding)
                    heappush(heap, (steps + (k if draw is None else draw(rid, k)), rid, epoch[rid]))
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
                eng._preempt(r, now)
            n_dec, kv_dec, kv_used = r.n_dec, r.kv_dec, r.kv_used
        room = token_budget - n_dec
        p_tokens = p_context = chunked = ends = 0  # ends: prompts whose last chunk this is
        for entry in prefill:
            if room <= 0:
                break
            # prefill_chunk's rule, written out where there are no breaks (a call per chunk costs)
            if cut:
                chunk = cast(int, prefill_chunk(entry[1], room, breaks, entry[2], starts))
            else:
                chunk = entry[1] if entry[1] < room else room
            entry[3] = chunk
            ends += chunk == entry[1]
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
            cached[rid] = done = r.cache.admit(rid, budget - kv_used, need, slack)  # found in cache: not prefilled
            left = need - done
            chunk = cast(int, prefill_chunk(left, room, breaks, done, starts)) if cut else left if left < room else room
            prefill.append([rid, left, done, chunk])
            ends += chunk == left
            chunked += 1
            p_tokens += chunk
            p_context += done
            room -= chunk
        r.chunked = chunked
        r.t_start = now
        if chunked:
            phase = _STEP
            end = now + step_ms(n_dec, kv_dec, p_tokens, p_context, ends) / 1e3
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
            eng._offer(queue[0], now, source=r)  # a new head another replica may take

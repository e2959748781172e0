"""A replica's state in the simulator's event loop (:mod:`toolkit._queueing.event_loop`)."""

from __future__ import annotations

from collections import deque
from typing import Any, Final

__all__: list[str] = []

# a replica's phase
_IDLE: Final = 0
_WAKE: Final = 1
_STEP: Final = 2
_RUN: Final = 3


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
        "t_start",
        "run_steps",
        "fit",
        "busy_s",
        "cache",
    )

    def __init__(self, index: int, queue: deque[int], cache: Any):
        self.index = index
        # the prefix cache: admit(request, KV tokens free once it takes its own, those tokens) -> prompt
        # tokens found cached; release(request, KV tokens free before it frees its own) as it is preempted,
        # finish(the same) as it ends (its answer kept too)
        self.cache = cache
        self.queue = queue
        self.running: dict[int, bool] = {}  # admission order; value: decoding (True) or prefilling
        # [request, tokens left to prefill, tokens prefilled, this step's chunk]; the chunked entries
        # of a step are always its first ``chunked`` ones
        self.prefill: deque[list[int]] = deque()
        self.chunked = 0
        self.heap: list[tuple[int, int, int]] = []  # (decode step at which it finishes, request, epoch)
        self.steps = 0  # decode steps taken so far
        self.n_dec = 0
        self.kv_dec = 0  # KV tokens of the decoding sequences
        self.kv_used = 0  # every KV token held or reserved, with paging slack
        self.phase = _IDLE
        self.t_start = 0.0
        self.run_steps = 0
        self.fit: Any = None  # the step-time fit of the decode run in progress
        self.busy_s = 0.0

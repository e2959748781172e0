"""The simulator's clock: step durations from the cost object, bound once for the event loop."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from toolkit._model.cost import CostModel
from toolkit._model.terms import step_formula
from toolkit._queueing.chunking import iteration_ms
from toolkit._queueing.piecewise import _Linear

__all__: list[str] = []


class _Clock:
    """Step durations from the cost object: ``step_ms`` of a mixed step (ms, one call each), decode
    runs in seconds from a piecewise-linear fit of ``step_ms`` in ``kv_tokens`` per batch size. A
    :class:`CostModel`'s step formula is bound once and called without its argument checks: the
    engine's counts are valid by construction."""

    def __init__(self, cost: Any, kv_high: int, ubatch_tokens: int | None = None):
        self._step_ms = step_formula(vars(cost))[2] if isinstance(cost, CostModel) else cost.step_ms
        # one step in ms, told how many prompts it ends (``last_chunks``) where the cost object takes
        # that count: the engine's counts are Python ints, which the step formula takes as it takes
        # floats (every product stays far below 2**53, so the values are the same)
        if isinstance(cost, CostModel):
            self.step_ms = self._step_ms
        elif "last_chunks" in inspect.signature(cost.step_ms).parameters:
            self.step_ms = lambda n, kv, p, c, e: float(cost.step_ms(float(n), float(kv), float(p), float(c), float(e)))
        else:
            self.step_ms = lambda n, kv, p, c, e: float(cost.step_ms(float(n), float(kv), float(p), float(c)))
        if ubatch_tokens is not None:  # an iteration of more tokens runs as several graph passes
            one_pass = self.step_ms
            self.step_ms = lambda n, kv, p, c, e: (
                one_pass(n, kv, p, c, e)
                if n + p <= ubatch_tokens
                else float(iteration_ms(one_pass, n, kv, p, c, e, ubatch_tokens))
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

"""Speculative decoding in the simulator: the speculative step as the engine's cost, and accepted lengths.

With ``simulate(..., speculation=...)`` every engine step is a speculative one (the drafter's steps and the
target's verification, :mod:`toolkit._model.speculation`), and each decoding sequence gains a random number
of tokens per step: ``1 + A``, ``A`` the drafts accepted, each accepted with its position's probability
given every earlier one was (Leviathan et al. 2023, arXiv:2211.17192, section 3.1: the verification keeps
the drafts up to the first rejection and samples one more token), never past the request's output length.
A sequence's accepted lengths are drawn, from the simulation's seeded generator, when it joins the decode
batch: the engine then knows the step at which it finishes, as it does without speculation.

The engine's KV accounting and token budget still count one token per decoding sequence per step, so a
speculative run holds less KV than it would (by the accepted length); a preempted sequence keeps the
share of its remaining tokens that its steps so far are of the steps drawn for them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from toolkit._model.cost import CostModel
from toolkit._model.speculation import _Speculation, draft_constants, speculation_config, speculative_step_formula

__all__: list[str] = []


class _SpeculativeCost:
    """A cost object for the simulator's clock whose ``step_ms`` is the speculative step of ``cost``."""

    def __init__(self, cost: Any, spec: _Speculation):
        if not isinstance(cost, CostModel):
            raise ValueError("speculation needs the toolkit's cost model: give model, gpu and quant, not cost")
        self._step = speculative_step_formula(vars(cost), draft_constants(cost, spec), spec.num_speculative_tokens)[0]
        self.kv_budget_tokens = cost.kv_budget_tokens
        self.kv_block_tokens = cost.kv_block_tokens
        self.request_overhead_ms = cost.request_overhead_ms
        self.max_batch = cost.max_batch

    def step_ms(
        self,
        decode_seqs: Any,
        kv_tokens: Any,
        prefill_tokens: Any = 0,
        prefill_context_tokens: Any = 0,
        last_chunks: Any = 1,
    ) -> Any:
        """One speculative engine step in ms (the engine's counts, valid by construction)."""
        return self._step(decode_seqs, kv_tokens, prefill_tokens, prefill_context_tokens, last_chunks)


class _Acceptance:
    """Draws the verification steps a sequence needs for its remaining tokens; remembers them per request."""

    def __init__(self, spec: _Speculation, rng: np.random.Generator):
        reach = np.concatenate([[1.0], np.cumprod(spec.acceptance)])  # P(a step yields at least t tokens)
        self._p = reach - np.append(reach[1:], 0.0)  # P(exactly t = 1 .. k + 1 tokens)
        self._mean = float(reach.sum())
        self._rng = rng
        self._drawn: dict[int, tuple[int, int]] = {}  # request -> (tokens left when it joined, steps drawn)

    def __call__(self, rid: int, left: int) -> int:
        """Steps to generate ``left`` more tokens of request ``rid`` (the last step's extra tokens unused)."""
        total, steps = 0, 0
        while total < left:
            size = max(int(math.ceil((left - total) / self._mean * 1.2)) + 4, 1)
            gained = np.cumsum(self._rng.choice(self._p.size, size=size, p=self._p) + 1) + total
            done = int(np.searchsorted(gained, left))  # the step index at which left is reached
            if done < size:
                steps += done + 1
                total = left
            else:
                steps += size
                total = int(gained[-1])
        self._drawn[rid] = (left, steps)
        return steps

    def produced(self, rid: int, done: int) -> int:
        """Tokens request ``rid`` generated in its first ``done`` steps (preempted before it finished): the
        share ``done / steps`` of its ``left`` tokens, at least one per step and at most ``left - 1``."""
        left, steps = self._drawn.pop(rid)
        return min(max(done, round(left * done / steps)), left - 1)


def speculative_engine(cost: Any, speculation: object, rng: np.random.Generator) -> tuple[Any, Any]:
    """(the cost object for the clock, the accepted-length draw) of ``speculation`` (None: ``cost``, None)."""
    if speculation is None:
        return cost, None
    spec = speculation_config(speculation)
    return _SpeculativeCost(cost, spec), _Acceptance(spec, rng)

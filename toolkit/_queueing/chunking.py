"""The one prefill chunking rule: how many prompt tokens an engine step prefills.

The simulator's engine applies it step by step; the calibration (``toolkit._calibration.fit``) applies
it to a lone prompt to predict the steps of its TTFT, so both split a prompt the same way.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


# ``int | float`` rather than ``float``: the compiled event loop would pass its ints as floats to ``float``
def prefill_chunk(
    left: int | float,
    room: int | float,
    breaks: tuple[int, ...],
    done: int | float = 0,
    starts: tuple[int, ...] = (),
) -> int | float:
    """Prompt tokens one step prefills of a prompt with ``left`` tokens still to prefill.

    Parameters
    ----------
    left : int or float
        Prompt tokens not yet prefilled (> 0).
    room : int or float
        Tokens of the step's budget still free (> 0): the step's token budget less one token per
        decoding sequence and the chunks of prompts ahead of this one.
    breaks : tuple of int
        Offsets from the prompt's end at which a chunk ends, in descending order (``prefill_breaks``
        of :func:`toolkit.simulate`).
    done : int or float
        Prompt tokens before this chunk: prefilled already or found in the cache (>= 0).
    starts : tuple of int
        Positions from the prompt's start at which a chunk ends, in ascending order
        (``prefill_start_breaks`` of :func:`toolkit.simulate`).

    Returns
    -------
    int or float
        ``min(left, room)``, at most ``left - b`` for the largest break ``b`` below ``left``, and at
        most ``s - done`` for the first start break ``s`` after ``done``.
    """
    chunk = left if left < room else room
    for b in breaks:
        if b < left:
            if left - b < chunk:
                chunk = left - b
            break
    for s in starts:
        if s > done:
            if s - done < chunk:
                chunk = s - done
            break
    return chunk


def iteration_ms(step_ms, n, kv, p, c, e, ubatch_tokens=None):
    """One server iteration of ``n`` decode and ``p`` prefill tokens run as graph passes of at most
    ``ubatch_tokens`` tokens each (ms; scalars or numpy arrays, broadcast).

    llama-server fills one batch of up to ``--batch-size`` tokens per iteration, the decode token of
    every generating slot first, then prompt tokens (``update_slots``, tools/server/server-context.cpp),
    and hands it to one ``llama_decode``, which splits it into micro-batches of ``--ubatch-size``
    tokens in batch order (``split_simple`` with a unified KV cache) and computes one graph per
    micro-batch, each reading the weights; tokens are sampled after the last. So the first pass
    holds the decode tokens (and their KV reads) and the first prompt tokens, every pass is priced
    by ``step_ms`` of its own tokens, a pass's prompt tokens attend to those of the passes before
    it, and the logits of the prompts the iteration ends (``e``) are computed in its last pass.

    Parameters
    ----------
    step_ms : callable
        ``step_ms(n, kv, p, c, e)``, one graph pass in ms (``CostModel.step_ms``'s arguments).
    n, kv, p, c, e : float or numpy.ndarray
        Decode tokens, their KV tokens, prefill tokens, the tokens those attend to before this
        iteration, prompts ended (>= 0).
    ubatch_tokens : int or None
        Tokens per pass (>= 1); None prices the iteration as one pass.

    Returns
    -------
    float or numpy.ndarray
        The iteration's duration in ms: the sum of its passes.
    """
    total = n + p
    if ubatch_tokens is None or np.all(total <= ubatch_tokens):
        return step_ms(n, kv, p, c, e)
    passes = int(np.max(np.ceil(total / ubatch_tokens)))
    elapsed = 0.0
    for j in range(passes):
        start = j * ubatch_tokens
        size = np.clip(total - start, 0, ubatch_tokens)
        decode = np.clip(n - start, 0, size)
        prompt = size - decode
        before = np.clip(start - n, 0, None)  # this iteration's prompt tokens in earlier passes
        last = total <= start + ubatch_tokens
        part = step_ms(decode, kv * decode / np.maximum(n, 1), prompt, c + before, np.where(last, e, 0))
        elapsed = elapsed + np.where(size > 0, part, 0.0)
    return elapsed

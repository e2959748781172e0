"""Prefix blocks of a trace: read from a Mooncake JSONL file, scaled with the token counts, re-blocked.

A Mooncake trace (Qin et al., FAST 2025; ``toolkit/_data/traces/mooncake/README.md``) has one JSON
object per line: ``timestamp`` (ms from the trace's start), ``input_length``, ``output_length`` and
``hash_ids``, the chain hashes of the prompt's 512-token blocks. :mod:`toolkit._workload.prefix`
says what the blocks mean and how a partial last block counts.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from toolkit._args import check_int
from toolkit._workload.prefix import ANSWER_COLUMN, ATTR, COLUMN, block_tokens_of, prefix_blocks_of

__all__: list[str] = []

# Mooncake's block: "The block size is 512 tokens" (FAST25-release/README.md).
MOONCAKE_BLOCK_TOKENS = 512
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# The largest block accepted, and the most blocks a re-blocked trace may hold: a tuple per request in
# a frame costs about 40 bytes per block, so this keeps a re-blocked trace within about 2 GB.
MAX_BLOCK_TOKENS = 2**20
MAX_BLOCKS = 5 * 10**7


def read_mooncake(data: bytes, *, name: str) -> pd.DataFrame:
    """A Mooncake JSONL trace as a frame: ``arrival_s`` (s), ``prompt_tokens``, ``output_tokens`` and
    ``prefix_blocks`` (tuples of ints), with ``attrs["prefix_block_tokens"] = 512``.

    Raises
    ------
    ValueError
        Naming the file and line of a record that is not a JSON object with the four fields.
    """
    records = []
    for number, line in enumerate(data.decode("utf-8-sig", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            records.append((*(record[field] for field in MOONCAKE_FIELDS[:3]), tuple(record["hash_ids"])))
        except (ValueError, KeyError, TypeError):
            raise ValueError(
                f"trace file {name}, line {number}: a Mooncake record is a JSON object with "
                f"{', '.join(MOONCAKE_FIELDS)} (a list of block ids)"
            ) from None
    frame = pd.DataFrame(records, columns=["arrival_ms", "prompt_tokens", "output_tokens", COLUMN])
    try:
        arrival = frame.pop("arrival_ms").to_numpy(dtype=float) / 1000.0
    except (TypeError, ValueError):
        raise ValueError(f"trace file {name}: timestamp must be milliseconds (numbers) in every record") from None
    frame.insert(0, "arrival_s", arrival)
    frame.attrs[ATTR] = MOONCAKE_BLOCK_TOKENS
    return frame


def scale_blocks(frame: pd.DataFrame, *, token_scale: float) -> pd.DataFrame:
    """Scale the block size along with the token counts that ``token_scale`` already scaled.

    The block becomes ``max(1, round(block * token_scale))`` tokens and every request keeps its
    blocks, so the sharing between requests stays as it was; a scaled prompt is then moved into
    the range its blocks cover (``(k - 1) * block + 1`` to ``k * block`` tokens for ``k`` blocks),
    which the block's rounding can leave: by at most ``k`` times that rounding (under 1% of the
    prompt for blocks of 50 tokens or more).
    """
    block = block_tokens_of(frame)
    scaled = max(1, round(block * token_scale))
    if scaled > MAX_BLOCK_TOKENS:
        raise ValueError(
            f"token_scale={token_scale:g} makes {block}-token prefix blocks over {MAX_BLOCK_TOKENS} tokens"
        )
    counts = np.fromiter(map(len, frame[COLUMN]), dtype=np.int64, count=len(frame))
    prompt = frame["prompt_tokens"].to_numpy(dtype=np.int64)
    frame["prompt_tokens"] = np.clip(prompt, (counts - 1) * scaled + 1, counts * scaled)
    frame.attrs[ATTR] = scaled
    # the answers' blocks no longer fit the scaled answers (a session workload is generated at its size)
    return frame.drop(columns=ANSWER_COLUMN, errors="ignore")


def reblock(trace: pd.DataFrame, *, block_tokens: int) -> pd.DataFrame:
    """The trace with its prompts cut into blocks of ``block_tokens`` tokens instead.

    A new block's content is the prompt up to its last token, so under chain hashing it is named by
    the old block holding that token and the token's place in it: the id is derived from that pair
    (then numbered densely). Splitting a block into smaller ones gives sub-blocks derived from
    (id, j); merging gives one derived from the merged ids (the last of them names the chain).
    Requests that shared a prefix of ``n`` old blocks share the new blocks within those ``n x old``
    tokens; a size that neither divides nor is a multiple of the old one works the same way.

    Parameters
    ----------
    trace : pandas.DataFrame
        A frame with prefix structure.
    block_tokens : int
        The new block size (1 to 2**20 tokens).

    Returns
    -------
    pandas.DataFrame
        A copy with ``prefix_blocks`` re-cut and ``attrs["prefix_block_tokens"] = block_tokens``; a
        different size drops ``answer_blocks`` (generate a session workload at the size instead).
    """
    new = check_int("prefix_block_tokens", block_tokens, low=1, high=MAX_BLOCK_TOKENS)
    old = block_tokens_of(trace)
    ids, offsets, _ = prefix_blocks_of(trace)
    out = trace.copy()
    if new == old:
        return out
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    counts = -(-prompt // new)
    total = int(counts.sum())
    if total > MAX_BLOCKS:
        raise ValueError(
            f"prefix_block_tokens={new} cuts the trace's {int(prompt.sum())} prompt tokens into {total} blocks; "
            f"at most {MAX_BLOCKS:.0e}: use a larger block"
        )
    rows = np.repeat(np.arange(len(trace)), counts)
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    last_token = np.minimum((within + 1) * new, prompt[rows]) - 1
    dense = np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)
    key = dense[offsets[:-1][rows] + last_token // old] * old + last_token % old
    new_ids = np.unique(key, return_inverse=True)[1].reshape(-1)
    out[COLUMN] = as_tuples(new_ids, counts)
    out.attrs[ATTR] = new
    return out.drop(columns=ANSWER_COLUMN, errors="ignore")


def as_tuples(flat: np.ndarray, counts: np.ndarray) -> list[tuple[int, ...]]:
    """Flat block ids cut into one tuple of Python ints per request, ``counts[r]`` for request r."""
    values = flat.tolist()
    ends = np.cumsum(counts).tolist()
    return [tuple(values[start:end]) for start, end in zip([0, *ends[:-1]], ends, strict=True)]

"""A trace's prompt blocks as the simulator's prefix caches track them: in segments, computed once per run.

A segment is a maximal run of consecutive blocks that are always used together: block b joins the
segment of the block a before it when every occurrence of b in the trace comes right after an a and
every occurrence of a comes right before a b. The blocks of a segment are held by the same requests,
so they enter a cache together, have the same reference counts and are freed together, tail first;
a cache can keep one entry per segment (how many of its leading blocks are still cached, as tokens)
and do per request the work of its segments rather than of its blocks, with the same results: one
segment for a system prompt, one for what a conversation's earlier turn sent, one for a request's own
blocks. The rule is a property of the block ids, not of the request, so a segment is fixed by its
first block, and two prompts' common prefix ends on a segment boundary of both.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from toolkit._queueing.prefix_cache import _BlockCache, _Blocks, _SlotCache

__all__: list[str] = []

# llama-server's default ``--slot-prompt-similarity`` (``common/common.h``)
SLOT_PROMPT_SIMILARITY = 0.1
# backends that serve through llama.cpp's server slots (``toolkit/_data/backends.csv`` names)
SLOT_BACKENDS = ("llamacpp", "ollama")


def check_prefix_blocks(trace: pd.DataFrame) -> tuple[int, np.ndarray, np.ndarray]:
    """The block size of a trace's ``prefix_blocks`` (``attrs["prefix_block_tokens"]``) and its block ids
    flattened in row order with each row's offsets into them, checked: each request has
    ``ceil(prompt_tokens / block)`` integer ids, else a ValueError naming the first row that does not."""
    block = trace.attrs.get("prefix_block_tokens")
    if not isinstance(block, int | np.integer) or block < 1:
        raise ValueError(f"trace.attrs['prefix_block_tokens'] must be an int >= 1 with prefix_blocks, got {block!r}")
    column = trace["prefix_blocks"].tolist()
    counts = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    try:
        ids = np.fromiter(itertools.chain.from_iterable(column), dtype=np.int64, count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError):
        raise ValueError("trace prefix_blocks must hold a sequence of integer block ids (int64) per request") from None
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    bad = np.flatnonzero(counts != (prompt + block - 1) // block)
    if bad.size:
        raise ValueError(
            f"trace prefix_blocks must hold ceil(prompt_tokens / {block}) ids per request; row {bad[0]} has "
            f"{counts[bad[0]]} for {prompt[bad[0]]} tokens"
        )
    return int(block), ids, np.concatenate([[0], np.cumsum(counts)])


def _codes(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of ``ids`` (equal ids, equal codes) and how many distinct. Most blocks of a trace are a
    request's own: an id alone in its bucket of a power-of-two hash table (its low bits) is certainly
    used once and takes a fresh code, so only the rest go through pandas' hash table."""
    size = 1 << (2 * ids.size).bit_length()
    bucket = ids & (size - 1)
    alone = np.bincount(bucket, minlength=size)[bucket] == 1
    codes = np.empty(ids.size, dtype=np.int64)
    rest, distinct = pd.factorize(ids[~alone])
    codes[~alone] = rest
    codes[alone] = np.arange(distinct.size, distinct.size + ids.size - rest.size)
    return codes, distinct.size + ids.size - rest.size


def segments(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments (module notes) of the requests whose blocks are ``ids[offsets[r]:offsets[r + 1]]``
    (at least one each): per request its segment ids, flattened (``seg``, row r's at
    ``seg[seg_offsets[r]:seg_offsets[r + 1]]``), and per segment id its blocks."""
    n = ids.size
    codes, n_ids = _codes(ids)
    first = np.zeros(n, dtype=bool)
    first[offsets[:-1]] = True
    before = np.empty(n, dtype=np.int64)  # the block before each occurrence (-1: the prompt's first)
    before[1:] = codes[:-1]
    before[first] = -1
    seen = np.empty(n_ids, dtype=np.int64)
    seen[codes] = before  # one occurrence's predecessor per id, whichever: all must equal it
    same = np.ones(n_ids, dtype=bool)
    same[codes[before != seen[codes]]] = False
    # b joins a when every b follows an a and there are as many a's as b's (so every a precedes a b)
    uses = np.bincount(codes, minlength=n_ids)
    join = ~first
    join[1:] &= same[codes[1:]] & (uses[codes[1:]] == uses[codes[:-1]])
    start = np.flatnonzero(~join)
    head = codes[start]
    used = np.zeros(n_ids, dtype=bool)
    used[head] = True
    rank = np.cumsum(used) - 1
    seg = rank[head]
    seg_blocks = np.zeros(int(rank[-1]) + 1, dtype=np.int64)
    seg_blocks[seg] = np.diff(np.append(start, n))
    return seg, np.searchsorted(start, offsets), seg_blocks


def blocks_of(
    ids: np.ndarray, offsets: np.ndarray, prompt: np.ndarray, block: int, unit: int, order: np.ndarray | None = None
) -> _Blocks:
    """The caches' view of requests with blocks ``ids[offsets[r]:offsets[r + 1]]`` of ``block`` tokens
    and ``prompt`` tokens each, taken in ``order`` (row indices; None: as given), with hits counted in
    whole ``unit``-token engine blocks."""
    seg, seg_offsets, seg_blocks = segments(ids, offsets)
    n_blocks = np.diff(offsets)
    if order is not None:
        count = np.diff(seg_offsets)[order]
        new_offsets = np.concatenate([[0], np.cumsum(count)])
        seg = seg[np.repeat(seg_offsets[:-1][order] - new_offsets[:-1], count) + np.arange(new_offsets[-1])]
        seg_offsets, n_blocks, prompt = new_offsets, n_blocks[order], prompt[order]
    return _Blocks(
        seg.tolist(),
        seg_offsets.tolist(),
        seg_blocks.tolist(),
        n_blocks.tolist(),
        prompt.tolist(),
        block,
        unit,
    )


def prefix_caches(
    trace: pd.DataFrame | None,
    order: np.ndarray | None,
    backend_name: str | None,
    replicas: int,
    slots: int,
    unit_tokens: int,
    similarity: float,
) -> list[_BlockCache] | list[_SlotCache] | None:
    """One prefix cache per replica for a trace with ``prefix_blocks`` (None without that column):
    llama.cpp's slots for a llama.cpp backend, else vLLM's block cache. ``order`` puts the trace's
    rows in sending order; ``unit_tokens`` is the engine's KV block (a hit counts whole ones)."""
    if trace is None or "prefix_blocks" not in trace.columns:
        return None
    block, ids, offsets = check_prefix_blocks(trace)
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    if backend_name in SLOT_BACKENDS:
        blocks = blocks_of(ids, offsets, prompt, block, 1, order)
        return [_SlotCache(blocks, slots, similarity) for _ in range(replicas)]
    blocks = blocks_of(ids, offsets, prompt, block, unit_tokens, order)
    return [_BlockCache(blocks) for _ in range(replicas)]

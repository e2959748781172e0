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

A trace with ``answer_blocks`` (a session workload's) gives each request a second row, the token
stream an engine keeps once it has answered (``prompt + output - 1`` tokens): its prompt's full blocks,
then its answer's blocks. Rows ``n .. 2n - 1`` of the caches' view are those streams, segmented with
the prompts, so a finished request's cache entry holds its answer (``toolkit._workload.sessions``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from toolkit._args import check_number
from toolkit._queueing.prefix_cache import _BlockCache, _Blocks
from toolkit._queueing.slot_cache import _SlotCache

__all__: list[str] = []

# llama-server's default ``--slot-prompt-similarity`` (``common/common.h``)
SLOT_PROMPT_SIMILARITY = 0.1
# backends that serve through llama.cpp's server slots (``toolkit/_data/backends.csv`` names)
SLOT_BACKENDS = ("llamacpp", "ollama")
# the largest host prompt cache accepted (MiB): a petabyte
MAX_CACHE_MIB = 2**30


def check_prefix_blocks(trace: pd.DataFrame) -> tuple[int, np.ndarray, np.ndarray]:
    """The block size of a trace's ``prefix_blocks`` (``attrs["prefix_block_tokens"]``) and its block ids
    flattened in row order with each row's offsets into them, checked: each request has
    ``ceil(prompt_tokens / block)`` integer ids, else a ValueError naming the first row that does not."""
    block = trace.attrs.get("prefix_block_tokens")
    if not isinstance(block, int | np.integer) or block < 1:
        raise ValueError(f"trace.attrs['prefix_block_tokens'] must be an int >= 1 with prefix_blocks, got {block!r}")
    column = trace["prefix_blocks"].tolist()
    try:
        counts = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
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


def check_answer_blocks(trace: pd.DataFrame, block: int) -> tuple[np.ndarray, np.ndarray]:
    """A trace's ``answer_blocks`` flattened in row order with each row's offsets, checked: each request
    has ``ceil((prompt + output - 1) / block) - prompt // block`` integer ids, else a ValueError naming
    the first row that does not."""
    column = trace["answer_blocks"].tolist()
    try:
        counts = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
        ids = np.fromiter(itertools.chain.from_iterable(column), dtype=np.int64, count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError):
        raise ValueError("trace answer_blocks must hold a sequence of integer block ids (int64) per request") from None
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    kept = prompt + trace["output_tokens"].to_numpy(dtype=np.int64) - 1
    bad = np.flatnonzero(counts != (kept + block - 1) // block - prompt // block)
    if bad.size:
        raise ValueError(
            f"trace answer_blocks must hold ceil((prompt_tokens + output_tokens - 1) / {block}) - prompt_tokens "
            f"// {block} ids per request; row {bad[0]} has {counts[bad[0]]}"
        )
    return ids, np.concatenate([[0], np.cumsum(counts)])


def _with_answers(
    ids: np.ndarray,
    offsets: np.ndarray,
    prompt: np.ndarray,
    answers: np.ndarray,
    answer_offsets: np.ndarray,
    block: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the prompts' blocks followed by the rows of the kept streams (module notes)."""
    full = prompt // block  # a prompt's full blocks lead its stream
    counts = np.diff(offsets)
    answer_counts = np.diff(answer_offsets)
    run = np.concatenate([counts, full + answer_counts])
    # each stream row: its prompt's full blocks, then its answer's
    src_rows = np.repeat(np.arange(prompt.size), full)
    within = np.arange(int(full.sum())) - np.repeat(np.cumsum(full) - full, full)
    head = ids[offsets[:-1][src_rows] + within]
    stream_start = np.concatenate([[0], np.cumsum(full + answer_counts)])[:-1]
    stream = np.empty(int((full + answer_counts).sum()), dtype=np.int64)
    stream[np.repeat(stream_start, full) + within] = head
    a_rows = np.repeat(np.arange(prompt.size), answer_counts)
    a_within = np.arange(answers.size) - np.repeat(answer_offsets[:-1], answer_counts)
    stream[stream_start[a_rows] + full[a_rows] + a_within] = answers
    return np.concatenate([ids, stream]), np.concatenate([[0], np.cumsum(run)])


def _codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Whether each of ``ids`` is certainly used once (``alone``: most blocks of a trace are a request's
    own; such an id is alone in its bucket of a power-of-two hash table, its low bits), and dense codes
    for the others (``codes[~alone]``, equal ids equal codes, ``0 .. distinct - 1``) from pandas' hash
    table: the codes, ``alone`` and ``distinct``."""
    size = 1 << (2 * ids.size).bit_length()
    bucket = ids & (size - 1)
    alone = np.bincount(bucket, minlength=size)[bucket] == 1
    codes, distinct = pd.factorize(ids[~alone])
    return codes, alone, distinct.size


def segments(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments (module notes) of the requests whose blocks are ``ids[offsets[r]:offsets[r + 1]]``
    (at least one each): per request its segment ids, flattened (``seg``, row r's at
    ``seg[seg_offsets[r]:seg_offsets[r + 1]]``), and per segment id its blocks."""
    n = ids.size
    codes, alone, distinct = _codes(ids)
    shared = ~alone
    first = np.zeros(n, dtype=bool)
    first[offsets[:-1]] = True
    # per position its id's code, and each id used once a distinct negative one
    code = -2 - np.arange(n, dtype=np.int64)
    code[shared] = codes
    # the block before each occurrence of a shared id (-1: the prompt's first)
    before = np.empty(n, dtype=np.int64)
    before[1:] = code[:-1]
    before[first] = -1
    before = before[shared]
    seen = np.empty(distinct, dtype=np.int64)
    seen[codes] = before  # one occurrence's predecessor per id, whichever: all must equal it
    same_shared = np.ones(distinct, dtype=bool)
    same_shared[codes[before != seen[codes]]] = False
    same = np.ones(n, dtype=bool)  # every use of the block follows the same block (an id used once: True)
    same[shared] = same_shared[codes]
    uses = np.ones(n, dtype=np.int64)  # uses of the block's id
    uses[shared] = np.bincount(codes, minlength=distinct)[codes]
    # b joins a when every b follows an a and there are as many a's as b's (so every a precedes a b)
    join = ~first
    join[1:] &= same[1:] & (uses[1:] == uses[:-1])
    start = np.flatnonzero(~join)
    lengths = np.diff(np.append(start, n))
    # segment ids: the shared heads' codes ranked, then one per head used once
    head_shared = shared[start]
    head = code[start[head_shared]]
    used = np.zeros(distinct, dtype=bool)
    used[head] = True
    rank = np.cumsum(used) - 1
    n_shared = int(used.sum())
    seg = np.empty(start.size, dtype=np.int64)
    seg[head_shared] = rank[head]
    seg[~head_shared] = n_shared + np.arange(start.size - head.size)
    seg_blocks = np.zeros(n_shared + start.size - head.size, dtype=np.int64)
    seg_blocks[seg] = lengths
    return seg, np.searchsorted(start, offsets), seg_blocks


def blocks_of(
    ids: np.ndarray,
    offsets: np.ndarray,
    prompt: np.ndarray,
    block: int,
    unit: int,
    order: np.ndarray | None = None,
    n: int | None = None,
) -> _Blocks:
    """The caches' view of requests with blocks ``ids[offsets[r]:offsets[r + 1]]`` of ``block`` tokens
    and ``prompt`` tokens each, taken in ``order`` (row indices; None: as given), with hits counted in
    whole ``unit``-token engine blocks. ``n`` requests of twice as many rows have their kept streams
    as rows ``n ..`` (module notes); None: no streams."""
    seg, seg_offsets, seg_blocks = segments(ids, offsets)
    n_blocks = np.diff(offsets)
    requests = prompt.size if n is None else n
    if order is not None and n is not None:
        order = np.concatenate([order, n + order])
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
        requests,
    )


def host_cache_tokens(backend: dict | None, prompt_cache_mib: float | None, cost: object) -> int:
    """Tokens a llama.cpp server's host-memory prompt cache holds (``toolkit._queueing.slot_cache``):
    ``prompt_cache_mib`` (None: the backend's ``prompt_cache_mib``, backends.csv) over the cost model's
    KV bytes per token, the size of a saved sequence state; 0 without a cache, -1 (no limit) for a cost
    object without ``kv_bytes_per_token``."""
    if prompt_cache_mib is not None:
        prompt_cache_mib = check_number("prompt_cache_mib", prompt_cache_mib, low=0, high=MAX_CACHE_MIB)
    if backend is None or backend["name"] not in SLOT_BACKENDS:
        return 0
    if prompt_cache_mib is None:
        prompt_cache_mib = backend["prompt_cache_mib"]
    if not prompt_cache_mib or prompt_cache_mib != prompt_cache_mib:  # 0, or NaN: blank in backends.csv
        return 0
    per_token = getattr(cost, "kv_bytes_per_token", None)
    if per_token is None:
        return -1
    return max(int(prompt_cache_mib * 2**20 / float(per_token)), 1)


def prefix_caches(
    trace: pd.DataFrame | None,
    order: np.ndarray | None,
    backend_name: str | None,
    replicas: int,
    slots: int,
    unit_tokens: int,
    similarity: float,
    host_tokens: int = 0,
) -> list[_BlockCache] | list[_SlotCache] | None:
    """One prefix cache per replica for a trace with ``prefix_blocks`` (None without that column):
    llama.cpp's slots for a llama.cpp backend, with a host prompt cache of ``host_tokens``
    (``host_cache_tokens``), else vLLM's block cache. ``order`` puts the trace's rows in sending order;
    ``unit_tokens`` is the engine's KV block (a hit counts whole ones)."""
    if trace is None or "prefix_blocks" not in trace.columns:
        return None
    block, ids, offsets = check_prefix_blocks(trace)
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    n = None
    if "answer_blocks" in trace.columns:
        answers, answer_offsets = check_answer_blocks(trace, block)
        ids, offsets = _with_answers(ids, offsets, prompt, answers, answer_offsets, block)
        n = prompt.size
        prompt = np.concatenate([prompt, prompt + trace["output_tokens"].to_numpy(dtype=np.int64) - 1])
    unit = 1 if backend_name in SLOT_BACKENDS else unit_tokens
    blocks = blocks_of(ids, offsets, prompt, block, unit, order, n)
    if backend_name in SLOT_BACKENDS:
        return [_SlotCache(blocks, slots, similarity, host_tokens) for _ in range(replicas)]
    return [_BlockCache(blocks) for _ in range(replicas)]

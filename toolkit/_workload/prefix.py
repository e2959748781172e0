"""Prefix structure of a trace, and the hit rate an LRU prefix cache of every capacity delivers, exactly.

A trace frame with prefix structure carries a column ``prefix_blocks``: per request a tuple of ints,
the ids of its prompt's consecutive blocks of ``attrs["prefix_block_tokens"]`` tokens, in order. The
ids are chain hashes (block i's id stands for the prompt's first i + 1 blocks), so two requests whose
first k ids are equal share their first k blocks. A prompt that is not a multiple of the block size
ends in a partial block of ``prompt_tokens - (k - 1) * block`` tokens, shared only with a request
that has the same id there (the Mooncake traces hash a partial last block like a full one).

The cache model of :func:`reuse_curve`
--------------------------------------
Requests are taken in arrival order (ties in row order) and each touches its blocks first to last
at consecutive times. The cache is least-recently-used over blocks; a cached block occupies a whole
block of KV memory whatever its fill (paged KV memory allocates whole blocks, vLLM's
``block_size``), so a cache of ``C`` tokens holds ``C // block`` blocks. A reference to a cached
block is a hit and its tokens (a partial block's fewer) need no prefill; any other is computed and
cached. Touched in that order, block i of a request was always used at least as recently as its
block i + 1 (a chain's block i + 1 is referenced only right after its block i), so its stack
distance is never larger: LRU's hits in a request form a prefix of it, and pure block LRU gives
the same hits as the rule engines apply, reusing only a request's cached prefix.

A frame with ``answer_blocks`` (``toolkit.session_workload``) has each request then touch the blocks
an engine keeps of its answer (an engine keeps a finished sequence's KV: ``toolkit._queueing.prefix_cache``):
they take cache space and a later turn hits them, but no request asks for them (0 tokens), and the
working set counts them.

Mattson, Gecsei, Slutz and Traiger (1970), "Evaluation techniques for storage hierarchies": an LRU
cache of ``c`` blocks hits exactly the references whose stack distance (the distinct blocks
referenced since the block's previous reference, itself included) is at most ``c``, so one pass
gives the hits at every capacity. The distances come from counting, for each reuse interval, the
reuse intervals nested inside it, an offline dominance count done level by level over the binary
digits of the times with sorted searches (numpy; O(n log^2 n) for n references).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from toolkit._args import check_array, check_int

__all__: list[str] = []

COLUMN = "prefix_blocks"
# the blocks an engine keeps of a request's answer (``toolkit._workload.sessions``)
ANSWER_COLUMN = "answer_blocks"
ATTR = "prefix_block_tokens"
# Grid points of the capacity curve when no capacities are given.
CURVE_POINTS = 48


def block_tokens_of(trace: pd.DataFrame) -> int:
    """The block size (tokens) of a frame with prefix structure, or a ValueError saying what is missing."""
    if not isinstance(trace, pd.DataFrame) or COLUMN not in trace.columns:
        raise ValueError(f"trace must be a DataFrame with a {COLUMN} column (load_trace('mooncake-conversation'))")
    if ATTR not in trace.attrs:
        raise ValueError(f"trace.attrs must record {ATTR} (the tokens in each of {COLUMN}'s blocks)")
    return check_int(f"trace.attrs[{ATTR!r}]", trace.attrs[ATTR], low=1, high=2**20)


def prefix_blocks_of(trace: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prefix blocks of every request, flattened in row order.

    Parameters
    ----------
    trace : pandas.DataFrame
        A frame with ``prompt_tokens`` and ``prefix_blocks``, and ``attrs["prefix_block_tokens"]``.

    Returns
    -------
    ids : numpy.ndarray of int64
        The block ids of row 0, then of row 1, and so on.
    offsets : numpy.ndarray of int64
        ``len(trace) + 1`` positions: row r's blocks are ``ids[offsets[r]:offsets[r + 1]]``.
    block_tokens : numpy.ndarray of int64
        Tokens in each block of ``ids``: the block size, the last block of a row
        ``prompt_tokens - (k - 1) * block``.

    Raises
    ------
    ValueError
        When a row's blocks are not integers or do not cover its prompt: a prompt of ``p`` tokens
        has ``ceil(p / block)`` blocks.
    """
    block = block_tokens_of(trace)
    column = trace[COLUMN]
    try:
        counts = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
        ids = np.fromiter(itertools.chain.from_iterable(column), dtype=np.int64, count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"trace {COLUMN} must hold a sequence of integer block ids (int64) in every row") from None
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    bad = (counts < 1) | (counts != -(-prompt // block))
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"trace {COLUMN} must hold ceil(prompt_tokens / {block}) blocks per row; row {row} has "
            f"{counts[row]} for {prompt[row]} prompt tokens"
        )
    offsets = np.concatenate([[0], np.cumsum(counts)])
    tokens = np.full(ids.size, block, dtype=np.int64)
    tokens[offsets[1:] - 1] = prompt - (counts - 1) * block
    return ids, offsets, tokens


def stack_distances(ids: np.ndarray) -> np.ndarray:
    """LRU stack distance (blocks, the block itself included) of each reference in ``ids``; 0 for a
    block's first reference, which no cache holds."""
    n = ids.size
    inverse = np.unique(ids, return_inverse=True)[1].reshape(-1)
    order = np.argsort(inverse, kind="stable")
    again = inverse[order[1:]] == inverse[order[:-1]]
    start, end = order[:-1][again], order[1:][again]  # reuse intervals: previous reference, this one
    distances = np.zeros(n, dtype=np.int64)
    if end.size:
        # distinct blocks in (start, end) = (end - start - 1) minus the references in it whose next
        # use also falls before end: the reuse intervals nested inside
        distances[end] = end - start - _nested(start, end)
    return distances


def _nested(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval k, the intervals m with ``start[m] > start[k]`` and ``end[m] < end[k]``:
    those ending before ``end[k]`` minus those also starting at or before ``start[k]``, the latter
    summed over the dyadic blocks of ``[0, start[k] + 1)``, one level of binary digits at a time."""
    count = np.searchsorted(np.sort(end), end, side="left").astype(np.int64)
    shift = int(end.max()).bit_length()
    bound = start + 1
    for level in range(int(bound.max()).bit_length()):
        take = ((bound >> level) & 1).astype(bool)
        if not take.any():
            continue
        keys = np.sort(((start >> level) << shift) | end)
        low = ((bound[take] >> level) - 1) << shift
        count[take] -= np.searchsorted(keys, low | end[take], side="left") - np.searchsorted(keys, low, side="left")
    return count


def _references(trace: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Stack distance, tokens and row of every block reference, the requests taken in arrival order.
    With ``answer_blocks`` a request then references its answer's blocks (0 tokens: they are cached,
    not asked for), which its next turn finds."""
    ids, offsets, tokens = prefix_blocks_of(trace)
    if ANSWER_COLUMN in trace.columns:
        ids, offsets, tokens = _with_answers(trace, ids, offsets, tokens)
    rows = np.repeat(np.arange(len(trace)), np.diff(offsets))
    arrival = trace["arrival_s"].to_numpy(dtype=float)
    if np.any(np.diff(arrival) < 0):
        order = np.argsort(arrival, kind="stable")
        ids, tokens, rows = (x[_reorder(offsets, order)] for x in (ids, tokens, rows))
    return stack_distances(ids), tokens, rows, block_tokens_of(trace)


def _with_answers(
    trace: pd.DataFrame, ids: np.ndarray, offsets: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's prompt references followed by its answer's (``answer_blocks``, 0 tokens each)."""
    column = trace[ANSWER_COLUMN]
    try:
        counts = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
        answers = np.fromiter(itertools.chain.from_iterable(column), dtype=np.int64, count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError):
        raise ValueError(
            f"trace {ANSWER_COLUMN} must hold a sequence of integer block ids (int64) in every row"
        ) from None
    prompt_counts = np.diff(offsets)
    new_offsets = np.concatenate([[0], np.cumsum(prompt_counts + counts)])
    is_prompt = np.ones(new_offsets[-1], dtype=bool)
    answer_at = np.repeat(new_offsets[:-1] + prompt_counts, counts) + np.arange(answers.size)
    answer_at -= np.repeat(np.cumsum(counts) - counts, counts)
    is_prompt[answer_at] = False
    out_ids = np.empty(new_offsets[-1], dtype=np.int64)
    out_ids[is_prompt], out_ids[~is_prompt] = ids, answers
    out_tokens = np.zeros(new_offsets[-1], dtype=np.int64)
    out_tokens[is_prompt] = tokens
    return out_ids, new_offsets, out_tokens


def _reorder(offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Positions in the flat arrays of the rows ``order``, each row's blocks kept in order."""
    counts = np.diff(offsets)[order]
    first = np.repeat(offsets[:-1][order], counts)
    return first + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)


def _capacity_blocks(capacity_tokens: float | None, block: int) -> float:
    if capacity_tokens is None:
        return np.inf
    cap = float(check_array("capacity_tokens", capacity_tokens, low=0)[0])
    return cap // block


def request_hit_tokens(trace: pd.DataFrame, *, capacity_tokens: float | None = None) -> np.ndarray:
    """Prompt tokens each request finds cached in an LRU prefix cache of ``capacity_tokens``.

    Parameters
    ----------
    trace : pandas.DataFrame
        A frame with prefix structure (see the module's docstring for the cache model).
    capacity_tokens : float, optional
        The cache's capacity in tokens (>= 0; whole blocks of ``attrs["prefix_block_tokens"]``
        count); ``None``, an unbounded cache.

    Returns
    -------
    numpy.ndarray of int64
        Per row of ``trace``, in its order: the tokens of its blocks that hit.
    """
    distances, tokens, rows, block = _references(trace)
    hit = (distances > 0) & (distances <= _capacity_blocks(capacity_tokens, block))
    return np.bincount(rows[hit], weights=tokens[hit], minlength=len(trace)).astype(np.int64)


def reuse_curve(trace: pd.DataFrame, capacity_tokens: object = None) -> pd.DataFrame:
    """Hit rate of an LRU prefix cache against its capacity, exact at every capacity, in one pass.

    Parameters
    ----------
    trace : pandas.DataFrame
        A frame with prefix structure (see the module's docstring for the cache model).
    capacity_tokens : float or sequence of float, optional
        Capacities in tokens (>= 0, finite). Default: up to 48 whole-block capacities spaced evenly
        in log from one block to the working set (the distinct blocks times the block size), where
        the unbounded cache's hit rate is reached.

    Returns
    -------
    pandas.DataFrame
        One row per capacity: ``capacity_tokens``, ``hit_rate`` (the share of all prompt tokens
        served from the cache), ``hit_tokens``.
    """
    distances, tokens, _, block = _references(trace)
    reused = distances > 0
    if capacity_tokens is None:
        working_set = int((~reused).sum()) * block
        grid = np.geomspace(block, max(working_set, block), CURVE_POINTS)
        capacities = np.unique(np.append(np.rint(grid / block) * block, working_set))
    else:
        capacities = check_array("capacity_tokens", capacity_tokens, low=0)
    order = np.argsort(distances[reused], kind="stable")
    sorted_distances = distances[reused][order]
    cumulative = np.concatenate([[0], np.cumsum(tokens[reused][order])])
    hits = cumulative[np.searchsorted(sorted_distances, capacities // block, side="right")]
    total = float(tokens.sum())
    return pd.DataFrame(
        {"capacity_tokens": capacities, "hit_rate": hits / total if total else np.nan, "hit_tokens": hits}
    )


def reuse_summary(trace: pd.DataFrame) -> dict[str, float]:
    """The reuse figures of :func:`toolkit.describe_workload`: what an unbounded cache hits, the
    share of block references that repeat an earlier block, and the working set."""
    distances, tokens, _, block = _references(trace)
    reused = distances > 0
    distinct = int((~reused).sum())
    asked = tokens > 0  # prompt blocks (an answer's are cached, not asked for)
    return {
        "prefix_block_tokens": block,
        "reuse_hit_rate": float(tokens[reused].sum() / tokens.sum()),
        "reuse_block_share": float(reused[asked].mean()),
        "reuse_working_set_tokens": distinct * block,
        "reuse_unique_prompt_tokens": int(tokens[~reused].sum()),
    }

"""The simulator's prefix caches: which leading prompt tokens of a request a replica finds computed.

A trace with prefix structure gives each request its prompt's blocks (``prefix_blocks``: ids of
consecutive blocks of ``attrs["prefix_block_tokens"]`` tokens; equal leading ids are a shared prefix).
Each replica keeps one cache, with its engine's rules:

:class:`_BlockCache` (vLLM automatic prefix caching, ``vllm/v1/core/kv_cache_manager.py`` and
``block_pool.py``; SGLang's radix cache keeps and evicts the same tokens for this purpose):

- a request's cached prefix is the longest run of its leading blocks held in the replica's KV memory
  (``KVCacheManager.get_computed_blocks``), never the whole prompt: ``max_cache_hit_length =
  request.num_tokens - 1`` there, so a prompt found whole recomputes its last token, and a hit is
  whole engine blocks (``kv_block_tokens``);
- a request's blocks are registered at its admission (``allocate_slots`` caches the blocks of the
  tokens it schedules) and held (ref-counted) while it runs: running sequences' blocks are never
  evicted, and a later request may share them;
- a finished or preempted request's blocks stay cached in the memory no running sequence needs
  (``KVCacheManager.free`` returns them to the free queue with their hashes), tail block first, so
  they are evicted tail first; a new allocation takes the least recently freed block
  (``FreeKVCacheBlockQueue``), evicting its content. So the unreferenced cache holds at most the KV
  budget minus the running sequences' tokens, and is trimmed, least recently used first, whenever
  that free memory shrinks (an admission, a decode run's growth seen at the next completion or
  admission).

:class:`toolkit._queueing.slot_cache._SlotCache` is llama.cpp's server (its module notes).

Both keep a finished request's answer after its prompt where the trace names the answer's blocks
(``answer_blocks``, a session workload's): the engine has decoded ``prompt + output - 1`` tokens into
the sequence's KV (the last sampled token never is), llama.cpp's slot keeps them all (``update_slots``
pushes each decoded ``slot.sampled`` to the slot's tokens) and vLLM caches their full blocks (the
request's ``block_hashes`` grow with its output, ``allocate_slots`` caches up to ``num_tokens``); a
preempted request keeps its prompt only. Both count tokens at the trace's block granularity: a block
is reused whole or not at all (a partial last block is cached as the tokens it holds). They track blocks in
segments, runs of blocks always used together (``toolkit._queueing.prefix_segments``): a cached segment
is the tokens of its leading blocks still cached, so a request costs the work of its few segments, not
of its many blocks. Simplifications: a prompt is registered whole at admission where vLLM registers the
chunks it schedules (a request admitted while another still prefills the same prefix finds it a few
steps early), and a running request's KV counts its whole prompt, shared blocks included (the engine
holds a shared block once).

This module is compiled with mypyc (``compiled.txt``): typed, no numpy in the per-request methods.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__: list[str] = []


class _FixedCache:
    """No prefix cache: each request finds the ``cached_tokens`` its trace gives (or none)."""

    def __init__(self, cached: Any):
        self.cached: list[int] = cached.tolist()

    def admit(self, rid: int, room: int, need: int, slack: int = 0) -> int:
        return self.cached[rid]

    def release(self, rid: int, room: int) -> None:
        return None

    def finish(self, rid: int, room: int) -> None:
        return None


class _Blocks:
    """Every request's prompt in segments: request r's segment ids are ``seg[start[r]:start[r + 1]]``,
    segment s holds ``seg_blocks[s]`` blocks, request r ``n_blocks[r]`` blocks of ``block`` tokens but
    the last, which holds the rest of its ``prompt[r]`` tokens. A hit counts whole ``unit``-token engine
    blocks of at most ``prompt - 1`` tokens. Of ``n`` requests, rows ``n + r`` (where there are ``2n``)
    are the token streams kept once request r has answered (``prefix_segments``)."""

    def __init__(
        self,
        seg: list[int],
        start: list[int],
        seg_blocks: list[int],
        n_blocks: list[int],
        prompt: list[int],
        block: int,
        unit: int,
        n: int,
    ):
        self.seg = seg
        self.start = start
        self.seg_blocks = seg_blocks
        self.n_blocks = n_blocks
        self.prompt = prompt
        self.last: list[int] = [p - (k - 1) * block for p, k in zip(prompt, n_blocks)]
        self.block = block
        self.unit = unit
        self.n = n
        self.answers = len(n_blocks) > n

    def reusable(self, hit: int, tokens: int) -> int:
        """Of ``hit`` leading tokens found computed of a sequence of ``tokens`` (its prompt, and the tokens it
        generated before a preemption), those the engine reuses: whole units, never the last token."""
        if hit > tokens - 1:
            hit = tokens - 1
        return hit // self.unit * self.unit

    def hit_tokens(self, rid: int, found: int) -> int:
        """Tokens in the first ``found`` blocks of ``rid``'s prompt."""
        if found < self.n_blocks[rid]:
            return found * self.block
        return (found - 1) * self.block + self.last[rid]


class _BlockCache:
    """A replica's block-granular prefix cache with reference counts and LRU eviction (module notes), kept
    by segment: ``held[s]`` running requests hold segment s; ``free`` maps each unreferenced cached segment
    to the tokens of its leading blocks still cached, least recently freed first."""

    def __init__(self, blocks: _Blocks):
        self.blocks = blocks
        self.held: list[int] = [0] * len(blocks.seg_blocks)
        self.free: OrderedDict[int, int] = OrderedDict()
        self.free_tokens = 0

    def size_tokens(self) -> int:
        """Tokens of cached blocks no running request holds."""
        return self.free_tokens

    def match(self, rid: int) -> int:
        """Leading prompt tokens of ``rid`` in this cache (whole trace blocks)."""
        b, held, free = self.blocks, self.held, self.free
        found = 0
        for j in range(b.start[rid], b.start[rid + 1]):
            s = b.seg[j]
            k = b.seg_blocks[s]
            if not held[s]:
                k_cached = (free.get(s, 0) + b.block - 1) // b.block
                if k_cached < k:
                    return b.hit_tokens(rid, found + k_cached)
            found += k
        return b.hit_tokens(rid, found)

    def trim(self, room: int) -> None:
        """Evict unreferenced blocks, least recently freed first (a segment's tail block first), until they
        fit in ``room`` tokens."""
        free, block = self.free, self.blocks.block
        while self.free_tokens > room and free:
            s = next(iter(free))
            tokens = free[s]
            over = self.free_tokens - room
            # its tail block (tokens less its other whole blocks), then whole blocks, until ``over`` are gone
            tail = tokens - (tokens - 1) // block * block
            gone = tail if over <= tail else tail + (over - tail + block - 1) // block * block
            if gone >= tokens:  # every block of it
                del free[s]
                self.free_tokens -= tokens
            else:
                free[s] = tokens - gone
                self.free_tokens -= gone

    def admit(self, rid: int, room: int, need: int, slack: int = 0) -> int:
        """``rid`` is admitted with ``need`` tokens (prompt and any generated before a preemption) and
        ``slack`` of paging slack, which leaves ``room`` KV tokens free: the prompt tokens it finds cached
        (and reuses), its blocks then held."""
        if self.free_tokens > room + need + slack:
            self.trim(room + need + slack)
        b, held, free = self.blocks, self.held, self.free
        found = 0  # leading blocks found
        matching = True
        for j in range(b.start[rid], b.start[rid + 1]):
            s = b.seg[j]
            count = held[s]
            held[s] = count + 1
            if count:
                if matching:
                    found += b.seg_blocks[s]
                continue
            tokens = free.pop(s, 0)
            self.free_tokens -= tokens
            if matching:
                k_cached = (tokens + b.block - 1) // b.block
                found += k_cached
                matching = k_cached == b.seg_blocks[s]
        if self.free_tokens > room:
            self.trim(room)
        return b.reusable(b.hit_tokens(rid, found), need)

    def release(self, rid: int, room: int) -> None:
        """``rid`` finished or was preempted, ``room`` KV tokens free before it frees its own: its
        blocks no other running request holds join the cache, tail first (evicted first)."""
        if self.free_tokens > room:
            self.trim(room)
        b, held, free = self.blocks, self.held, self.free
        first = b.start[rid]
        j = b.start[rid + 1] - 1
        s = b.seg[j]
        size = (b.seg_blocks[s] - 1) * b.block + b.last[rid]  # the last segment ends in the prompt's tail
        while True:
            count = held[s]
            held[s] = count - 1
            if count == 1:
                free[s] = size
                self.free_tokens += size
            if j == first:
                return
            j -= 1
            s = b.seg[j]
            size = b.seg_blocks[s] * b.block

    def finish(self, rid: int, room: int) -> None:
        """``rid`` finished, ``room`` KV tokens free before it frees its own: its kept token stream (prompt
        and answer, where the trace names the answer's blocks) joins the cache, tail first, less the
        blocks other running requests hold; a prompt's partial last block that the answer filled is not
        kept (vLLM caches full blocks only)."""
        b = self.blocks
        if not b.answers:
            self.release(rid, room)
            return
        if self.free_tokens > room:
            self.trim(room)
        held, free = self.held, self.free
        for j in range(b.start[rid], b.start[rid + 1]):
            held[b.seg[j]] -= 1
        row = b.n + rid
        first = b.start[row]
        j = b.start[row + 1] - 1
        s = b.seg[j]
        size = (b.seg_blocks[s] - 1) * b.block + b.last[row]  # the last segment ends in the stream's tail
        while True:
            if not held[s]:
                before = free.pop(s, 0)
                tokens = size if size > before else before
                free[s] = tokens
                self.free_tokens += tokens - before
            if j == first:
                return
            j -= 1
            s = b.seg[j]
            size = b.seg_blocks[s] * b.block

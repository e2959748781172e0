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

:class:`_SlotCache` (llama.cpp's ``llama-server``, ``tools/server/server-context.cpp``):

- a request takes an idle slot (``get_available_slot``): the one whose last prompt shares the
  largest fraction of the new prompt (longest common prefix over the new prompt's length) above
  ``--slot-prompt-similarity`` (default 0.1, ``common/common.h``), else the least recently used idle
  slot (the last of equals, as its ``<=`` comparison picks);
- it reuses the common prefix of the new prompt and the slot's last one, less the last token when
  that is the whole prompt (``update_slots`` evaluates at least one token for the logits);
- with ``--kv-unified`` (the toolkit's ``LlamaServer`` default) every slot shares one KV buffer: an
  idle slot's prompt holds cells until a new sequence needs them, then ``try_clear_idle_slots``
  purges idle slots one at a time in slot order. The host-memory prompt cache (``--cache-ram``) is
  not modelled.

Both count tokens at the trace's block granularity: a block is reused whole or not at all, and only a
request's prompt blocks are cached (a trace names no blocks for its answers). They track blocks in
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


class _Blocks:
    """Every request's prompt in segments: request r's segment ids are ``seg[start[r]:start[r + 1]]``,
    segment s holds ``seg_blocks[s]`` blocks, request r ``n_blocks[r]`` blocks of ``block`` tokens but
    the last, which holds the rest of its ``prompt[r]`` tokens. A hit counts whole ``unit``-token engine
    blocks of at most ``prompt - 1`` tokens."""

    def __init__(
        self,
        seg: list[int],
        start: list[int],
        seg_blocks: list[int],
        n_blocks: list[int],
        prompt: list[int],
        block: int,
        unit: int,
    ):
        self.seg = seg
        self.start = start
        self.seg_blocks = seg_blocks
        self.n_blocks = n_blocks
        self.prompt = prompt
        self.last: list[int] = [p - (k - 1) * block for p, k in zip(prompt, n_blocks)]
        self.block = block
        self.unit = unit

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


class _SlotCache:
    """A llama-server replica's slots: each keeps its last prompt (module notes)."""

    def __init__(self, blocks: _Blocks, slots: int, similarity: float):
        self.blocks = blocks
        self.similarity = similarity
        self.prompt: list[int] = [-1] * slots  # the request whose prompt the slot holds (-1: empty)
        self.busy: list[bool] = [False] * slots
        self.last_used: list[int] = [-1] * slots
        self.slot_of: dict[int, int] = {}
        self.uses = 0

    def size_tokens(self) -> int:
        """Tokens of the prompts idle slots hold."""
        total = 0
        for s, rid in enumerate(self.prompt):
            if rid >= 0 and not self.busy[s]:
                total += self._tokens(rid)
        return total

    def _tokens(self, rid: int) -> int:
        return self.blocks.prompt[rid]

    def common(self, a: int, rid: int) -> int:
        """Tokens of the common prefix of request ``a``'s prompt and ``rid``'s (whole trace blocks): it
        ends on a segment boundary of both."""
        b = self.blocks
        i, j, end_i, end_j = b.start[rid], b.start[a], b.start[rid + 1], b.start[a + 1]
        n = 0
        while i < end_i and j < end_j and b.seg[i] == b.seg[j]:
            n += b.seg_blocks[b.seg[i]]
            i += 1
            j += 1
        if not n:
            return 0
        # the last common block: whole unless it ends either prompt
        mine_size = b.last[rid] if n == b.n_blocks[rid] else b.block
        their_size = b.last[a] if n == b.n_blocks[a] else b.block
        return (n - 1) * b.block + min(mine_size, their_size)

    def match(self, rid: int) -> int:
        """The longest common prefix of ``rid``'s prompt with an idle slot's (tokens)."""
        best = 0
        for s, held in enumerate(self.prompt):
            if held >= 0 and not self.busy[s]:
                best = max(best, self.common(held, rid))
        return best

    def trim(self, room: int) -> None:
        """Purge idle slots, in slot order, while their prompts exceed ``room`` tokens."""
        over = self.size_tokens() - room
        for s, rid in enumerate(self.prompt):
            if over <= 0:
                break
            if rid >= 0 and not self.busy[s]:
                over -= self._tokens(rid)
                self.prompt[s] = -1

    def admit(self, rid: int, room: int, need: int, slack: int = 0) -> int:
        """``rid`` takes a slot (``get_available_slot``'s rule) with ``need`` tokens and ``slack``, which
        leaves ``room`` KV tokens free: the prompt tokens it reuses."""
        self.trim(room + need + slack)
        n_tokens = self._tokens(rid)
        chosen, best = -1, 0.0
        for s, held in enumerate(self.prompt):
            if self.busy[s] or held < 0:
                continue
            sim = self.common(held, rid) / n_tokens
            if sim > best and sim > self.similarity:
                chosen, best = s, sim
        if chosen < 0:
            oldest = 0
            for s in range(len(self.prompt)):
                if not self.busy[s] and (chosen < 0 or self.last_used[s] <= oldest):
                    chosen, oldest = s, self.last_used[s]
        if chosen < 0:
            raise RuntimeError("no idle llama-server slot: the simulator admitted more requests than slots")
        held = self.prompt[chosen]
        cached = 0 if held < 0 else self.blocks.reusable(self.common(held, rid), need)
        self.prompt[chosen] = rid
        self.busy[chosen] = True
        self.slot_of[rid] = chosen
        self.trim(room)
        return cached

    def release(self, rid: int, room: int) -> None:
        """``rid`` finished or was preempted: its slot falls idle, keeping its prompt."""
        self.trim(room)
        s = self.slot_of.pop(rid)
        self.busy[s] = False
        self.last_used[s] = self.uses
        self.uses += 1

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
request's prompt blocks are cached (a trace names no blocks for its answers). Simplifications: a prompt
is registered whole at admission where vLLM registers the chunks it schedules (a request admitted while
another still prefills the same prefix finds it a few steps early), and a running request's KV counts
its whole prompt, shared blocks included (the engine holds a shared block once).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pandas as pd

__all__: list[str] = []


def check_prefix_blocks(trace: pd.DataFrame) -> int:
    """The block size of a trace's ``prefix_blocks`` (``attrs["prefix_block_tokens"]``), checked: each
    request has ``ceil(prompt_tokens / block)`` ids, else a ValueError naming the first row that does not."""
    block = trace.attrs.get("prefix_block_tokens")
    if not isinstance(block, int | np.integer) or block < 1:
        raise ValueError(f"trace.attrs['prefix_block_tokens'] must be an int >= 1 with prefix_blocks, got {block!r}")
    counts = trace["prefix_blocks"].map(len).to_numpy(dtype=np.int64)
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    bad = np.flatnonzero(counts != (prompt + block - 1) // block)
    if bad.size:
        raise ValueError(
            f"trace prefix_blocks must hold ceil(prompt_tokens / {block}) ids per request; row {bad[0]} has "
            f"{counts[bad[0]]} for {prompt[bad[0]]} tokens"
        )
    return int(block)


class _FixedCache:
    """No prefix cache: each request finds the ``cached_tokens`` its trace gives (or none)."""

    def __init__(self, cached: np.ndarray):
        self.cached: list[int] = cached.tolist()

    def admit(self, rid: int, room: int, need: int, slack: int = 0) -> int:
        return self.cached[rid]

    def release(self, rid: int, room: int) -> None:
        return None


class _Blocks:
    """Every request's prompt blocks (a tuple of ids each, blocks of ``block`` tokens but the last, which
    holds the rest of the prompt) and the engine's reuse granularity: a hit counts whole ``unit``-token
    engine blocks of at most ``prompt - 1`` tokens."""

    def __init__(self, ids: list[tuple[int, ...]], prompt: list[int], block: int, unit: int):
        self.ids = ids
        self.prompt = prompt
        self.last: list[int] = [p - (len(t) - 1) * block for p, t in zip(prompt, ids)]
        self.block = block
        self.unit = unit

    def reusable(self, hit: int, tokens: int) -> int:
        """Of ``hit`` leading tokens found computed of a sequence of ``tokens`` (its prompt, and the tokens it
        generated before a preemption), those the engine reuses: whole units, never the last token."""
        if hit > tokens - 1:
            hit = tokens - 1
        return hit // self.unit * self.unit


class _BlockCache:
    """A replica's block-granular prefix cache with reference counts and LRU eviction (module notes)."""

    def __init__(self, blocks: _Blocks):
        self.blocks = blocks
        self.held: dict[int, int] = {}  # block id -> running requests holding it
        self.free: OrderedDict[int, int] = OrderedDict()  # unreferenced cached block -> tokens, LRU first
        self.free_tokens = 0

    def size_tokens(self) -> int:
        """Tokens of cached blocks no running request holds."""
        return self.free_tokens

    def match(self, rid: int) -> int:
        """Leading prompt tokens of ``rid`` in this cache (whole trace blocks)."""
        b = self.blocks
        ids = b.ids[rid]
        hit = 0
        for block in ids:
            if block not in self.held and block not in self.free:
                return hit
            hit += b.block
        return hit - b.block + b.last[rid]

    def trim(self, room: int) -> None:
        """Evict unreferenced blocks, least recently freed first, until they fit in ``room`` tokens."""
        free = self.free
        while self.free_tokens > room and free:
            self.free_tokens -= free.popitem(last=False)[1]

    def admit(self, rid: int, room: int, need: int, slack: int = 0) -> int:
        """``rid`` is admitted with ``need`` tokens (prompt and any generated before a preemption) and
        ``slack`` of paging slack, which leaves ``room`` KV tokens free: the prompt tokens it finds cached
        (and reuses), its blocks then held."""
        if self.free_tokens > room + need + slack:
            self.trim(room + need + slack)
        b, held, free = self.blocks, self.held, self.free
        ids = b.ids[rid]
        found = 0  # leading blocks found
        matching = True
        for block in ids:
            count = held.get(block, 0)
            if count:
                held[block] = count + 1
            else:
                size = free.pop(block, -1)
                if size < 0:
                    matching = False
                else:
                    self.free_tokens -= size
                held[block] = 1
            if matching:
                found += 1
        hit = found * b.block if found < len(ids) else (found - 1) * b.block + b.last[rid]
        if self.free_tokens > room:
            self.trim(room)
        return b.reusable(hit, need)

    def release(self, rid: int, room: int) -> None:
        """``rid`` finished or was preempted, ``room`` KV tokens free before it frees its own: its
        blocks no other running request holds join the cache, tail first (evicted first)."""
        if self.free_tokens > room:
            self.trim(room)
        b, held, free = self.blocks, self.held, self.free
        size = b.last[rid]
        for block in reversed(b.ids[rid]):
            count = held[block]
            if count == 1:
                del held[block]
                free[block] = size
                self.free_tokens += size
            else:
                held[block] = count - 1
            size = b.block


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
        """Tokens of the common prefix of request ``a``'s prompt and ``rid``'s (whole trace blocks)."""
        b = self.blocks
        mine, theirs = b.ids[rid], b.ids[a]
        n = 0
        for x, y in zip(mine, theirs):
            if x != y:
                break
            n += 1
        if not n:
            return 0
        # the last common block: whole unless it ends either prompt
        mine_size = b.last[rid] if n == len(mine) else b.block
        their_size = b.last[a] if n == len(theirs) else b.block
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


# llama-server's default ``--slot-prompt-similarity`` (``common/common.h``)
SLOT_PROMPT_SIMILARITY = 0.1
# backends that serve through llama.cpp's server slots (``toolkit/_data/backends.csv`` names)
SLOT_BACKENDS = ("llamacpp", "ollama")


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
    block = check_prefix_blocks(trace)
    ids = [tuple(b) for b in trace["prefix_blocks"].tolist()]
    prompt = trace["prompt_tokens"].to_numpy(dtype=np.int64)
    if order is not None:
        ids, prompt = [ids[i] for i in order], prompt[order]
    if backend_name in SLOT_BACKENDS:
        return [_SlotCache(_Blocks(ids, prompt.tolist(), block, 1), slots, similarity) for _ in range(replicas)]
    blocks = _Blocks(ids, prompt.tolist(), block, unit_tokens)
    return [_BlockCache(blocks) for _ in range(replicas)]

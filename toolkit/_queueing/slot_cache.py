"""The simulator's llama.cpp prefix cache: per-slot prompt reuse and the host-memory prompt cache, as
``llama-server`` does them.

``_SlotCache`` (llama.cpp's ``llama-server``: ``tools/server/server-context.cpp`` for the slots,
``server_prompt_cache`` in ``tools/server/server-task.cpp`` for the host cache, PR 16391):

- a request takes an idle slot (``get_available_slot``): the one whose last prompt shares the
  largest fraction of the new prompt (longest common prefix over the new prompt's length) above
  ``--slot-prompt-similarity`` (default 0.1, ``common/common.h``), else the least recently used idle
  slot (the last of equals, as its ``<=`` comparison picks);
- with the host-memory prompt cache (``--cache-ram``, 8192 MiB by default: a list of saved prompts,
  oldest first), a slot picked by recency, or by similarity while keeping under half of its own
  prompt, first saves that prompt to the cache (``prompt_save``: skipped when a cached prompt already
  holds it whole; cached prompts it holds whole are dropped; the oldest are evicted past the limit),
  then loads the cached prompt that keeps the most of both (``server_prompt_cache::load``: scanning
  oldest first, an entry sharing at least a quarter of itself with the new prompt replaces the best so
  far when it beats it on both the share of itself and the share of the new prompt kept, the slot's
  own prompt being the first best). A load moves the prompt out of the cache into the slot;
- with the cache on and ``--kv-unified`` (the toolkit's ``LlamaServer`` default), every launch saves
  each idle slot's prompt to the cache and clears the slot (``--cache-idle-slots``, on by default), so
  an idle slot keeps its prompt only until the next request starts;
- the request reuses the common prefix of the new prompt and the slot's (loaded) one, less the last
  token when that is the whole prompt (``update_slots`` evaluates at least one token for the logits);
- every slot shares one KV buffer: an idle slot's prompt holds cells until a new sequence needs them,
  then ``try_clear_idle_slots`` purges idle slots one at a time in slot order (without saving them).

The cache's limit is in tokens here: its bytes over the model's KV bytes per token, the size of a
saved sequence state. A finished request's slot keeps its prompt and answer where the trace names the
answer's blocks (``toolkit._queueing.prefix_cache``'s notes). Blocks are counted as there (``_Blocks``).

This module is compiled with mypyc (``compiled.txt``): typed, no numpy in the per-request methods.
"""

from __future__ import annotations

from toolkit._queueing.prefix_cache import _Blocks

__all__: list[str] = []

# server_prompt_cache::load skips a cached prompt sharing less than this share of itself ("don't trash
# large prompts"); get_available_slot saves a slot picked by similarity that keeps less than KEEP_SAVE
KEEP_LOAD, KEEP_SAVE = 0.25, 0.5


class _SlotCache:
    """A llama-server replica's slots, each keeping its last prompt, and its host prompt cache of
    ``host_tokens`` (0: none, -1: no limit; module notes)."""

    def __init__(self, blocks: _Blocks, slots: int, similarity: float, host_tokens: int = 0):
        self.blocks = blocks
        self.similarity = similarity
        self.prompt: list[int] = [-1] * slots  # the request whose prompt the slot holds (-1: empty)
        self.busy: list[bool] = [False] * slots
        self.last_used: list[int] = [-1] * slots
        self.slot_of: dict[int, int] = {}
        self.uses = 0
        self.host_tokens = host_tokens
        self.host: list[int] = []  # the cached prompts' rows, oldest first

    def size_tokens(self) -> int:
        """Tokens of the prompts idle slots and the host cache hold."""
        return self._idle_tokens() + self._host_used()

    def _idle_tokens(self) -> int:
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
        """The longest common prefix of ``rid``'s prompt with an idle slot's or a cached one (tokens)."""
        best = 0
        for s, held in enumerate(self.prompt):
            if held >= 0 and not self.busy[s]:
                best = max(best, self.common(held, rid))
        for held in self.host:
            best = max(best, self.common(held, rid))
        return best

    def trim(self, room: int) -> None:
        """Purge idle slots, in slot order, while their prompts exceed ``room`` tokens."""
        over = self._idle_tokens() - room
        for s, rid in enumerate(self.prompt):
            if over <= 0:
                break
            if rid >= 0 and not self.busy[s]:
                over -= self._tokens(rid)
                self.prompt[s] = -1

    def _host_used(self) -> int:
        total = 0
        for rid in self.host:
            total += self._tokens(rid)
        return total

    def _save(self, held: int) -> None:
        """``prompt_save``: ``held``'s prompt joins the host cache (``server_prompt_cache::alloc``)."""
        size = self._tokens(held)
        for rid in self.host:
            if self.common(rid, held) == size:
                return
        if self.host_tokens > 0 and size > self.host_tokens:
            return
        self.host = [rid for rid in self.host if self.common(held, rid) != self._tokens(rid)]
        self.host.append(held)
        self._evict()

    def _evict(self) -> None:
        if self.host_tokens > 0:
            used = self._host_used()
            while self.host and used > self.host_tokens:
                used -= self._tokens(self.host.pop(0))

    def _load(self, held: int, rid: int) -> int:
        """``prompt_load``: the cached prompt that replaces the slot's ``held`` one for ``rid`` (-1:
        none), taken out of the cache."""
        size = self._tokens(rid)
        lcp = 0 if held < 0 else self.common(held, rid)
        keep_best = -1.0 if held < 0 else lcp / self._tokens(held)
        sim_best = lcp / size
        best = -1
        for i, cached in enumerate(self.host):
            lcp = self.common(cached, rid)
            keep = lcp / self._tokens(cached)
            if keep < KEEP_LOAD:
                continue
            if keep > keep_best and lcp / size > sim_best:
                keep_best, sim_best, best = keep, lcp / size, i
        return -1 if best < 0 else self.host.pop(best)

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
        update = chosen < 0 or best * n_tokens < KEEP_SAVE * self._tokens(self.prompt[chosen])
        if chosen < 0:
            oldest = 0
            for s in range(len(self.prompt)):
                if not self.busy[s] and (chosen < 0 or self.last_used[s] <= oldest):
                    chosen, oldest = s, self.last_used[s]
        if chosen < 0:
            raise RuntimeError("no idle llama-server slot: the simulator admitted more requests than slots")
        held = self.prompt[chosen]
        if self.host_tokens and update:
            if held >= 0:
                self._save(held)
            loaded = self._load(held, rid)
            if loaded >= 0:
                held = loaded
        cached = 0 if held < 0 else self.blocks.reusable(self.common(held, rid), need)
        self.prompt[chosen] = rid
        self.busy[chosen] = True
        self.slot_of[rid] = chosen
        if self.host_tokens:
            for s, idle in enumerate(self.prompt):
                if idle >= 0 and not self.busy[s]:
                    self._save(idle)
                    self.prompt[s] = -1
        self.trim(room)
        return cached

    def release(self, rid: int, room: int) -> None:
        """``rid`` was preempted: its slot falls idle, keeping its prompt."""
        self.trim(room)
        s = self.slot_of.pop(rid)
        self.busy[s] = False
        self.last_used[s] = self.uses
        self.uses += 1

    def finish(self, rid: int, room: int) -> None:
        """``rid`` finished: its slot falls idle, keeping its prompt and, where the trace names the
        answer's blocks, its answer (the kept stream, row ``n + rid``)."""
        s = self.slot_of[rid]
        self.release(rid, room)
        if self.blocks.answers:
            self.prompt[s] = self.blocks.n + rid

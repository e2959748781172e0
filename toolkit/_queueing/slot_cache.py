"""The simulator's llama.cpp prefix cache: per-slot prompt reuse, as ``llama-server`` does it.

``_SlotCache`` (llama.cpp's ``llama-server``, ``tools/server/server-context.cpp``):

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

A finished request's slot keeps its prompt and answer where the trace names the answer's blocks
(``toolkit._queueing.prefix_cache``'s notes). Blocks are counted as there (``_Blocks``).

This module is compiled with mypyc (``compiled.txt``): typed, no numpy in the per-request methods.
"""

from __future__ import annotations

from toolkit._queueing.prefix_cache import _Blocks

__all__: list[str] = []


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

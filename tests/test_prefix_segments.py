"""The simulator's block cache tracks blocks in segments (toolkit._queueing.prefix_segments): on random traces,
with ids repeated inside a prompt, negative and 64-bit ids and partial last blocks, it finds, holds and evicts what
a cache of single blocks with the same rules does (written out here block by block)."""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pytest

from toolkit._queueing.prefix_cache import _BlockCache
from toolkit._queueing.prefix_segments import blocks_of


class BlockByBlock:
    """vLLM's block pool rules one block at a time: held blocks are ref-counted, freed ones queue tail first and
    are evicted least recently freed first while they exceed the room left; a hit is the leading blocks found."""

    def __init__(self, rows, prompt, block):
        self.rows, self.prompt, self.block = rows, prompt, block
        self.held, self.free = {}, OrderedDict()

    def size(self, rid, i):
        return self.prompt[rid] - (len(self.rows[rid]) - 1) * self.block if i == len(self.rows[rid]) - 1 else self.block

    def trim(self, room):
        while sum(self.free.values()) > room and self.free:
            self.free.popitem(last=False)

    def found(self, rid):
        n = 0
        for b in self.rows[rid]:
            if b not in self.held and b not in self.free:
                break
            n += 1
        return n

    def admit(self, rid, room, need):
        self.trim(room + need)
        n = self.found(rid)
        for b in self.rows[rid]:
            self.free.pop(b, None)
            self.held[b] = self.held.get(b, 0) + 1
        self.trim(room)
        return n

    def release(self, rid, room):
        self.trim(room)
        for i in reversed(range(len(self.rows[rid]))):
            b = self.rows[rid][i]
            self.held[b] -= 1
            if not self.held[b]:
                del self.held[b]
                self.free[b] = self.size(rid, i)


def random_rows(rng, n):
    pool, rows = [()], []
    for _ in range(n):
        if rng.random() < 0.1:  # repeats inside a prompt
            new = tuple(rng.choice([5, 7, -3, 2**62 + 1]) for _ in range(rng.randint(1, 4)))
        else:
            new = tuple(
                rng.randint(-(2**63), 2**63 - 1) if rng.random() < 0.3 else rng.randint(0, 60) for _ in range(4)
            )
        row = rng.choice(pool) + new[: rng.randint(1, 4)]
        pool.append(row)
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_segments_cache_as_single_blocks_do(seed):
    rng = random.Random(seed)
    block = rng.choice([1, 4, 16])
    rows = random_rows(rng, rng.randint(1, 30))
    prompt = [(len(r) - 1) * block + rng.randint(1, block) for r in rows]
    ids = np.array([b for r in rows for b in r], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    blocks = blocks_of(ids, offsets, np.array(prompt, dtype=np.int64), block, 1)
    cache, reference = _BlockCache(blocks), BlockByBlock(rows, prompt, block)
    running, budget = [], rng.randint(block, 40 * block)
    for _ in range(150):
        if running and (rng.random() < 0.5 or len(running) > 5):
            rid, room = running.pop(rng.randrange(len(running))), rng.randint(-5, budget)
            cache.release(rid, room)
            reference.release(rid, room)
        else:
            rid, room = rng.randrange(len(rows)), rng.randint(0, budget)
            if rid in running:
                continue
            n = reference.admit(rid, room, prompt[rid])
            assert cache.admit(rid, room, prompt[rid]) == min(blocks.hit_tokens(rid, n), prompt[rid] - 1)
            running.append(rid)
        assert cache.size_tokens() == sum(reference.free.values())
        assert [cache.match(r) for r in range(len(rows))] == [
            blocks.hit_tokens(r, reference.found(r)) for r in range(len(rows))
        ]

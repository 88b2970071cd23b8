"""The GPU's KV blocks (the GPU cache of :mod:`sim.serving.blocks`).

**GPU cache** (:class:`GpuCache`): ``capacity`` blocks of ``block_tokens``
tokens.  Hashed (prefix-cacheable) blocks live in ``cached`` with a
reference count (requests using them) and a ``ready`` flag (False while
their KV is being loaded).  Blocks of a running request that carry no hash
(its partial last block, generated tokens, duplicates) are counted in
``private``.  Blocks nobody references stay cached and evictable in LRU
order; a finishing request releases its blocks tail first, so its prefix is
evicted last (as vLLM's free-block queue does).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat


class GpuBlock:
    __slots__ = ("key", "ref_cnt", "ready")

    def __init__(self, key: int, ready: bool):
        self.key = key
        self.ref_cnt = 1
        self.ready = ready


class GpuCache:
    """The GPU's KV blocks: cached (hashed) ones and per-request private ones."""

    def __init__(self, capacity: int, prefix_cache: bool = True):
        if capacity <= 0:
            raise ValueError(f"GPU cache needs > 0 blocks, got {capacity}")
        self.capacity = capacity
        self.prefix_cache = prefix_cache
        self.cached: dict[int, GpuBlock] = {}
        self.evictable: OrderedDict[int, GpuBlock] = OrderedDict()  # ref 0, LRU first
        self.private = 0
        self.evictions = 0

    @property
    def used(self) -> int:
        return len(self.cached) + self.private

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def lookup(self, key: int) -> GpuBlock | None:
        b = self.cached.get(key) if self.prefix_cache else None
        return b if b is not None and b.ready else None

    def acquire(self, block: GpuBlock) -> None:
        if block.ref_cnt == 0:
            del self.evictable[block.key]
        block.ref_cnt += 1

    def allocate(self, n: int) -> bool:
        """Reserve ``n`` private blocks, evicting unreferenced cached ones (LRU)."""
        if self.free + len(self.evictable) < n:
            return False
        while self.free < n:
            key, block = self.evictable.popitem(last=False)
            if block.ref_cnt != 0 or not block.ready:  # pragma: no cover - book-keeping bug
                raise RuntimeError(f"GPU block {key} evicted while in use")
            del self.cached[key]
            self.evictions += 1
        self.private += n
        return True

    def promote(self, key: int, ready: bool) -> GpuBlock | None:
        """Turn one of the caller's private blocks into cached block ``key``
        (held once by the caller); None if ``key`` is cached already."""
        if key in self.cached:
            return None
        self.private -= 1
        block = self.cached[key] = GpuBlock(key, ready)
        return block

    def promote_all(self, keys: Sequence[int], ready: bool) -> tuple[list[GpuBlock | None], int]:
        """:meth:`promote` for each of ``keys`` in order: the blocks (None where
        the key was cached already, or repeats an earlier one) and how many of
        the caller's private blocks became cached."""
        cached = self.cached
        if not any(map(cached.__contains__, keys)) and len(set(keys)) == len(keys):
            made_all = list(map(GpuBlock, keys, repeat(ready, len(keys))))
            cached.update(zip(keys, made_all, strict=True))
            self.private -= len(made_all)
            return made_all, len(made_all)  # type: ignore[return-value]
        out: list[GpuBlock | None] = []
        for key in keys:
            if key in cached:
                out.append(None)
            else:
                block = cached[key] = GpuBlock(key, ready)
                out.append(block)
        made = len(out) - out.count(None)
        self.private -= made
        return out, made

    def release(self, blocks: Sequence[GpuBlock], private: int) -> None:
        """A request lets go of its blocks: tail first, so its prefix is the
        most recently used."""
        self.private -= private
        for block in reversed(blocks):
            block.ref_cnt -= 1
            if block.ref_cnt:
                continue
            if self.prefix_cache and block.ready:
                self.evictable[block.key] = block
            else:
                del self.cached[block.key]

"""Hit-rate ceilings of a request trace: an infinite cache, Belady's optimal
eviction and LRU at a given capacity.

Clock-free: the ceilings ask only which blocks a trace requests in which
order, not when.  Every request looks up its prompt's block hashes (the
engine's blocks, :func:`sim.serving.requests.load_requests`) in one cache of
``capacity`` blocks, then puts all of them in it; requests go in arrival
order, each one's blocks in prompt order.

**What counts as a hit.**  As kvtier counts a design's ``hit_blocks``
(:meth:`sim.serving.policy.manager.BlockManager.lookup`): a request's hit
is the longest prefix of its blocks that the cache held *before* the
request, never the block of its last token (at most ``(input_tokens - 1)
// block_tokens`` blocks, as vLLM recomputes the last token); the hit rate
is hit blocks x ``block_tokens`` / prompt tokens, as
:func:`sim.serving.metrics.serving_summary` gives ``hit_rate_*``.  A
request's own blocks do not hit each other.  With prefix-chained hashes
(equal hash = equal prefix; Mooncake's ``hash_ids``, kvtier's session
hashes) a block is only ever requested right after its predecessor, so both
policies below keep prefix-closed sets: LRU touches a request's blocks
tail first, so the tail is evicted first (vLLM's
``LRUOffloadingManager.touch``: ``for block_hash in reversed(...):
move_to_end``; kvtier's ``BlockManager._touch``); Belady's next use of a
block is later than its predecessor's.  So per prefix and per block count
the same there (tests/sim/test_serving_oracle.py holds LRU's prefix hits to
a per-block count, and Belady's to an exhaustive search of every offline
choice of cache contents, on small chained traces).

Each request looks up once, as it does in kvtier without preemption; a
request re-admitted after preemption looks up again and may find its own
blocks, and kvtier logs that last lookup, so a design that preempts can
pass these ceilings (they bound first lookups only).  The ceilings ignore
time, too: a block is in the cache from its request's arrival, not from the
end of its prefill.

* **infinite**: a block hits if an earlier request held its hash
  (no capacity, no eviction: the trace's reuse, the ceiling of ceilings).
* **LRU** at ``capacity`` blocks: on each access the block becomes most
  recently used (inserted if missing); while more than ``capacity`` are
  held, the least recently used goes.
* **Belady** (MIN, Belady 1966; Mattson et al. 1970) at ``capacity``:
  inserted on each miss; while more than ``capacity`` are held, the block
  whose next request is farthest in the future goes (one never requested
  again first; the block just inserted may go at once, i.e. bypass).  It
  maximises block hits for a cache of that size; it is the ceiling of any
  eviction policy at that capacity, LRU's included.

Speed from arrays: blocks get dense ids (``np.unique``); each access's next
use comes from one stable sort (the reverse-scan answer, vectorised); Belady
keeps a max-heap of next-use indices with lazy deletion (an index names its
access, so it is unique among the held blocks and names its block); LRU is
an ``OrderedDict``.  Costs O(accesses x log capacity).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Accesses", "Ceilings", "accesses", "belady", "ceilings", "infinite", "lru"]


@dataclass(frozen=True)
class Accesses:
    """A trace's block requests in order: request ``r`` asks for blocks
    ``ids[ptr[r]:ptr[r + 1]]`` (dense ids of their hashes), of which at most
    ``limit[r]`` count as hits; the first ``warm`` requests only fill the
    cache (a warm-up pass, not counted); ``prompt_tokens`` is the counted
    requests' input tokens."""

    ids: np.ndarray
    ptr: np.ndarray
    limit: np.ndarray
    warm: int
    prompt_tokens: int
    block_tokens: int

    @property
    def distinct(self) -> int:
        """Distinct blocks: the capacity beyond which every policy equals infinite."""
        return int(self.ids.max()) + 1 if len(self.ids) else 0

    def next_use(self) -> np.ndarray:
        """Per access, the index of the next access to the same block;
        ``n + i`` (past every access, distinct) where there is none."""
        n = len(self.ids)
        order = np.argsort(self.ids, kind="stable")
        nxt = n + np.arange(n, dtype=np.int64)
        same = self.ids[order[1:]] == self.ids[order[:-1]]
        nxt[order[:-1][same]] = order[1:][same]
        return nxt


def accesses(
    hashes: Sequence[Sequence[int]],
    input_tokens: Sequence[int],
    block_tokens: int,
    warm: int = 0,
) -> Accesses:
    """The :class:`Accesses` of requests in arrival order (each one's engine
    block hashes and input tokens; the first ``warm`` a warm-up pass)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    if len(hashes) != len(input_tokens):
        raise ValueError(f"{len(hashes)} hash lists for {len(input_tokens)} requests")
    counts = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(hashes))
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.fromiter((int(h) for hs in hashes for h in hs), dtype=np.int64, count=int(ptr[-1]))
    _, ids = np.unique(flat, return_inverse=True)
    tokens = np.asarray(input_tokens, dtype=np.int64)
    limit = np.minimum(counts, np.maximum((tokens - 1) // block_tokens, 0))
    return Accesses(
        ids.astype(np.int64).reshape(-1), ptr, limit, warm, int(tokens[warm:].sum()), block_tokens
    )


def _prefix_hits(held, ids: list[int], limit: int) -> int:
    """Leading blocks of ``ids`` (at most ``limit``) for which ``held(id)``."""
    k = 0
    while k < limit and held(ids[k]):
        k += 1
    return k


def infinite(acc: Accesses) -> int:
    """Hit blocks with no capacity limit: a block hits if an earlier request
    asked for it."""
    first = np.full(acc.distinct, len(acc.ptr), dtype=np.int64)  # first request per block
    owner = np.repeat(np.arange(len(acc.ptr) - 1), np.diff(acc.ptr))
    np.minimum.at(first, acc.ids, owner)
    earlier = (first[acc.ids] < owner).tolist()
    ptr, hits = acc.ptr.tolist(), 0
    for r in range(acc.warm, len(ptr) - 1):
        a = ptr[r]
        hits += _prefix_hits(earlier.__getitem__, range(a, ptr[r + 1]), int(acc.limit[r]))
    return hits


def lru(acc: Accesses, capacity: int) -> int:
    """Hit blocks of an LRU cache of ``capacity`` blocks (module docstring)."""
    _check(capacity)
    cache: OrderedDict[int, None] = OrderedDict()
    ids, ptr, limit = acc.ids.tolist(), acc.ptr.tolist(), acc.limit.tolist()
    hits = 0
    for r in range(len(ptr) - 1):
        blocks = ids[ptr[r] : ptr[r + 1]]
        if r >= acc.warm:
            hits += _prefix_hits(cache.__contains__, blocks, limit[r])
        for b in reversed(blocks):  # tail first: the first block ends most recent
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
        while len(cache) > capacity:
            cache.popitem(last=False)
    return hits


def belady(acc: Accesses, capacity: int) -> int:
    """Hit blocks of Belady's MIN with ``capacity`` blocks (module docstring)."""
    _check(capacity)
    ids, ptr, limit = acc.ids.tolist(), acc.ptr.tolist(), acc.limit.tolist()
    nxt = acc.next_use().tolist()
    n = len(ids)
    held = [-1] * acc.distinct  # per block: the next-use index it is held under, -1 = not held
    heap: list[int] = []  # -(next-use index) of held blocks, stale ones skipped
    size = hits = 0
    for r in range(len(ptr) - 1):
        a, b = ptr[r], ptr[r + 1]
        if r >= acc.warm:
            hits += _prefix_hits(lambda i: held[ids[i]] >= 0, range(a, b), limit[r])
        for i in range(a, b):
            block, key = ids[i], nxt[i]
            if held[block] < 0:
                size += 1
            held[block] = key
            heapq.heappush(heap, -key)
            while size > capacity:
                far = -heapq.heappop(heap)
                victim = ids[far - n] if far >= n else ids[far]
                if held[victim] == far:  # else a stale key of a block re-requested since
                    held[victim] = -1
                    size -= 1
    return hits


def _check(capacity: int) -> None:
    if capacity < 0 or capacity != int(capacity):
        raise ValueError(f"capacity must be a whole number of blocks >= 0, got {capacity}")


@dataclass(frozen=True)
class Ceilings:
    """Hit rates (hit tokens / prompt tokens) of the three caches at
    ``capacity`` blocks."""

    capacity: int
    infinite: float
    belady: float
    lru: float


def ceilings(acc: Accesses, capacity: int) -> Ceilings:
    """The three hit rates of ``acc`` at ``capacity`` blocks."""
    rate = lambda hits: hits * acc.block_tokens / acc.prompt_tokens if acc.prompt_tokens else 0.0  # noqa: E731
    return Ceilings(capacity, rate(infinite(acc)), rate(belady(acc, capacity)),
                    rate(lru(acc, capacity)))  # fmt: skip

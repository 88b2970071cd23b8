"""Reading a tier's LRU heaps run by run while one offload set is placed.

:class:`sim.serving.tiers.lru.LruRuns` keeps, per device, a heap of *runs*
(entries in ascending stamp) with a cursor each; :meth:`LruRuns.top` looks
at the top item's entry and :meth:`LruRuns.pop` moves that run's cursor on
with one ``heapreplace``.  While one offload set is placed
(:mod:`sim.serving.tiers.pooldrop`) nothing else touches the tier: the evictable
entries only lose the victims taken, and new entries are not ready (never
offered).  So the entries of the top run come off a device's heap one after
the other for as long as their stamps stay below every other item's (the
heap's two children of the root bound them): :class:`Cursors` reads them
straight off the run's list, and writes the cursor back to the heap once,
when another run comes first or the set is done.

The entries given, and those consumed as stale on the way, are exactly
those :meth:`LruRuns.top` / :meth:`LruRuns.pop` give and consume: the same
validity test (alive at that stamp; else skipped; alive but not evictable:
``heaped`` reset, offered again when it becomes evictable), in the same
order, and a device's heap after :meth:`Cursors.commit` holds the same
(stamp, sequence) items as after the same calls of ``top`` and ``pop``.
"""

from __future__ import annotations

import heapq

from sim.serving.tiers.entry import READY, Entry
from sim.serving.tiers.tier import Tier

INF = float("inf")


class Cursors:
    """Per device of ``tier``, the run on top of its LRU heap being read."""

    __slots__ = ("alive", "heaps", "ents", "stamps", "pos", "start", "bound", "cand")

    def __init__(self, tier: Tier):
        n = len(tier.lru.heaps)
        self.alive = tier.entries
        self.heaps = tier.lru.heaps
        self.ents: list[list[Entry] | None] = [None] * n  # the top run's entries (None: unread)
        self.stamps: list[list[int]] = [[]] * n  # their stamps when offered
        self.pos = [0] * n  # the cursor: the next entry of the run not consumed
        self.start = [0] * n  # the cursor as the heap holds it
        self.bound = [INF] * n  # the smallest stamp of the heap's other items
        self.cand: list[Entry | None] = [None] * n  # the entry head() last gave (None: look)

    def head(self, d: int) -> Entry | None:
        """:meth:`LruRuns.top` of device ``d`` (no key skipped): the least
        recently used evictable entry with bytes there, or None."""
        alive = self.alive
        while True:
            ents = self.ents[d]
            if ents is None:
                ents = self._load(d)
                if ents is None:
                    return None
            stamps, j, j0, bound = self.stamps[d], self.pos[d], self.start[d], self.bound[d]
            while j < len(ents):
                e = ents[j]
                if e.nbytes[d] > 0:
                    s = stamps[j]
                    if j > j0 and s >= bound:
                        break  # another run's entry comes first: back to the heap
                    if alive.get(e.key) is e and e.stamp == s:
                        if e.ref_cnt == READY:
                            self.pos[d] = j
                            self.cand[d] = e
                            return e
                        e.heaped = -1  # offered again when it becomes evictable
                j += 1
            self.pos[d] = j
            self._store(d)

    def take(self, d: int) -> None:
        """:meth:`LruRuns.pop` of device ``d``: consume the entry :meth:`head` gave."""
        self.pos[d] += 1
        self.cand[d] = None

    def commit(self) -> None:
        """Write every cursor back to its heap (the set is placed)."""
        for d, ents in enumerate(self.ents):
            if ents is not None:
                self._store(d)

    def _load(self, d: int) -> list[Entry] | None:
        """Start reading the run on top of device ``d``'s heap (None: empty)."""
        heap = self.heaps[d]
        if not heap:
            return None
        _stamp, _seq, (ents, stamps), j = heap[0]
        bound = INF
        for c in heap[1:3]:
            bound = min(bound, c[0])
        self.ents[d], self.stamps[d], self.pos[d], self.start[d], self.bound[d] = (
            ents, stamps, j, j, bound
        )  # fmt: skip
        return ents

    def _store(self, d: int) -> None:
        """Write device ``d``'s cursor back: the run's item moved on to its next
        entry with bytes on ``d`` (``LruRuns._advance``), or gone at its end."""
        ents, j = self.ents[d], self.pos[d]
        self.ents[d] = self.cand[d] = None
        if ents is None or j == self.start[d]:
            return
        while j < len(ents) and ents[j].nbytes[d] <= 0:
            j += 1
        heap = self.heaps[d]
        if j < len(ents):
            _stamp, seq, run, _j = heap[0]
            heapq.heapreplace(heap, (run[1][j], seq, run, j))
        else:
            heapq.heappop(heap)

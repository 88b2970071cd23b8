"""DRAM caches of retrieval units (clusters, blocks), sized in entries.

Two replacement rules, one interface (``lookup`` -> hit?, ``touch`` after a
step, ``contains``):

* :class:`ScoreCache` — Swarm §5.2/§6.2: each unit has a frequency ``f``; its
  cost-effectiveness score is ``f * latency / (size * per_entry_cost)`` (our
  reading of Eq. 6: the addressing latency an access saves, per entry of DRAM
  it occupies); after every step ``f += 1`` for activated units and ``f -= 1``
  for cached units that were not activated; the cache keeps the highest
  scores, replacing the minimum through a min-heap (lazy deletion).
* :class:`LRUCache` — least recently used, the baseline Swarm compares with.
"""

from __future__ import annotations

import copy
import heapq
from collections import OrderedDict
from collections.abc import Iterable


class LRUCache:
    """Units enter when activated; the least recently activated leave first."""

    def __init__(self, capacity_entries: int, sizes: dict[int, int] | list[int]):
        self.capacity = int(capacity_entries)
        self.sizes = sizes
        self.used = 0
        self._order: OrderedDict[int, None] = OrderedDict()

    def __deepcopy__(self, memo: dict) -> LRUCache:
        """An independent copy (its containers hold only numbers: copied one level)."""
        new = copy.copy(self)
        new.sizes, new._order = copy.copy(self.sizes), OrderedDict(self._order)
        return new

    def contains(self, unit: int) -> bool:
        return unit in self._order

    def cached(self) -> list[int]:
        return list(self._order)

    def touch(self, activated: Iterable[int]) -> None:
        for u in activated:
            if u in self._order:
                self._order.move_to_end(u)
                continue
            size = self.sizes[u]
            if size > self.capacity:
                continue
            while self.used + size > self.capacity:
                old, _ = self._order.popitem(last=False)
                self.used -= self.sizes[old]
            self._order[u] = None
            self.used += size

    def set_capacity(self, entries: int) -> None:
        """The room changed (an index grew into a shared DRAM budget): evict
        the least recently used units while over it."""
        self.capacity = int(entries)
        while self.used > self.capacity:
            gone, _ = self._order.popitem(last=False)
            self.used -= self.sizes[gone]

    def resize(self, unit: int, size: int) -> None:
        """``unit`` grew (or is new): keep ``used`` exact; evict the least
        recently used units (possibly ``unit`` itself) while over capacity."""
        old = self.sizes[unit] if unit in self._order else 0
        _set_size(self.sizes, unit, size)
        if unit not in self._order:
            return
        self.used += size - old
        while self.used > self.capacity:
            gone, _ = self._order.popitem(last=False)
            self.used -= self.sizes[gone]


def _set_size(sizes: dict[int, int] | list[int], unit: int, size: int) -> None:
    if isinstance(sizes, list) and unit == len(sizes):
        sizes.append(size)
    else:
        sizes[unit] = size


class ScoreCache:
    """Keep the units with the highest cost-effectiveness score."""

    def __init__(
        self,
        capacity_entries: int,
        sizes: dict[int, int] | list[int],
        freq: dict[int, float] | list[float],
        latency_us: float,
        entry_us: float,
    ):
        self.capacity = int(capacity_entries)
        self.sizes = sizes
        self.freq = (
            {u: float(freq[u]) for u in range(len(freq))} if isinstance(freq, list) else dict(freq)
        )
        self.latency_us = latency_us
        self.entry_us = entry_us
        self.used = 0
        self._in: set[int] = set()
        self._heap: list[tuple[float, int, int]] = []  # (score, unit, version)
        self._version: dict[int, int] = {}

    def __deepcopy__(self, memo: dict) -> ScoreCache:
        """An independent copy (its containers hold only numbers: copied one level)."""
        new = copy.copy(self)
        new.sizes, new.freq = copy.copy(self.sizes), dict(self.freq)
        new._in, new._heap, new._version = set(self._in), list(self._heap), dict(self._version)
        return new

    def score(self, unit: int) -> float:
        return self.freq.get(unit, 0.0) * self.latency_us / (self.sizes[unit] * self.entry_us)

    def contains(self, unit: int) -> bool:
        return unit in self._in

    def cached(self) -> list[int]:
        return sorted(self._in)

    def fill(self, units: Iterable[int]) -> None:
        """Initial placement: cache in descending score while capacity lasts."""
        for u in sorted(units, key=lambda u: (-self.score(u), u)):
            if self.used + self.sizes[u] <= self.capacity and self.score(u) > 0:
                self._insert(u)

    def touch(self, activated: Iterable[int]) -> None:
        act = set(activated)
        for u in act:
            self.freq[u] = self.freq.get(u, 0.0) + 1.0
        for u in self._in - act:
            self.freq[u] = self.freq.get(u, 0.0) - 1.0
        self._rekey()
        for u in sorted(act - self._in, key=lambda u: (-self.score(u), u)):
            self._admit(u)

    def resize(self, unit: int, size: int) -> None:
        """``unit`` grew (or is new): keep ``used`` exact and re-key its score;
        evict the lowest-scoring units (possibly ``unit``) while over capacity."""
        old = self.sizes[unit] if unit in self._in else 0
        _set_size(self.sizes, unit, size)
        if unit not in self._in:
            return
        self.used += size - old
        self._push(unit)
        while self.used > self.capacity:
            _, w = self._min()
            self._in.discard(w)
            self.used -= self.sizes[w]

    def set_capacity(self, entries: int) -> None:
        """The room changed (an index grew into a shared DRAM budget): evict
        the lowest-scoring units while over it."""
        self.capacity = int(entries)
        while self.used > self.capacity:
            _, w = self._min()
            self._in.discard(w)
            self.used -= self.sizes[w]

    def _rekey(self) -> None:
        """Scores changed: rebuild the heap from the cached units (no stale entries
        pile up, so a step costs O(cached), not O(steps x cached))."""
        for u in self._in:
            self._version[u] = self._version.get(u, 0) + 1
        self._heap = [(self.score(u), u, self._version[u]) for u in self._in]
        heapq.heapify(self._heap)

    def _push(self, u: int) -> None:
        v = self._version.get(u, 0) + 1
        self._version[u] = v
        heapq.heappush(self._heap, (self.score(u), u, v))

    def _insert(self, u: int) -> None:
        self._in.add(u)
        self.used += self.sizes[u]
        self._push(u)

    def _min(self) -> tuple[float, int] | None:
        while self._heap:
            s, u, v = self._heap[0]
            if u in self._in and self._version.get(u) == v:
                return s, u
            heapq.heappop(self._heap)
        return None

    def _admit(self, u: int) -> None:
        size, score = self.sizes[u], self.score(u)
        if size > self.capacity or score <= 0:
            return
        # evict lower-scoring units while they make room and are worth less
        victims: list[int] = []
        freed = self.capacity - self.used
        low = self._min()
        if freed < size and low is not None and low[0] >= score:
            return  # the cheapest cached unit is worth as much: no need to rank them all
        for s, w in self._lowest():
            if freed >= size:
                break
            if s >= score:
                return
            victims.append(w)
            freed += self.sizes[w]
        if freed < size:
            return
        for w in victims:
            self._in.discard(w)
            self.used -= self.sizes[w]
        self._insert(u)

    def _lowest(self) -> list[tuple[float, int]]:
        """Cached units by ascending score (valid heap entries only)."""
        self._min()
        valid = [(s, u) for s, u, v in self._heap if u in self._in and self._version.get(u) == v]
        return sorted(valid)

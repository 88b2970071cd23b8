"""The offload tier's eviction order: stamp-ordered runs of entries, per device.

An offload tier (:class:`sim.serving.tiers.blocks.OffloadTier`) evicts in LRU order
over its *evictable* entries (ready, count 0).  Every entry has
a ``stamp`` (a counter taken on insertion and on every touch): LRU order is
ascending stamp.  :class:`LruRuns` finds the smallest-stamp evictable entry
on a device without scanning the tier.

**Runs, not blocks.**  Entries become evictable together: a store of a
request's offload set completes at once, a load unpins all its sources at
once.  Such a group is offered as one *run*: its entries in ascending stamp
order with the stamps they had when offered.  Each device keeps a heap of
(stamp of the run's current entry, sequence, run, position); offering a run
is one push per device, whatever its length.  Taking the top looks at the
run's current entry and either returns it or moves the run's cursor on (one
``heapreplace``), so a run costs one heap operation per entry *consumed*,
never per entry offered.

**Lazy deletion.**  An offered entry is stale when its stamp has changed
since (it was touched: offered again at its new stamp), when it was dropped,
or when it is no longer evictable (pinned); stale entries are
skipped when they come up.  ``Entry.heaped`` is the stamp at which the entry
is currently offered, so that an entry is offered once per stamp; a
non-evictable entry that comes up has ``heaped`` reset, so that it is
offered again when it becomes evictable.

**Victims in batches.**  :meth:`LruRuns.take` consumes the next ``k``
victims of one device at once: exactly what ``k`` rounds of :meth:`top`
then :meth:`pop` consume (the same items, stale ones included, the same
``heaped`` resets), but walking the top run's entries while they stay below
the heap's next item, with one heap operation per run left rather than one
per entry.  A replace run (:mod:`sim.serving.tiers.tierplace`) passes the new
keys: each victim is dropped and renewed as the next key's entry in the
very step of the walk that takes it (:func:`_walk_renew`), while it is in
cache, rather than in a second pass.

**Completion in one pass.**  :meth:`LruRuns.offer_ready` reads each
entry's stamp, makes it ready and marks it offered in one loop; when an
entry turns out not to be "not ready" it undoes the ones before it and
says so, and the tier takes the general path.  :meth:`LruRuns.offer_unpinned`
likewise unpins and offers in one loop.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import islice
from operator import gt
from typing import Any

from sim.serving.tiers.entry import Entry

Run = tuple[list[Entry], list[int]]  # entries in ascending stamp, their stamps when offered
Item = tuple[int, int, Run, int]  # (stamp at the cursor, sequence, run, cursor)


class LruRuns:
    """Per device of a tier, a heap of runs of offered entries (module docstring)."""

    def __init__(self, devices: int):
        self.heaps: list[list[Item]] = [[] for _ in range(devices)]
        self._seq = 0
        self.items = 0  # heap items pushed since the last rebuild (for compaction)

    def offer(self, entries: Sequence[Entry]) -> None:
        """Offer the evictable ones of ``entries`` not yet offered at their stamp."""
        run: list[Entry] = []
        stamps: list[int] = []
        keep, put = run.append, stamps.append
        for e in entries:  # one pass: e.evictable inlined, offered at its stamp
            s = e.stamp
            if e.ref_cnt == 0 and e.heaped != s:
                e.heaped = s
                keep(e)
                put(s)
        self._offer_run(run, stamps)

    def offer_unpinned(self, entries: Sequence[Entry]) -> None:
        """Each of ``entries`` in use once less (a load or copy from them
        ended), the ones now evictable offered: what decrementing each
        count then :meth:`offer` does, in one pass."""
        run: list[Entry] = []
        stamps: list[int] = []
        keep, put = run.append, stamps.append
        for e in entries:
            c = e.ref_cnt = e.ref_cnt - 1
            if c == 0:
                s = e.stamp
                if e.heaped != s:
                    e.heaped = s
                    keep(e)
                    put(s)
        self._offer_run(run, stamps)

    def offer_ready(self, entries: Sequence[Entry]) -> bool:
        """Make ``entries`` ready (count 0) and offer them, when all of them
        are not ready (so never offered: ``heaped`` -1): what setting each
        ready then :meth:`offer` does, in one pass.  Returns False, with
        nothing changed, when one of them is not "not ready" (the caller
        takes the general path)."""
        stamps: list[int] = []
        put = stamps.append
        for e in entries:  # stamps read, counts and offered stamps set: one pass
            if e.ref_cnt != -1:  # NOT_READY
                for f in islice(entries, len(stamps)):  # undone: as they were
                    f.ref_cnt = -1
                    f.heaped = -1
                return False
            s = e.heaped = e.stamp
            e.ref_cnt = 0  # READY
            put(s)
        self._offer_run(list(entries), stamps)
        return True

    def _offer_run(self, run: list[Entry], stamps: list[int]) -> None:
        """Push ``run`` (offered at ``stamps``), sorted by stamp if it is not."""
        if not run:
            return
        if any(map(gt, stamps, islice(stamps, 1, None))):
            run.sort(key=lambda e: e.stamp)
            stamps = [e.stamp for e in run]
        self._push_run((run, stamps))

    def _push_run(self, run: Run) -> None:
        entries, stamps = run
        for d, heap in enumerate(self.heaps):
            for i, e in enumerate(entries):
                if e.nbytes[d] > 0:
                    self._seq += 1
                    heapq.heappush(heap, (stamps[i], self._seq, run, i))
                    self.items += 1
                    break

    def rebuild(self, live: Sequence[Entry]) -> None:
        """Forget every item; offer ``live`` (evictable, ascending stamp) as one run."""
        self.heaps = [[] for _ in self.heaps]
        self.items = 0
        if live:
            for e in live:
                e.heaped = e.stamp
            self._push_run((list(live), [e.stamp for e in live]))

    def top(self, dev: int, alive: dict[int, Entry], skip: set[int]) -> Entry | None:
        """The least recently used evictable entry with bytes on ``dev`` whose key
        is not in ``skip`` (``alive``: the tier's entries by key).  Stale items
        and entries in ``skip`` that come up are consumed."""
        heap = self.heaps[dev]
        while heap:
            stamp, _seq, run, i = heap[0]
            e = run[0][i]
            if alive.get(e.key) is e and e.stamp == stamp and e.key not in skip:
                if e.evictable:
                    return e
                e.heaped = -1  # offered again when it becomes evictable
            self._advance(dev)
        return None

    def pop(self, dev: int) -> None:
        """Consume the item on top of ``dev``'s heap (the entry :meth:`top` gave)."""
        self._advance(dev)

    def _advance(self, dev: int) -> None:
        """Move the top run's cursor to its next entry with bytes on ``dev``."""
        heap = self.heaps[dev]
        _stamp, seq, run, i = heap[0]
        entries, stamps = run
        i += 1
        while i < len(entries) and entries[i].nbytes[dev] <= 0:
            i += 1
        if i < len(entries):
            heapq.heapreplace(heap, (stamps[i], seq, run, i))
        else:
            heapq.heappop(heap)

    def take(
        self,
        dev: int,
        alive: dict[int, Entry],
        k: int,
        drop: bool = False,
        names: Sequence[int] | None = None,
        stamp: int = 0,
    ) -> list[Entry]:
        """The next ``k`` (fewer when the heap runs dry) least recently used
        evictable entries with bytes on ``dev``, in LRU order, consumed:
        what ``k`` rounds of ``top(dev, alive, set())`` then ``pop(dev)``
        return and consume (module docstring).  ``drop``: each is also
        dropped from ``alive`` (its stamp :data:`DEAD`) as it is taken
        (the caller frees its bytes and slots).  ``names`` (with ``drop``,
        at least ``k`` keys, none in ``alive``): victim ``v`` is then also
        reused at once as the new, not ready entry of ``names[v]``, stamped
        ``stamp + v``, in the walk (no second pass over the victims); one
        device only."""
        heap, out, left = self.heaps[dev], [], k
        get, one = alive.get, len(self.heaps) == 1  # one device: every entry has bytes on it
        if names is not None and not one:
            raise ValueError("LruRuns.take: names (victims renewed in the walk) on one device only")
        while heap and left > 0:
            _stamp, seq, run, i = heap[0]
            entries, stamps = run
            n = len(entries)
            end = n  # the run's items before the heap's next item: [i, end)
            if len(heap) > 1:
                ns, nq = min(heap[1], heap[2])[:2] if len(heap) > 2 else heap[1][:2]
                end = bisect_left(stamps, ns, i + 1, n)
                if end < n and stamps[end] == ns and seq < nq:  # the same stamp: by sequence
                    end += 1
            j = i
            if one and names is not None:  # the walk renames its victims
                j, left = _walk_renew(entries, stamps, i, end, out, left, alive, names, stamp)
            elif one:  # one tight loop, no per-entry device test
                j, left = _walk_one(entries, stamps, i, end, out, left, alive if drop else None)
            while j < end and left > 0:
                e = entries[j]
                j += 1
                if not one and e.nbytes[dev] <= 0:
                    continue  # not on this device: never this heap's item
                if get(e.key) is e and e.stamp == stamps[j - 1]:
                    if e.ref_cnt == 0:  # e.evictable
                        out.append(e)
                        left -= 1
                        if not left:
                            break
                    else:
                        e.heaped = -1  # offered again when it becomes evictable
            if not one:
                while j < n and entries[j].nbytes[dev] <= 0:
                    j += 1
            if j < n:
                heapq.heapreplace(heap, (stamps[j], seq, run, j))
            else:
                heapq.heappop(heap)
        if drop and not one:
            for e in out:
                del alive[e.key]
                e.stamp = DEAD
        return out


def _walk_one(
    entries: list[Entry],
    stamps: list[int],
    i: int,
    end: int,
    out: list[Entry],
    left: int,
    drop: dict[int, Entry] | None,
) -> tuple[int, int]:
    """:meth:`LruRuns.take`'s walk over ``entries[i:end]`` on a one-device
    tier (every entry has bytes there), ``left`` victims still wanted: the
    same verdicts in the same order as the general walk, stopping right after
    the last victim wanted; ``drop``: each victim is also deleted from it
    and stamped :data:`DEAD` as it is taken (``take(..., drop=True)``).
    Returns (where the walk stopped, ``left``).

    It reads nothing but the entries themselves (no probe of the tier's
    dict, no int compared by value), the one memory access per entry that
    a large tier's walk cannot avoid: an item is live when ``e.stamp is s``,
    the very int object it was offered at (stamps are taken from
    ``e.stamp`` when offered, and never reused: a touched entry has a new,
    larger one; a dropped one has :data:`DEAD`, which no offer holds), which
    on a one-device tier is exactly ``alive.get(e.key) is e and e.stamp == s``
    (every entry leaving a tier gets the stamp :data:`DEAD`)."""
    j = i
    if drop is not None:  # each victim dropped from ``drop`` as it is taken
        for e, s in zip(_span(entries, i, end), _span(stamps, i, end), strict=True):
            j += 1
            if e.stamp is s:
                if e.ref_cnt == 0:  # e.evictable
                    out.append(e)
                    del drop[e.key]
                    e.stamp = DEAD
                    left -= 1
                    if not left:
                        break
                else:
                    e.heaped = -1
        return j, left
    for e, s in zip(_span(entries, i, end), _span(stamps, i, end), strict=True):
        j += 1
        if e.stamp is s:
            if e.ref_cnt == 0:  # e.evictable
                out.append(e)
                left -= 1
                if not left:
                    break
            else:
                e.heaped = -1  # offered again when it becomes evictable
    return j, left


def _walk_renew(
    entries: list[Entry],
    stamps: list[int],
    i: int,
    end: int,
    out: list[Entry],
    left: int,
    alive: dict[int, Entry],
    names: Sequence[int],
    stamp: int,
) -> tuple[int, int]:
    """:func:`_walk_one` with each victim dropped from ``alive`` and reused
    at once as the new entry of the next of ``names`` (victim ``v`` of the
    take, ``len(out)`` before it is added: key ``names[v]``, not ready,
    stamp ``stamp + v``, not offered), which is what
    ``take(..., drop=True)`` then adding each key in its victim's slot leave: the same
    dict contents in the same order (each new key is put at the end, the
    victims' keys deleted), the same fields.  A renamed entry's new stamp
    is larger than every offered one, so no later item of the walk is
    live for it (as with :data:`DEAD`)."""
    j, v, put = i, len(out), out.append  # v: the next victim's number in the take
    last = v + left  # the walk stops once victim number ``last - 1`` is taken
    for e, s in zip(_span(entries, i, end), _span(stamps, i, end), strict=True):
        j += 1
        if e.stamp is s:
            if e.ref_cnt == 0:  # e.evictable
                put(e)
                del alive[e.key]
                key = e.key = names[v]
                alive[key] = e
                e.ref_cnt = -1  # NOT_READY
                e.stamp = stamp + v
                e.heaped = -1
                v += 1
                if v == last:
                    break
            else:
                e.heaped = -1  # offered again when it becomes evictable
    return j, last - v


DEAD = -1  # the stamp of an entry dropped from its tier: never an offered stamp


def _span(seq: list[Any], i: int, end: int) -> Iterator[Any]:
    """``seq[i:end]`` without a copy, started in O(1): a list iterator set at
    ``i`` (``islice(seq, i, end)`` would step over the first ``i`` items,
    once per take: quadratic on a long run consumed a few victims at a time)."""
    it = iter(seq)
    it.__setstate__(i)
    return islice(it, end - i)

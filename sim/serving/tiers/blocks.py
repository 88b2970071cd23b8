"""KV block storage of one tier: the GPU cache and the offload tiers.

Plain state, no clock: the engine (:mod:`sim.serving.execute.engine`) decides when
things happen; these classes only keep the books and refuse what is unsafe.

**GPU cache**: :mod:`sim.serving.tiers.gpucache` (re-exported here).

**Offload tier** (:class:`OffloadTier`): host-memory modules and/or SSDs
holding offload blocks (each ``k`` GPU blocks, seed 001's
``block_size_factor``), spread over the tier's devices by layer ranges (see
:mod:`sim.serving.tiers.placement`).  Each entry carries seed 001's reference
count: ``-1`` not ready (being stored), ``0`` ready, ``> 0`` in use (being
loaded from, or demoted to the next tier).  Eviction is LRU over ready
entries with count 0 only, so blocks in flight are never evicted: every
eviction checks it and raises if the books say otherwise.  An evicted entry
is dropped at once; when the engine demotes it to a lower tier, it is first
handed to the eviction callback, which places its copy there (the slots it
leaves are written only once that copy has read them).  In a tier of several
devices a block whose bandwidth share does not fit on a full device spills
to the devices with room (the seed does not say what a full pool device
does; evicting while other devices are empty would waste the pool), and
only a tier with no room anywhere evicts.

**LRU without scans.**  ``entries`` (a plain dict: a touched key is
popped and put back at the end) is kept in LRU order; every entry also
carries a ``stamp`` (a counter taken on insertion and on every touch), so
that order is ascending stamp.  The evictable entries (ready, count 0)
are offered to :class:`sim.serving.tiers.lru.LruRuns` as *runs* (a
completed store's set, a finished load's sources: one heap item per device,
whatever the run's length), stale items skipped when they come up.  The next
victim is the smallest stamp on top of the heaps of the devices still short:
exactly the entry a walk over ``entries`` in LRU order would take next.
Placement of an offload set is :mod:`sim.serving.tiers.tierplace`: the keys that
fit are placed as one run (their entries built by one ``map``, their slots
by one ``alloc_many``); on one device the victims a key needs are counted
first and taken in one batch, and a full tier whose victims are dropped
replaces them by a run of keys.

**Slots.**  Each entry's run on each device holds a slot of that device's
address space (:class:`sim.serving.tiers.layout.SlotAllocator`, layout in
:mod:`sim.serving.tiers.layout`), taken when the entry is placed and given back
when it is dropped; :meth:`OffloadTier.layer_extents` names the byte ranges
a transfer of some of its layers touches.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import filterfalse, repeat

import numpy as np

from sim.serving.tiers.entry import NOT_READY, READY, Entry, Runs  # noqa: F401 (re-exported)
from sim.serving.tiers.gpucache import GpuBlock, GpuCache  # noqa: F401 (re-exported)
from sim.serving.tiers.layout import SlotAllocator, layer_ranges, layer_stride
from sim.serving.tiers.lru import DEAD, LruRuns
from sim.serving.tiers.placement import layer_runs
from sim.serving.tiers.poolplace import place_pool
from sim.serving.tiers.tier import EvictFn  # noqa: F401 (re-exported)
from sim.serving.tiers.tierplace import place_single


class OffloadTier:
    """One offload tier over ``devices`` with per-device byte capacities."""

    def __init__(
        self,
        name: str,
        devices: Sequence[str],
        ratios: Sequence[float],
        capacity_bytes: Sequence[float],
        layers: int,
        layer_bytes: float,
    ):
        self.name = name
        self.devices = tuple(devices)
        self.ratios = tuple(ratios)
        self.capacity = [float(c) for c in capacity_bytes]
        self.layers = layers
        self.layer_bytes = float(layer_bytes)  # one offload block, one layer
        self.entries: dict[int, Entry] = {}  # in LRU order (insertion order)
        self.used = [0.0] * len(self.devices)
        self.allocators = [SlotAllocator(layer_stride(layer_bytes)) for _ in self.devices]
        self.evictions = 0
        self._clock = 0  # the next LRU stamp
        self._alt: dict[tuple[bool, ...], tuple[Runs, list[float]]] = {}  # per device mask
        self._need: dict[Runs, list[float]] = {}  # bytes per device of a block's runs
        self.lru = LruRuns(len(self.devices))

    # ---- books ----------------------------------------------------------------
    def bytes_on(self, runs: Runs) -> list[float]:
        """Bytes per device of a block laid out as ``runs`` (memoised: a tier
        sees only a few distinct layouts; callers must not modify the list)."""
        out = self._need.get(runs)
        if out is None:
            out = self._need[runs] = [0.0] * len(self.devices)
            for dev, l0, l1 in runs:
                out[dev] += (l1 - l0) * self.layer_bytes
        return out

    def layer_extents(self, e: Entry, dev: int, l0: int, l1: int) -> np.ndarray:
        """(n, 2) byte ranges of layers ``[l0, l1)`` of ``e`` on device index ``dev``
        (they must lie in ``e``'s run there), one range per layer."""
        for (d, r0, r1), slot in zip(e.runs, e.slots, strict=True):
            if d == dev and r0 <= l0 and l1 <= r1:
                n = l1 - l0
                return layer_ranges([slot] * n, range(l0 - r0, l1 - r0), self.layer_bytes)
        raise ValueError(f"{self.name}: entry {e.key} holds no layers {l0}..{l1} on {dev}")

    def lookup(self, key: int) -> Entry | None:
        e = self.entries.get(key)
        return e if e is not None and e.ref_cnt >= READY else None

    def touch(self, key: int) -> None:
        self.touch_all([self.entries[key]])

    def touch_all(self, entries: Sequence[Entry]) -> None:
        """Mark ``entries`` most recently used, in this order."""
        held, c = self.entries, self._clock
        for e in entries:
            key = e.key
            held[key] = held.pop(key)  # to the end: most recently used
            c += 1
            e.stamp = c
        self._clock = c
        self._offer(entries)

    def pin_touch_all(self, entries: Sequence[Entry]) -> None:
        """:meth:`pin_all` then :meth:`touch_all` (a load's sources), in one
        pass: pinned, none is offered (an offer takes evictable entries only)."""
        held, c = self.entries, self._clock
        for e in entries:
            if e.ref_cnt < READY:
                raise RuntimeError(f"{self.name}: pinning entry {e.key} that is not ready")
            e.ref_cnt += 1
            key = e.key
            held[key] = held.pop(key)  # to the end: most recently used
            c += 1
            e.stamp = c
        self._clock = c

    def _offer(self, entries: Sequence[Entry], ready: bool = False, unpin: bool = False) -> bool:
        """Offer ``entries`` to the LRU (``ready``: all of them not ready, to
        be made ready: :meth:`LruRuns.offer_ready`, whose answer is returned;
        ``unpin``: each in use once less first, :meth:`LruRuns.offer_unpinned`;
        else True); rebuild it when stale items pile up."""
        if ready:
            if not self.lru.offer_ready(entries):
                return False  # nothing changed: the caller takes the general path
        elif unpin:
            self.lru.offer_unpinned(entries)
        else:
            self.lru.offer(entries)
        if self.lru.items > 2 * len(self.entries) + 64:
            # entries are in stamp order: the live evictable ones form one run
            for e in self.entries.values():
                e.heaped = -1
            self.lru.rebuild([e for e in self.entries.values() if e.evictable])
        return True

    def pin(self, e: Entry) -> None:
        if e.ref_cnt < READY:
            raise RuntimeError(f"{self.name}: pinning entry {e.key} that is not ready")
        e.ref_cnt += 1

    def pin_all(self, entries: Sequence[Entry]) -> None:
        """:meth:`pin` each of ``entries``, in this order (one call for a run)."""
        for e in entries:
            if e.ref_cnt < READY:
                raise RuntimeError(f"{self.name}: pinning entry {e.key} that is not ready")
            e.ref_cnt += 1

    def unpin(self, e: Entry) -> None:
        self.unpin_all([e])

    def unpin_all(self, entries: Sequence[Entry]) -> None:
        """A load or copy from ``entries`` ended: each is in use once less; the
        ones now evictable are offered (one pass picks them)."""
        self._offer(entries, unpin=True)

    def complete(self, e: Entry) -> None:
        self.complete_all([e])

    def complete_all(self, entries: Sequence[Entry]) -> bool:
        """A store into this tier finished: its entries become ready.  Entries
        that were not ready were never offered (an entry is offered only once
        ready) nor evicted: all of them are offered.
        Returns whether all of them were not ready: they are then all still
        in this tier (an entry leaves a tier only once evicted, and only a
        ready one is)."""
        if entries and self._offer(entries, ready=True):  # sets them ready
            return True
        for e in entries:
            e.ref_cnt = READY
        self._offer(entries)
        return not entries

    # ---- placement -------------------------------------------------------------
    def place(self, keys: Sequence[int], evict: EvictFn | None) -> list[Entry]:
        """New not-ready entries for ``keys`` (one offload set, Algorithm 1).

        Returns the entries placed; keys already present and keys for which
        no room can be made are skipped.  Keys are decided one after the other, each seeing the room
        its predecessors took or made (:mod:`sim.serving.tiers.tierplace`).
        """
        new = list(filterfalse(self.entries.__contains__, keys))
        if not new:
            return []
        if len(self.devices) == 1:
            return place_single(self, new, evict)
        return place_pool(self, new, layer_runs(self.ratios, len(new), self.layers), evict)

    def add(
        self,
        keys: Sequence[int],
        runs: Runs,
        nbytes: list[float],
        slots: Sequence[tuple[int, ...]] | None = None,
    ) -> list[Entry]:
        """Entries for ``keys``, all laid out as ``runs``, in this order (the
        caller checked the room and updates ``used``), stamped in this order;
        ``slots``: their slots (one per run) when the caller took them, else
        taken here (what one ``alloc`` per key and run gives, in order)."""
        n = len(keys)
        if n == 1 and slots is None:  # one key (a demotion's copy): its own calls
            self._clock += 1
            alloc = self.allocators
            slot = tuple([alloc[d].alloc(l1 - l0) for d, l0, l1 in runs])
            e = self.entries[keys[0]] = Entry(keys[0], runs, slot, nbytes, self._clock)
            return [e]
        if slots is None:
            per_run = [self.allocators[d].alloc_many(l1 - l0, n) for d, l0, l1 in runs]
            one = len(runs) == 1
            slots = [(s,) for s in per_run[0]] if one else list(zip(*per_run, strict=True))
        c = self._clock
        self._clock = c + n
        stamps = range(c + 1, c + n + 1)
        out = list(map(Entry, keys, repeat(runs, n), slots, repeat(nbytes, n), stamps))
        self.entries.update(zip(keys, out, strict=True))
        return out

    def spill(self, runs: Runs) -> Runs:
        """``runs`` if they fit; else the same Algorithm 1 over the devices that
        still have room (a full device's share spills to the others); else
        ``runs`` (room must then be made by eviction)."""
        if len(self.devices) == 1 or all(s <= 1e-6 for s in self.short(self.bytes_on(runs))):
            return runs
        room = [c - u >= self.layer_bytes for u, c in zip(self.used, self.capacity, strict=True)]
        while any(room):
            alt, need = self.runs_over(tuple(room))
            short = self.short(need)
            if all(s <= 1e-6 for s in short):
                return alt
            room = [ok and s <= 1e-6 for ok, s in zip(room, short, strict=True)]
        return runs

    def runs_over(self, room: tuple[bool, ...]) -> tuple[Runs, list[float]]:
        """Algorithm 1's runs of one block over the devices marked in ``room``
        (their ratios renormalised), and their bytes per device; memoised, as
        they depend on nothing else (callers must not modify the list)."""
        out = self._alt.get(room)
        if out is None:
            ratios = [p if ok else 0.0 for p, ok in zip(self.ratios, room, strict=True)]
            total = sum(ratios)
            runs = layer_runs([p / total for p in ratios], 1, self.layers)[0]
            out = self._alt[room] = (runs, self.bytes_on(runs))
        return out

    def short(self, need: Sequence[float]) -> list[float]:
        """Bytes per device by which ``need`` more would overflow it."""
        return [u + n - c for u, n, c in zip(self.used, need, self.capacity, strict=True)]

    def make_room(self, need: Sequence[float], evict: EvictFn | None) -> bool:
        """Evict LRU victims until ``need`` fits; whether it does (False: no
        evictable entries enough, or ``need`` exceeds a device's capacity)."""
        short = self.short(need)
        if all(s <= 1e-6 for s in short):
            return True
        if any(n > c for n, c in zip(need, self.capacity, strict=True)):
            return False
        self.evict_all(self.take_victims(short), evict)
        return all(s <= 1e-6 for s in self.short(need))

    def evict_all(self, victims: Sequence[Entry], evict: EvictFn | None) -> None:
        """Evict ``victims`` in order: each handed to ``evict`` (which may copy
        it to the tier below), then dropped."""
        for e in victims:
            self.evictions += 1
            if evict is not None:
                evict(self, e)
            self._drop(e)

    def take_victims(self, short: list[float]) -> list[Entry]:
        """Evictable entries, LRU first, that free bytes where ``short`` is still
        positive, until it is not; taken off the LRU (the caller evicts them)."""
        victims: list[Entry] = []
        chosen: set[int] = set()
        lru, entries = self.lru, self.entries
        tops: dict[int, Entry | None] = {}  # device -> its top (valid until that heap moves)
        while True:
            best, dev = None, -1
            for d, s in enumerate(short):
                if s > 1e-6:
                    e = tops.get(d)
                    if d not in tops or (e is not None and e.key in chosen):
                        e = tops[d] = lru.top(d, entries, chosen)
                    if e is not None and (best is None or e.stamp < best.stamp):
                        best, dev = e, d
            if best is None:
                return victims
            lru.pop(dev)
            del tops[dev]
            victims.append(best)
            chosen.add(best.key)
            short = [s - f for s, f in zip(short, best.nbytes, strict=True)]

    def _victims(self, short: list[float]) -> list[Entry]:
        """:meth:`take_victims` without taking them: they stay offered."""
        victims = self.take_victims(short)
        for e in victims:
            e.heaped = -1
        self.lru.offer(victims)
        return victims

    def _drop(self, e: Entry) -> None:
        if e.ref_cnt > READY:  # pragma: no cover - book-keeping bug
            raise RuntimeError(f"{self.name}: entry {e.key} evicted while in use")
        del self.entries[e.key]
        e.stamp = DEAD  # its offered items are stale (sim.serving.tiers.lru)
        for i, b in enumerate(e.nbytes):
            self.used[i] -= b
        for (d, l0, l1), slot in zip(e.runs, e.slots, strict=True):
            self.allocators[d].free(slot, l1 - l0)

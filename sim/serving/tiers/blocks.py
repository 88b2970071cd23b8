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
only a tier with no room anywhere evicts: its least recently used entries,
whatever devices they are on (one LRU cache, :mod:`sim.serving.tiers.lru`).

**LRU.**  ``entries`` maps keys (dense ids, :class:`sim.serving.requests.KeySpace`)
to entries: a dict, not an id-indexed array as the GPU cache's, because a
tier holds thousands to tens of thousands of a run's keys while an array
costs 8 bytes for every key of the run per tier (473K keys in the
1K-request bench trace at 16-token blocks), and its probes, C-level
``map`` of ``dict.get`` over a request's group keys, cost 31-35 ns a key
against 19-24 ns for a list indexed by id (process time, chunks of 32-256
keys): all ``dict.get`` calls together are 1% of the profiled paged-cpu-ssd
run at 1K requests.  ``lru`` is their LRU order
(:class:`sim.serving.tiers.lru.LruOrder`: a new entry joins it as the most
recently used, a touched one moves to its end; one order whatever devices
an entry is on), over which the one walk of :mod:`sim.serving.tiers.lru`
chooses victims.  Placement of an offload set
is :mod:`sim.serving.tiers.tierplace`.

**Whole bytes.**  Capacities, used bytes, an entry's bytes per device and
the layer bytes are ints: a capacity given as a float (GiB budgets split
over devices) is floored to whole bytes, and a block fits exactly when
``used + need <= capacity`` on every device.  Layer bytes are whole by
construction (tokens x KV bytes per token and layer, whose element width
:attr:`sim.models.card.ModelCard.dtype_bytes` is a whole number of bytes);
a fractional one is refused.

**Slots.**  Each entry's run on each device holds a slot of that device's
address space (:class:`sim.serving.tiers.layout.SlotAllocator`, layout in
:mod:`sim.serving.tiers.layout`), taken when the entry is placed and given back
when it is dropped; :meth:`OffloadTier.layer_extents` names the byte ranges
a transfer of some of its layers touches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import add, and_, le, sub

import numpy as np

from sim.serving.tiers.entry import NOT_READY, READY, Entry, Runs  # noqa: F401 (re-exported)
from sim.serving.tiers.gpucache import GpuBlock, GpuCache  # noqa: F401 (re-exported)
from sim.serving.tiers.layout import SlotAllocator, layer_ranges, layer_stride
from sim.serving.tiers.lru import LruOrder, device_set
from sim.serving.tiers.placement import layer_runs
from sim.serving.tiers.tier import EvictFn  # noqa: F401 (re-exported)
from sim.serving.tiers.tierplace import place


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
        if layer_bytes != int(layer_bytes):
            raise ValueError(f"{name}: a layer of an offload block is {layer_bytes} bytes, "
                             "not a whole number")  # fmt: skip
        self.name = name
        self.devices = tuple(devices)
        self.ratios = tuple(ratios)
        self.capacity = [whole_bytes(c) for c in capacity_bytes]
        self.layers = layers
        self.layer_bytes = int(layer_bytes)  # one offload block, one layer
        self.entries: dict[int, Entry] = {}
        self.lru = LruOrder()  # their LRU order
        self.used = [0] * len(self.devices)
        # bytes per device of the evictable entries (ready, in use by nobody): what
        # every victim walk could free at most, kept as counts move (see room_for)
        self.evictable = [0] * len(self.devices)
        self.allocators = [SlotAllocator(layer_stride(self.layer_bytes)) for _ in self.devices]
        self.evictions = 0
        # changes to the entries, their reference counts, used or evictable bytes (see
        # state): every method that makes one counts it
        self.changes = 0
        self._alt: dict[tuple[bool, ...], tuple[Runs, tuple[int, ...]]] = {}  # per device mask
        self._need: dict[Runs, tuple[int, ...]] = {}  # bytes per device of a block's runs
        self._devs: dict[tuple[int, ...], int] = {}  # the device set of those bytes

    # ---- books ----------------------------------------------------------------
    def bytes_on(self, runs: Runs) -> tuple[int, ...]:
        """Bytes per device of a block laid out as ``runs`` (memoised: a tier
        sees only a few distinct layouts, and their entries share the tuple)."""
        out = self._need.get(runs)
        if out is None:
            need = [0] * len(self.devices)
            for dev, l0, l1 in runs:
                need[dev] += (l1 - l0) * self.layer_bytes
            out = self._need[runs] = tuple(need)
        return out

    def layer_extents(self, e: Entry, dev: int, l0: int, l1: int) -> np.ndarray:
        """(n, 2) byte ranges of layers ``[l0, l1)`` of ``e`` on device index ``dev``
        (they must lie in ``e``'s run there), one range per layer."""
        for (d, r0, r1), slot in zip(e.runs, e.slots, strict=True):
            if d == dev and r0 <= l0 and l1 <= r1:
                n = l1 - l0
                return layer_ranges([slot] * n, range(l0 - r0, l1 - r0), self.layer_bytes)
        raise ValueError(f"{self.name}: entry {e.key} holds no layers {l0}..{l1} on {dev}")

    def state(self) -> tuple[int, ...]:
        """What a decision to place here reads of the tier, as a stamp: the
        count of changes to its entries, reference counts, used and evictable
        bytes, and its capacities (a lender sets them from outside).  Equal
        stamps: the same entries, counts and bytes."""
        return (self.changes, *self.capacity)

    def lookup(self, key: int) -> Entry | None:
        e = self.entries.get(key)
        return e if e is not None and e.ref_cnt >= READY else None

    def devices_of(self, nbytes: tuple[int, ...]) -> int:
        """The device set (bit mask) of a block of ``nbytes`` per device (memoised)."""
        out = self._devs.get(nbytes)
        if out is None:
            out = self._devs[nbytes] = device_set(nbytes)
        return out

    def touch(self, key: int) -> None:
        self.lru.touch([self.entries[key]])

    def touch_all(self, entries: Sequence[Entry]) -> None:
        """Mark ``entries`` most recently used, in this order."""
        self.lru.touch(entries)

    def pin_touch_all(self, entries: Sequence[Entry]) -> None:
        """:meth:`pin_all` then :meth:`touch_all` (a load's sources)."""
        self.pin_all(entries)
        self.lru.touch(entries)

    def pin(self, e: Entry) -> None:
        self.pin_all([e])

    def pin_all(self, entries: Sequence[Entry]) -> None:
        """Each of ``entries`` in use once more, in this order (one call for a run)."""
        self.changes += 1
        ev, flag = self.evictable, self.lru.flag
        for e in entries:
            c = e.ref_cnt
            if c < READY:
                raise RuntimeError(f"{self.name}: pinning entry {e.key} that is not ready")
            e.ref_cnt = c + 1
            if c == READY:  # no longer evictable
                ev[:] = map(sub, ev, e.nbytes)
                flag(e)

    def unpin(self, e: Entry) -> None:
        self.unpin_all([e])

    def unpin_all(self, entries: Sequence[Entry]) -> None:
        """A load or copy from ``entries`` ended: each is in use once less."""
        self.changes += 1
        ev, flag = self.evictable, self.lru.flag
        for e in entries:
            c = e.ref_cnt = e.ref_cnt - 1
            if c == READY:  # evictable again
                ev[:] = map(add, ev, e.nbytes)
                flag(e)

    def complete(self, e: Entry) -> None:
        self.complete_all([e])

    def complete_all(self, entries: Sequence[Entry]) -> bool:
        """A store into this tier finished: its entries become ready.  Returns
        whether all of them were not ready: they are then all still in this
        tier (an entry leaves a tier only once evicted, and only a ready one
        is)."""
        self.changes += 1
        fresh, gained = True, []
        for e in entries:
            c = e.ref_cnt
            fresh = fresh and c == NOT_READY
            if c != READY:
                if c > READY:  # pragma: no cover - book-keeping bug
                    raise RuntimeError(f"{self.name}: entry {e.key} completed while in use")
                gained.append(e.nbytes)
                e.ref_cnt = READY
                self.lru.flag(e)
        if gained:  # whole bytes: one sum per device is the entries' sum one by one
            ev = self.evictable
            ev[:] = map(sum, zip(ev, *gained, strict=True))
        return fresh

    # ---- placement -------------------------------------------------------------
    def place(self, keys: Sequence[int], evict: EvictFn | None) -> list[Entry]:
        """New not-ready entries for ``keys`` (one offload set, Algorithm 1).

        Returns the entries placed; keys already present and keys for which
        no room can be made are skipped.  Keys are decided one after the
        other, each seeing the room its predecessors took or made
        (:mod:`sim.serving.tiers.tierplace`).
        """
        new = [k for k in keys if k not in self.entries]
        if not new:
            return []
        self.changes += 1
        return place(self, new, layer_runs(self.ratios, len(new), self.layers), evict)

    def spill(self, most: int = 1) -> tuple[Runs | None, int]:
        """Where a block that does not fit as Algorithm 1 laid it out goes: the
        same Algorithm 1 over the devices with a layer of room (a full
        device's share spills to the others), narrowed to the devices not
        short while that does not fit; None when no such layout fits (room
        must then be made by eviction).  Ask it only of a pool's block that
        does not fit as laid out.

        Also returns for how many such blocks in a row (up to ``most``), each
        placed as the answer says, the answer holds (1 at least): the rule reads ``used``
        only through comparisons ``used[d] + y <= capacity[d]`` (``y``: a
        layer, or what a layout it tried puts on ``d``), adding bytes only
        turns them false, and the first to turn does so at the block
        :func:`_holds` counts."""
        used, caps, lb, alts = self.used, self.capacity, self.layer_bytes, self._alt
        room = tuple([u + lb <= c for u, c in zip(used, caps)])  # noqa: B905 (one per device)
        tried: list[tuple[int, ...]] = []
        while True in room:
            got = alts.get(room)
            alt, need = got if got is not None else self.runs_over(room)
            tried.append(need)
            fits = tuple(map(le, map(add, used, need), caps))  # used + need <= capacity
            if False not in fits:
                return alt, _holds(used, caps, need, lb, tried) if most > 1 else 1
            room = tuple(map(and_, room, fits))
        return None, 1

    def runs_over(self, room: tuple[bool, ...]) -> tuple[Runs, tuple[int, ...]]:
        """Algorithm 1's runs of one block over the devices marked in ``room``
        (their ratios renormalised), and their bytes per device; memoised, as
        they depend on nothing else."""
        out = self._alt.get(room)
        if out is None:
            ratios = [p if ok else 0.0 for p, ok in zip(self.ratios, room, strict=True)]
            total = sum(ratios)
            runs = layer_runs([p / total for p in ratios], 1, self.layers)[0]
            out = self._alt[room] = (runs, self.bytes_on(runs))
        return out

    def short(self, need: Sequence[int]) -> int:
        """Bytes by which the tier's free bytes (summed over its devices) fall
        short of ``need`` more (> 0: short; the victim rule's pool-wide
        shortfall, :mod:`sim.serving.tiers.lru`)."""
        return sum(self.used) + sum(need) - sum(self.capacity)

    def over(self) -> list[int]:
        """Bytes per device held beyond its capacity (> 0: over; only after a
        lender took memory back)."""
        return [u - c for u, c in zip(self.used, self.capacity, strict=True)]

    def room_for(self, need: Sequence[int]) -> bool:
        """Whether ``need`` more fits pool-wide now or once the victim walk
        has evicted for it (:meth:`victims`), taking nothing: ``need`` is at
        most the tier's capacity, and the walk covers the tier's shortfall
        and each device's excess.  It takes every evictable entry while the
        tier is short and every one with bytes on a device while that device
        is over, so it covers them exactly when the tier is short by no more
        than all its evictable bytes and no device is over by more than its
        own."""
        if sum(need) > sum(self.capacity):
            return False
        ev = self.evictable
        return self.short(need) <= sum(ev) and all(map(le, self.over(), ev))

    def victims(self, short: int, over: Sequence[int] = ()) -> list[Entry]:
        """The LRU victims that would cover ``short`` and ``over``
        (:mod:`sim.serving.tiers.lru`), taking nothing."""
        return self.lru.walk().victims(short, over)

    def make_room(self, need: Sequence[int], evict: EvictFn | None) -> bool:
        """Evict LRU victims until no device holds more than its capacity and
        the tier's free bytes cover ``need``; whether they then do (False: no
        evictable entries enough, or ``need`` exceeds the tier's capacity,
        nothing evicted)."""
        short, over = self.short(need), self.over()
        if short <= 0 and max(over) <= 0:
            return True
        if sum(need) > sum(self.capacity):
            return False
        self.drop(self.victims(short, over), evict)
        return self.short(need) <= 0 and max(self.over()) <= 0

    def drop(self, victims: Sequence[Entry], evict: EvictFn | None) -> None:
        """Evict ``victims`` now (:meth:`hand_over`), their bytes and slots
        freed, gone from the tier."""
        self.changes += 1
        self.hand_over(victims, evict)
        self.free(victims)
        for e in victims:
            del self.entries[e.key]
            self.lru.remove(e)

    def hand_over(self, victims: Sequence[Entry], evict: EvictFn | None) -> None:
        """Evict ``victims``, in order: counted and handed to ``evict`` together
        (which may copy them to the tier below) while still in the tier.  The
        caller frees their bytes and slots (:meth:`free`, or a new entry takes
        them over) and removes them from ``entries`` and ``lru`` (a
        placement does so at its end, :mod:`sim.serving.tiers.lru`)."""
        self.changes += 1
        for e in victims:
            if e.ref_cnt != READY:  # pragma: no cover - book-keeping bug
                raise RuntimeError(f"{self.name}: entry {e.key} evicted while in use")
        self.evictions += len(victims)
        if victims:  # whole bytes: one sum per device
            ev = self.evictable
            ev[:] = map(sub, ev, map(sum, zip(*[e.nbytes for e in victims], strict=True)))
        if evict is not None and victims:
            evict(self, victims)

    def free(self, victims: Sequence[Entry]) -> None:
        """Give back the bytes and slots of ``victims`` (evicted): the slots one
        by one in order (the allocator reuses the last freed first), the bytes
        as one sum per device (whole bytes: the same)."""
        self.changes += 1
        if not victims:
            return
        alloc = self.allocators
        self.used[:] = map(sub, self.used, map(sum, zip(*[e.nbytes for e in victims], strict=True)))
        for e in victims:
            for (d, l0, l1), slot in zip(e.runs, e.slots, strict=True):
                alloc[d].free(slot, l1 - l0)


def _holds(
    used: list[int], caps: list[int], step: tuple[int, ...], lb: int, tried: list[tuple[int, ...]]
) -> int:
    """How many blocks of ``step`` bytes per device can be added, one after
    the other, before one of the comparisons ``used[d] + y <= caps[d]``
    (``y``: ``lb`` or ``tried[t][d]``) true now turns false: on each device
    ``step`` grows, the one with the largest ``y`` that holds now turns
    first, at block ``(caps[d] - used[d] - y) // step[d] + 1``."""
    k = -1
    for d, a in enumerate(step):
        if a:
            left = caps[d] - used[d]
            y = max([x for x in [lb, *[t[d] for t in tried]] if x <= left])
            m = (left - y) // a + 1
            k = m if k < 0 else min(k, m)
    return k


def whole_bytes(x: float) -> int:
    """``x`` bytes floored to whole bytes (a capacity: never more than given)."""
    return x if isinstance(x, int) else math.floor(x)

"""Keys of a full pool tier whose victims are dropped, decided in one tight loop.

Once a pool tier (several devices, :mod:`sim.serving.tiers.poolplace`) is full,
most keys of an offload set neither fit as Algorithm 1 laid them out nor
spill (:func:`sim.serving.tiers.tierplace.spill_layout` finds no layout that
fits), so each makes room by evicting LRU victims
(:func:`sim.serving.tiers.tierplace.evict_key`); the victims' bytes then often
let the next key or two spill.  When victims are dropped (no demotion:
``evict`` is None) :func:`drop_run` decides such keys one after the other
with the same comparisons and float additions, in the same order, as the
per-key path:

* its fit check (``used + need - capacity > SLACK`` somewhere) and spill
  check, exactly those of :func:`~sim.serving.tiers.poolplace.place_pool`'s
  loop: a key that fits hands back to it, and so does the ``SPILLS``-th
  spill in a row (the spill runs there decide long streaks in numpy); a
  spill before that is placed here, as
  :func:`sim.serving.tiers.tierplace.short_key` places it;
* ``full`` when its layout exceeds a device's capacity (nothing evicted);
* its victims as :meth:`~sim.serving.tiers.blocks.OffloadTier.take_victims`
  chooses them: among the devices still short, the least recently used
  evictable entry on top of their LRU heaps (read run by run,
  :class:`sim.serving.tiers.poolcursor.Cursors`), its bytes taken off ``short``,
  each victim dropped as soon as chosen: ``_drop``'s subtractions from
  ``used`` and slot frees, in victim order (a dropped entry coming up on
  another device is stale, consumed exactly as a chosen one is).  A
  device's head, once found, is kept until it is a victim: only victims
  die during the call, so a victim clears itself from the kept heads of
  the devices it has bytes on, and a kept head needs no liveness check;
* then placed (its slots taken as ``SlotAllocator.alloc`` takes them: the
  last freed slot of the class first) if it fits, else let go.

What does not change a decision is done once per call: the per-layout
bytes, slot classes, free lists and devices looked up once (and kept while
consecutive keys share a layout, as they mostly do: Algorithm 1 gives a
set's keys a few layouts, each over a range of keys); the placed keys'
entries made and inserted together at the end, with consecutive stamps
(nothing reads them in between: new entries are not ready, so never
victims); the allocators' live counts and the tier's eviction count added
up.  ``tests/sim/test_serving_pooldrop.py`` and
``tests/sim/test_serving_tierplace.py`` compare it with the per-key
reference on random workloads that evict.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from operator import add, ge, sub
from typing import Any

from sim.serving.tiers.entry import READY, Entry
from sim.serving.tiers.placement import Runs
from sim.serving.tiers.poolcursor import Cursors
from sim.serving.tiers.poolroom import room_index
from sim.serving.tiers.tier import Tier
from sim.serving.tiers.tierplace import SLACK

INF = float("inf")

_NONE: Any = object()  # "not remembered yet"
SPILLS = 4  # the spill in a row that hands back to poolplace's spill runs
# a layout's books: bytes per device, per run (free list, allocator, units), too big
# for the tier, the devices it has bytes on, per run its free list
Layout = tuple[list[float], list[tuple[list[int], Any, int]], bool, tuple[int, ...], tuple]


class _Books:
    """What one :func:`drop_run` call changes besides ``used`` and the LRU:
    slot classes per layout, placed keys pending insertion, counts."""

    __slots__ = ("tier", "lays", "keys", "runs", "slots", "nbytes", "gone")

    def __init__(self, tier: Tier):
        self.tier = tier
        self.lays: dict[Runs, Layout] = {}
        self.keys: list[int] = []  # placed, in order
        self.runs: list[Runs] = []  # their layouts
        self.slots: list[tuple[int, ...]] = []  # their slots, one per run
        self.nbytes: list[list[float]] = []  # their bytes per device
        self.gone: list[Runs] = []  # the victims' layouts, in order (live counts)

    def layout(self, runs: Runs) -> Layout:
        """The books of layout ``runs`` (:data:`Layout`)."""
        lay = self.lays.get(runs)
        if lay is None:
            t = self.tier
            x = t.bytes_on(runs)
            classes = [
                (t.allocators[d]._free.setdefault(l1 - l0, []), t.allocators[d], l1 - l0)
                for d, l0, l1 in runs
            ]
            big = any([b > c for b, c in zip(x, t.capacity, strict=True)])
            devs = tuple(sorted({d for d, _l0, _l1 in runs}))
            lay = (x, classes, big, devs, tuple([fl for fl, _a, _u in classes]))
            self.lays[runs] = lay
        return lay

    def put(self, key: int, runs: Runs, lay: Layout, used: list[float]) -> None:
        """Place ``key`` as ``runs``: its slots taken now (``SlotAllocator.alloc``:
        the class's last freed slot, else a fresh one), its bytes added."""
        self.slots.append(tuple([fl.pop() if fl else _fresh(a, u) for fl, a, u in lay[1]]))
        self.keys.append(key)
        self.runs.append(runs)
        self.nbytes.append(lay[0])
        used[:] = map(add, used, lay[0])

    def flush(self, placed: list[Entry]) -> None:
        """The placed keys' entries (stamps consecutive, in order), counts."""
        t, n = self.tier, len(self.keys)
        clock = t._clock
        made = list(map(Entry, self.keys, self.runs, self.slots, self.nbytes,
                        range(clock + 1, clock + n + 1)))  # fmt: skip
        t._clock = clock + n
        t.entries.update(zip(self.keys, made, strict=True))
        placed += made
        live = Counter(self.runs)
        live.subtract(Counter(self.gone))
        for runs, m in live.items():
            for d, _l0, _l1 in runs:
                t.allocators[d].live += m
        t.evictions += len(self.gone)


def _fresh(a: Any, units: int) -> int:
    """A slot at the end of allocator ``a``'s address space (none free)."""
    offset = a.end
    a.end += units * a.unit
    return offset


def drop_run(
    tier: Tier,
    new: Sequence[int],
    plans: Sequence[Runs],
    i: int,
    placed: list[Entry],
) -> tuple[int, Runs | None]:
    """Decide keys ``new[i:]`` (laid out as ``plans``) while each evicts or
    spills (module docstring); key ``i`` is known to neither fit nor spill.
    Returns the first key not decided (or ``len(new)``) and, when it does
    not fit but spills (the ``SPILLS``-th spill in a row: a spill run, for
    :func:`~sim.serving.tiers.poolplace.place_pool`), its spill layout (else None).
    The room checks are :class:`sim.serving.tiers.poolroom.RoomIndex` states:
    ``p`` per device, a layout's fit thresholds ``ix`` (``ix >= p``: fits)."""
    used, caps = tier.used, tier.capacity
    books, cur, room = _Books(tier), Cursors(tier), room_index(tier, SLACK)
    victims, lays, put = _victims(cur, books, used), books.lays, books.put
    keys, runs, slots, nbytes = books.keys, books.runs, books.slots, books.nbytes
    th, memo, idx = room.th, room.spills, {}
    n, spills, back = len(new), -1, None  # -1: key i, known to evict; back: its spill
    last, ix, lay = None, (), _NONE  # the layout of the key before, its fit index and books
    while i < n:
        plan = plans[i]
        if plan is not last:
            ix = idx.get(plan)
            if ix is None:
                ix = idx[plan] = room.fit_index(plan)  # may add thresholds: states anew
                if room.th is not th:
                    idx, th, memo = {plan: ix}, room.th, room.spills
            last, lay = plan, lays.get(plan) or books.layout(plan)
        if spills >= 0:
            p = tuple(map(bisect_left, th, used))
            if all(map(ge, ix, p)):
                break  # fits: back to the fit runs
            alt = memo.get(p, _NONE)
            if alt is _NONE:
                alt = room.spill(used)
            if alt is not None:
                if spills + 1 >= SPILLS:
                    back = alt
                    break
                put(new[i], alt, lays.get(alt) or books.layout(alt), used)
                spills, i = spills + 1, i + 1
                continue
        spills, i = 0, i + 1
        if lay[2]:
            continue  # full: let go, nothing evicted
        victims(list(map(sub, map(add, used, lay[0]), caps)))  # (u + x) - c per device
        if not all(map(ge, ix, map(bisect_left, th, used))):
            continue  # no room: let go
        slots.append(tuple([fl.pop() if fl else _fresh(a, u) for fl, a, u in lay[1]]))
        keys.append(new[i - 1])  # put(new[i - 1], plan, lay, used), inlined
        runs.append(plan)
        nbytes.append(lay[0])
        used[:] = map(add, used, lay[0])
    books.flush(placed)
    cur.commit()
    return i, back


def _victims(cur: Cursors, books: _Books, used: list[float]) -> Callable[[list[float]], None]:
    """``victims(short)``: drop LRU victims until no device is ``short`` (or
    none is left): :meth:`OffloadTier.take_victims` then ``_drop`` of each,
    fused (a device's head kept while it is alive: only a victim can die)."""
    head, cand, pos = cur.head, cur.cand, cur.pos
    entries, lays, name = books.tier.entries, books.lays, books.tier.name
    gone = books.gone.append

    def victims(short: list[float]) -> None:
        while True:
            best: Entry | None = None
            first = INF
            for d, s in enumerate(short):
                if s > SLACK:
                    e = cand[d] or head(d)  # a kept head is alive: victims clear theirs
                    if e is not None and e.stamp < first:
                        best, first, dev = e, e.stamp, d
            if best is None:
                return
            pos[dev] += 1  # cur.take(dev)
            if best.ref_cnt > READY:  # pragma: no cover - book-keeping bug
                raise RuntimeError(f"{name}: entry {best.key} evicted while in use")
            del entries[best.key]  # OffloadTier._drop, its live count at flush
            x, runs = best.nbytes, best.runs
            used[:] = map(sub, used, x)
            lay = lays.get(runs) or books.layout(runs)
            for fl, slot in zip(lay[4], best.slots):  # noqa: B905
                fl.append(slot)
            for d in lay[3]:  # the devices whose head it may be
                if cand[d] is best:
                    cand[d] = None
            gone(runs)
            short = list(map(sub, short, x))

    return victims

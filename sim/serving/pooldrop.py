"""Keys of a full pool tier whose victims are dropped, decided in one tight loop.

Once a pool tier (several devices, :mod:`sim.serving.poolplace`) is full,
most keys of an offload set neither fit as Algorithm 1 laid them out nor
spill (:func:`sim.serving.tierplace.spill_layout` finds no layout that
fits), so each makes room by evicting LRU victims
(:func:`sim.serving.tierplace.evict_key`); the victims' bytes then often
let the next key or two spill.  When victims are dropped (no demotion:
``evict`` is None) :func:`drop_run` decides such keys one after the other
with the same comparisons and float additions, in the same order, as the
per-key path:

* its fit check (``used + need - capacity > SLACK`` somewhere) and spill
  check, exactly those of :func:`~sim.serving.poolplace.place_pool`'s
  loop: a key that fits hands back to it, and so does the ``SPILLS``-th
  spill in a row (the spill runs there decide long streaks in numpy); a
  spill before that is placed here, as
  :func:`sim.serving.tierplace.short_key` places it;
* ``full`` when its layout exceeds a device's capacity (nothing evicted);
* its victims as :meth:`~sim.serving.blocks.OffloadTier.take_victims`
  chooses them: among the devices still short, the least recently used
  evictable entry on top of their LRU heaps (read run by run,
  :class:`sim.serving.poolcursor.Cursors`), its bytes taken off ``short``,
  each victim dropped as soon as chosen: ``_drop``'s subtractions from
  ``used`` and slot frees, in victim order (a dropped entry coming up on
  another device is stale, consumed exactly as a chosen one is);
* then placed (its slots taken as ``SlotAllocator.alloc`` takes them: the
  last freed slot of the class first) if it fits, else it waits
  (demotions draining) or is let go.

What does not change a decision is done once per call: the per-layout
bytes, slot classes and free lists looked up once; the placed keys'
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

from sim.serving.entry import READY, Entry
from sim.serving.placement import Runs
from sim.serving.poolcursor import Cursors
from sim.serving.poolroom import room_index
from sim.serving.tierplace import SLACK

OffloadTier = Any  # sim.serving.blocks.OffloadTier: not imported, blocks imports this module
SPILLS = 4  # the spill in a row that hands back to poolplace's spill runs
Layout = tuple[list[float], list[tuple[list[int], Any, int]], bool]  # bytes, slot classes, too big


class _Books:
    """What one :func:`drop_run` call changes besides ``used`` and the LRU:
    slot classes per layout, placed keys pending insertion, counts."""

    __slots__ = ("tier", "lays", "keys", "made", "gone")

    def __init__(self, tier: OffloadTier):
        self.tier = tier
        self.lays: dict[Runs, Layout] = {}
        self.keys: list[int] = []  # placed, in order
        self.made: list[tuple[Runs, tuple[int, ...], list[float]]] = []  # their layout, slots
        self.gone: list[Runs] = []  # the victims' layouts, in order (live counts)

    def layout(self, runs: Runs) -> Layout:
        """(bytes per device, per run its free list / allocator / units, too big)."""
        lay = self.lays.get(runs)
        if lay is None:
            t = self.tier
            x = t.bytes_on(runs)
            classes = [
                (t.allocators[d]._free.setdefault(l1 - l0, []), t.allocators[d], l1 - l0)
                for d, l0, l1 in runs
            ]
            big = any([b > c for b, c in zip(x, t.capacity, strict=True)])
            lay = self.lays[runs] = (x, classes, big)
        return lay

    def put(self, key: int, runs: Runs, lay: Layout, used: list[float]) -> None:
        """Place ``key`` as ``runs``: its slots taken now (``SlotAllocator.alloc``:
        the class's last freed slot, else a fresh one), its bytes added."""
        slots = tuple([fl.pop() if fl else _fresh(a, u) for fl, a, u in lay[1]])
        self.keys.append(key)
        self.made.append((runs, slots, lay[0]))
        used[:] = map(add, used, lay[0])

    def flush(self, placed: list[Entry]) -> None:
        """The placed keys' entries (stamps consecutive, in order), counts."""
        t = self.tier
        clock = t._clock
        made = [
            Entry(k, runs, slots, x, clock + n)
            for n, (k, (runs, slots, x)) in enumerate(zip(self.keys, self.made, strict=True), 1)
        ]
        t._clock = clock + len(made)
        t.entries.update(zip(self.keys, made, strict=True))
        if t.added is not None:
            t.added.extend(self.keys)
        placed += made
        live = Counter(runs for runs, _s, _x in self.made)
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
    tier: OffloadTier,
    new: Sequence[int],
    plans: Sequence[Runs],
    i: int,
    placed: list[Entry],
    waiting: list[int],
) -> tuple[int, Runs | None]:
    """Decide keys ``new[i:]`` (laid out as ``plans``) while each evicts or
    spills (module docstring); key ``i`` is known to neither fit nor spill.
    Returns the first key not decided (or ``len(new)``) and, when it does
    not fit but spills (the ``SPILLS``-th spill in a row: a spill run, for
    :func:`~sim.serving.poolplace.place_pool`), its spill layout (else None).
    The room checks are :class:`sim.serving.poolroom.RoomIndex` states:
    ``p`` per device, a layout's fit thresholds ``ix`` (``ix >= p``: fits)."""
    used, caps = tier.used, tier.capacity
    books, cur, room = _Books(tier), Cursors(tier), room_index(tier, SLACK)
    victims, put, lays = _victims(cur, books, used), books.put, books.lays
    th, memo, idx = room.th, room.spills, {}
    n, spills, back = len(new), -1, None  # -1: key i, known to evict; back: its spill
    while i < n:
        key, plan = new[i], plans[i]
        ix = idx.get(plan)
        if ix is None:
            ix = idx[plan] = room.fit_index(plan)  # may add thresholds: states anew
            if room.th is not th:
                idx, th, memo = {plan: ix}, room.th, room.spills
        if spills >= 0:
            p = tuple(map(bisect_left, th, used))
            if all(map(ge, ix, p)):
                break  # fits: back to the fit runs
            alt = memo[p] if p in memo else room.spill(used)
            if alt is not None:
                if spills + 1 >= SPILLS:
                    back = alt
                    break
                put(key, alt, lays.get(alt) or books.layout(alt), used)
                spills, i = spills + 1, i + 1
                continue
        spills, i = 0, i + 1
        lay = lays.get(plan) or books.layout(plan)
        if lay[2]:
            continue  # full: let go, nothing evicted
        victims([u + b - c for u, b, c in zip(used, lay[0], caps)])  # noqa: B905
        if not all(map(ge, ix, map(bisect_left, th, used))):
            if tier.draining:
                waiting.append(key)
            continue
        put(key, plan, lay, used)
    books.flush(placed)
    cur.commit()
    return i, back


def _victims(cur: Cursors, books: _Books, used: list[float]) -> Callable[[list[float]], None]:
    """``victims(short)``: drop LRU victims until no device is ``short`` (or
    none is left): :meth:`OffloadTier.take_victims` then ``_drop`` of each,
    fused (a device's head kept while it is alive: only a victim can die)."""
    head, cand, pos, get = cur.head, cur.cand, cur.pos, cur.alive.get
    entries, lays, name = books.tier.entries, books.lays, books.tier.name
    gone = books.gone.append

    def victims(short: list[float]) -> None:
        while True:
            best: Entry | None = None
            dev = -1
            for d, s in enumerate(short):
                if s > SLACK:
                    e = cand[d]
                    if e is None or get(e.key) is not e:
                        e = head(d)
                    if e is not None and (best is None or e.stamp < best.stamp):
                        best, dev = e, d
            if best is None:
                return
            pos[dev] += 1  # cur.take(dev)
            cand[dev] = None
            if best.ref_cnt > READY:  # pragma: no cover - book-keeping bug
                raise RuntimeError(f"{name}: entry {best.key} evicted while in use")
            del entries[best.key]  # OffloadTier._drop, its live count at flush
            x, runs = best.nbytes, best.runs
            used[:] = map(sub, used, x)
            for (fl, _a, _u), slot in zip((lays.get(runs) or books.layout(runs))[1], best.slots):  # noqa: B905
                fl.append(slot)
            gone(runs)
            short = [s - f for s, f in zip(short, x)]  # noqa: B905

    return victims

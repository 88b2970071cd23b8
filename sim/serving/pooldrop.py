"""Keys of a full pool tier whose victims are dropped, decided in one tight loop.

Once a pool tier (several devices, :mod:`sim.serving.poolplace`) is full,
most keys of an offload set neither fit as Algorithm 1 laid them out nor
spill (:func:`sim.serving.tierplace.spill_layout` finds no layout that
fits), so each makes room by evicting LRU victims
(:func:`sim.serving.tierplace.evict_key`).  When victims are dropped (no
demotion: ``evict`` is None) :func:`drop_run` decides such keys one after
the other without the per-key calls: for each key the same comparisons and
float additions, in the same order, as the per-key path:

* its fit check (``used + need - capacity > SLACK`` somewhere) and spill
  check, exactly those of :func:`~sim.serving.poolplace.place_pool`'s
  loop (the run ends, handing back to it, at the first key that fits or
  spills);
* ``full`` when its layout exceeds a device's capacity (nothing evicted);
* its victims as :meth:`~sim.serving.blocks.OffloadTier.take_victims`
  chooses them: among the devices still short, the least recently used
  evictable entry on top of their LRU heaps, its bytes taken off ``short``
  (a list of its own, as there), each victim dropped as soon as chosen:
  :meth:`~sim.serving.blocks.OffloadTier._drop`'s subtractions from
  ``used`` and slot frees, in victim order, which is what dropping them
  all after choosing does (a dropped entry coming up on another device's
  heap is stale, consumed exactly as a chosen one is);
* then placed (one slot per run, the next stamp) if it fits, else it waits
  (demotions draining) or is let go.

A key that spills between two that evict (the usual pattern once the tier
is full: the victims' bytes let the next key spill) is placed in the loop
too, as :func:`sim.serving.tierplace.short_key` places it; two spills in a
row hand back to the spill runs of :mod:`sim.serving.poolplace`.

``tests/sim/test_serving_tierplace.py`` compares it with the per-key
reference on random workloads that evict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.serving.entry import READY, Entry
from sim.serving.placement import Runs
from sim.serving.tierplace import SLACK, spill_layout

OffloadTier = Any  # sim.serving.blocks.OffloadTier: not imported, blocks imports this module
NONE: frozenset[int] = frozenset()  # no key skipped: dropped victims are stale by themselves


def drop_run(
    tier: OffloadTier,
    new: Sequence[int],
    plans: Sequence[Runs],
    i: int,
    placed: list[Entry],
    waiting: list[int],
) -> tuple[int, Runs | None]:
    """Decide keys ``new[i:]`` (laid out as ``plans``) while each neither fits
    nor spills, victims dropped (module docstring), and a key that spills
    between two that evict; key ``i`` is known to neither fit nor spill.
    Returns the first key not decided (or ``len(new)``) and, when it does
    not fit but spills (the second spill in a row: a spill run, for
    :func:`~sim.serving.poolplace.place_pool`), its spill layout (else None)."""
    used, caps, bytes_on = tier.used, tier.capacity, tier.bytes_on
    devs = range(len(used))
    n, first, spilled = len(new), True, False
    while i < n:
        key, plan = new[i], plans[i]
        x = bytes_on(plan)
        if not first:
            fits = True
            for d in devs:
                if used[d] + x[d] - caps[d] > SLACK:
                    fits = False
                    break
            if fits:
                return i, None
            spill = spill_layout(tier, used)
            if spill is not None:
                if spilled:
                    return i, spill
                _put(tier, key, spill, bytes_on(spill), placed)  # short_key's spill
                spilled, i = True, i + 1
                continue
        first, spilled = False, False
        i += 1
        if any([x[d] > caps[d] for d in devs]):
            continue  # full: let go, nothing evicted
        _drop_victims(tier, [used[d] + x[d] - caps[d] for d in devs])
        if any([used[d] + x[d] - caps[d] > SLACK for d in devs]):
            if tier.draining:
                waiting.append(key)
            continue
        _put(tier, key, plan, x, placed)
    return i, None


def _put(tier: OffloadTier, key: int, runs: Runs, x: list[float], placed: list[Entry]) -> None:
    """``OffloadTier.add([key], runs, x)`` then its bytes added to ``used``."""
    tier._clock += 1
    alloc = tier.allocators
    slots = tuple([alloc[d].alloc(l1 - l0) for d, l0, l1 in runs])
    e = tier.entries[key] = Entry(key, runs, slots, x, tier._clock)
    if tier.added is not None:
        tier.added.append(key)
    placed.append(e)
    used = tier.used
    for d, b in enumerate(x):
        used[d] += b


def _drop_victims(tier: OffloadTier, short: list[float]) -> None:
    """Evict and drop LRU victims until no device is ``short`` (or none is
    left): :meth:`OffloadTier.take_victims` then ``_drop`` of each, fused
    (a heap's top looked at as :meth:`LruRuns.top` does first: a valid
    evictable entry is the answer; else ``top`` goes on from there)."""
    lru, entries, used, alloc = tier.lru, tier.entries, tier.used, tier.allocators
    top, heaps, get = lru.top, lru.heaps, entries.get
    tops: dict[int, Entry | None] = {}  # device -> its top (valid until that heap moves)
    while True:
        best: Entry | None = None
        dev = -1
        for d, s in enumerate(short):
            if s > SLACK:
                e = tops.get(d)
                if d not in tops or (e is not None and get(e.key) is not e):
                    heap = heaps[d]
                    e = None
                    if heap:
                        stamp, _seq, run, k = heap[0]
                        e = run[0][k]
                        if not (get(e.key) is e and e.stamp == stamp and e.ref_cnt == READY
                                and not e.draining):  # fmt: skip
                            e = top(d, entries, NONE)
                    tops[d] = e
                if e is not None and (best is None or e.stamp < best.stamp):
                    best, dev = e, d
        if best is None:
            return
        lru.pop(dev)
        del tops[dev]
        _drop(tier, best, used, alloc)
        short = [s - f for s, f in zip(short, best.nbytes, strict=True)]


def _drop(tier: OffloadTier, e: Entry, used: list[float], alloc: list) -> None:
    """``OffloadTier.evict_all`` of a victim that is dropped (``_drop``, inlined)."""
    tier.evictions += 1
    if e.ref_cnt > READY:  # pragma: no cover - book-keeping bug
        raise RuntimeError(f"{tier.name}: entry {e.key} evicted while in use")
    del tier.entries[e.key]
    for d, b in enumerate(e.nbytes):
        used[d] -= b
    for (d, l0, l1), slot in zip(e.runs, e.slots, strict=True):
        a = alloc[d]
        a.live -= 1
        a._free.setdefault(l1 - l0, []).append(slot)

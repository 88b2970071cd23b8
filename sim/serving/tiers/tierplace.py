"""Placing an offload set in a tier: the keys that fit in bulk, the others one by one.

:meth:`sim.serving.tiers.blocks.OffloadTier.place` decides the keys of one offload
set in order, each seeing the room its predecessors took or made: a key that
fits as Algorithm 1 laid it out is placed; otherwise (a pool) its share
spills to the devices with room; otherwise LRU victims are evicted until it
fits, or, when nothing can make room, the key is not offloaded.

On one device (:func:`place_single`) the keys that fit are counted with one
running sum (the same float additions, in the same order, as placing them
one by one) and placed as one run: their slots taken in one call, their
stamps consecutive; the keys that replace dropped victims are fused
(:func:`_replace_single`).  Every victim of a one-device tier frees the
same ``b`` bytes, so how many victims a key short of room needs is known
before taking any (the same float subtractions, done without them): they
are taken in one batch (:meth:`sim.serving.tiers.lru.LruRuns.take`).  On a full
tier whose victims are dropped, when one key's float arithmetic (one
victim out, the key in) gives ``used`` back bit for bit, every later key
repeats it: the keys replacing their victims are then one run
(:func:`_replace_run`), each new entry the very object of the victim whose
slot it takes, renamed in the LRU walk that takes it
(:meth:`sim.serving.tiers.lru.LruRuns.take` with ``names``; no object made or
freed per key).  A pool tier is :mod:`sim.serving.tiers.poolplace` (runs of keys that
fit or spill alike), whose keys short of room anywhere take
:func:`short_key` here; a pool's spill decision (:func:`spill_layout`)
is remembered per state of its room thresholds (:mod:`sim.serving.tiers.poolroom`).
Either way the keys placed, victims and used
bytes are exactly those of deciding every key on its own
(``tests/sim/test_serving_tierplace.py`` checks that on random workloads
against a per-key reference).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.serving.tiers.entry import READY, Entry
from sim.serving.tiers.lru import DEAD
from sim.serving.tiers.placement import Runs, layer_runs
from sim.serving.tiers.poolroom import room_index
from sim.serving.tiers.tier import EvictFn, Tier

SLACK = 1e-6  # bytes: "fits" tolerance of every room check


def place_single(tier: Tier, new: Sequence[int], evict: EvictFn | None) -> list[Entry]:
    """:meth:`OffloadTier.place` on a one-device tier: every block holds all
    layers there, so every key needs (and every victim frees) the same bytes
    ``b``; a key that does not fit makes room with :func:`_room_single`."""
    runs = layer_runs(tier.ratios, 1, tier.layers)[0]
    nbytes = tier.bytes_on(runs)
    b, c = nbytes[0], tier.capacity[0]
    placed: list[Entry] = []
    i, n = 0, len(new)
    while i < n:
        u, j = tier.used[0], i
        while j < n and u + b - c <= SLACK:
            u += b
            j += 1
        if j > i:  # keys i..j-1 fit: one run
            placed += tier.add(new[i:j], runs, nbytes)
            tier.used[0] = u
            i = j
            continue
        if evict is None:  # victims are dropped: keys that replace them, fused
            i = _replace_single(tier, new, i, runs, nbytes, placed)
            continue
        ok, dry = _room_single(tier, b, c, evict)
        if ok:
            placed += tier.add(new[i : i + 1], runs, nbytes)
            tier.used[0] += b
        elif dry:  # no victim left: no later key finds room either
            break
        i += 1
    return placed


def _room_single(tier: Tier, b: float, c: float, evict: EvictFn | None) -> tuple[bool, bool]:
    """:meth:`OffloadTier.make_room` for ``b`` bytes on a one-device tier of
    capacity ``c`` that is short of them: the same victims, taken straight
    off the device's LRU.  Returns (whether ``b`` now fits, dry): ``dry``
    when the tier has no evictable entry left (or ``b`` exceeds ``c``), so
    that a later key of the same set, needing the same ``b`` of a tier that
    only its placement changes (new entries are not ready, victims are
    gone), finds no room either without looking."""
    if b > c:
        return False, True
    want, short = 0, tier.used[0] + b - c  # every victim frees b: count them, take them at once
    while short > SLACK:
        short -= b
        want += 1
    victims = tier.lru.take(0, tier.entries, want)
    dry = len(victims) < want
    tier.evict_all(victims, evict)
    return tier.used[0] + b - c <= SLACK, dry


def _replace_single(
    tier: Tier,
    new: Sequence[int],
    i: int,
    runs: Runs,
    nbytes: list[float],
    out: list[Entry],
) -> int:
    """Keys ``new[i:]`` on a full one-device tier whose victims are dropped
    (no demotion): each key takes LRU victims until it fits, then the slot
    its last victim freed (the allocator reuses the last freed slot first),
    the other victims' slots going to the free list.  The same victims, float
    arithmetic, slots and stamps as :func:`_room_single` then ``add`` key by
    key, without their per-key calls.  Returns the first key not decided
    (one that fits without eviction, for the bulk path), or ``len(new)``.
    """
    b, c = nbytes[0], tier.capacity[0]
    if b > c:  # no key fits: nothing is taken, nothing evicted
        return len(new)
    lru, entries, used = tier.lru, tier.entries, tier.used
    if _steady(used[0], b, c):
        return _replace_run(tier, new, i, runs, nbytes, out)
    alloc = tier.allocators[0]
    units = runs[0][2] - runs[0][1]
    free = alloc._free.setdefault(units, [])
    none: set[int] = set()
    n = len(new)
    while i < n:
        u = used[0]
        short = u + b - c
        if short <= SLACK:
            return i
        slot = -1
        while short > SLACK:
            e = lru.top(0, entries, none)
            if e is None:
                break
            lru.pop(0)
            short -= e.nbytes[0]
            if e.ref_cnt > READY:  # pragma: no cover - book-keeping bug
                raise RuntimeError(f"{tier.name}: entry {e.key} evicted while in use")
            del entries[e.key]
            e.stamp = DEAD
            u -= e.nbytes[0]
            if slot >= 0:
                free.append(slot)
            slot = e.slots[0]
            tier.evictions += 1
            alloc.live -= 1
        if u + b - c <= SLACK:  # ok: the key takes the last victim's slot
            if slot < 0:
                slot = alloc.alloc(units)
            else:
                alloc.live += 1
            tier._clock += 1
            entry = entries[new[i]] = Entry(new[i], runs, (slot,), nbytes, tier._clock)
            out.append(entry)
            u += b
        elif slot >= 0:  # no room: not placed
            free.append(slot)
        used[0] = u
        i += 1
    return i


def _steady(u: float, b: float, c: float) -> bool:
    """Whether a key of ``b`` bytes on a one-device tier of capacity ``c``
    holding ``u`` bytes, victims dropped, does exactly what
    :func:`_replace_single` then does with the same float operations: it is
    short (``u + b - c > SLACK``), one victim of ``b`` is enough, the key
    then fits, and ``used`` ends where it began (``u - b + b == u``), so
    that the next key starts from the same state and does the same."""
    short = u + b - c
    return short > SLACK and short - b <= SLACK and u - b + b - c <= SLACK and u - b + b == u


def _replace_run(
    tier: Tier,
    new: Sequence[int],
    i: int,
    runs: Runs,
    nbytes: list[float],
    out: list[Entry],
) -> int:
    """:func:`_replace_single` in a steady state (:func:`_steady`): every key
    ``new[i:]`` takes exactly one victim, in LRU order, and its slot, with
    ``used`` unchanged, until the victims run out; the keys left over find
    none and are short (let go).
    Returns ``len(new)``."""
    c = tier._clock  # each victim renewed as the next key's entry as the walk takes it
    victims = tier.lru.take(0, tier.entries, len(new) - i, drop=True, names=new[i:], stamp=c + 1)
    m = len(victims)
    tier._clock = c + m
    tier.evictions += m
    out += victims
    return len(new)


def short_key(
    tier: Tier,
    key: int,
    plan: Runs,
    evict: EvictFn | None,
    placed: list[Entry],
) -> None:
    """The per-key path for a key of a pool tier whose ``plan`` does not fit:
    :meth:`OffloadTier.spill` then :meth:`OffloadTier.make_room` and ``add``,
    inlined (the same comparisons and float additions, in the same order)."""
    alt = spill_layout(tier, tier.used)
    if alt is None:
        evict_key(tier, key, plan, evict, placed)
        return
    nbytes = tier.bytes_on(alt)
    placed += tier.add([key], alt, nbytes)
    used = tier.used
    for d, x in enumerate(nbytes):
        used[d] += x


def spill_layout(tier: Tier, used: list[float]) -> Runs | None:
    """:meth:`OffloadTier.spill` of a key that does not fit as laid out, the
    tier holding ``used`` bytes per device (:func:`sim.serving.tiers.poolroom.plain_spill`),
    remembered per state of the tier's room thresholds."""
    return room_index(tier, SLACK).spill(used)


def evict_key(
    tier: Tier,
    key: int,
    plan: Runs,
    evict: EvictFn | None,
    placed: list[Entry],
) -> None:
    """A key of a pool tier that neither fits as laid out (``plan``) nor
    spills: :meth:`OffloadTier.make_room` for ``plan`` then ``add`` (placed),
    or the key is let go (no room)."""
    used, caps = tier.used, tier.capacity
    nbytes = tier.bytes_on(plan)
    if any(x > c for x, c in zip(nbytes, caps, strict=True)):
        return  # full
    short = [u + x - c for u, x, c in zip(used, nbytes, caps, strict=True)]
    tier.evict_all(tier.take_victims(short), evict)
    if not all(u + x - c <= SLACK for u, x, c in zip(used, nbytes, caps, strict=True)):
        return  # no room
    placed += tier.add([key], plan, nbytes)
    for d, x in enumerate(nbytes):
        used[d] += x

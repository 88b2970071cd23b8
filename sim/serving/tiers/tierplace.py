"""Placing an offload set in an offload tier: key by key, runs that fit at once.

:meth:`sim.serving.tiers.blocks.OffloadTier.place` decides the keys of one
offload set in order, each seeing the room its predecessors took or made.
A key, laid out by Algorithm 1 (``plans``, :func:`sim.serving.tiers.placement.layer_runs`)
as needing ``need[d]`` bytes on device ``d``, is

1. placed as laid out if it fits: ``used + need <= capacity`` on every device;
2. else, on a tier of several devices (a pool), placed as
   :meth:`~sim.serving.tiers.blocks.OffloadTier.spill` lays it out over the
   devices with room, if a layout fits there;
3. else let go if ``need`` exceeds what the tier holds (a pool: its
   devices' capacities summed; nothing evicted);
4. else LRU victims are evicted, whatever devices they are on, until the
   tier's free bytes (summed over its devices) cover ``need`` and no device
   holds more than its capacity (:meth:`sim.serving.tiers.lru.Walk.victims`;
   each handed to ``evict``, then its bytes and slots freed), and the key
   placed as in 1 or 2; while neither fits (free bytes that are not whole
   layers where the layout wants them) the walk's next victim goes too,
   and a key the walk cannot make room for is let go.

That is the whole rule; the rest is book-keeping of the same decisions:

* **Runs that fit.**  Byte counts are whole, so ``k`` consecutive keys of
  one layout all fit exactly when ``used + k * need <= capacity`` on every
  device: how many do is a division (:func:`fitting`), and they are placed as
  one run (slots taken in one ``alloc_many`` per device run, which gives what
  ``k`` calls of ``alloc`` give).  Algorithm 1 gives a set's keys a few
  layouts, each over a stretch of keys, and every key of a one-device tier
  the same one.
* **Runs that spill alike.**  The spill rule reads the used bytes only
  through comparisons ``used + y <= capacity`` (``y``: a layer, or what a
  layout it tried puts on a device); keys of one layout that do not fit
  stay so as more keys are placed, and each spilled key only adds bytes, so
  the rule says the same for every key until one of those comparisons turns:
  :meth:`~sim.serving.tiers.blocks.OffloadTier.spill` says when, and the keys
  up to then are placed as one run.
* **Keys that each take one victim.**  On one device every entry holds the
  same bytes as a new key (all layers), so while the tier holds no more
  than its capacity a key short of room needs exactly one victim and leaves
  ``used`` as it found it: the keys left of the set need the walk's next
  victims, one each, asked of it in one call, and each is placed in the
  bytes and slot its victim left (:func:`_in_place_of`: the allocator
  reuses the last freed slot first); the keys past the victims found are
  let go.  (A tier holding more than its capacity, a peer tier whose lender
  took memory back, decides key by key.)
* **Keys that find the tier as the key before found it.**  On a pool (or a
  tier over its capacity) a key short of room takes its own victims; when
  that leaves ``used`` as the key found it, the next key of its layout is
  short of room in the same way (the checks of 1 and 2 read ``used`` only),
  and when its one victim has the runs a key before it took over, freeing
  it and placing the key leaves the same room in the same slots: the key
  takes the victim's bytes and slots (:func:`_by_victims`).  In a full pool
  most victims are spilled blocks on the SSDs, and a key spills to where
  its victim was.
* **One LRU walk per placement** (:mod:`sim.serving.tiers.lru`): the keys of
  the set share it, so it never steps over the same entries twice.  For that
  the tier's entries and order stay as they are until the set is decided:
  the victims are removed and the new entries (not ready, never victims)
  join the order at the end, in order, which leaves the tier as removing
  and adding each at once would.  A victim is handed to ``evict`` while
  still in the tier (a demotion copies it from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby, repeat
from operator import add

from sim.serving.tiers.entry import Entry, Runs
from sim.serving.tiers.lru import Walk
from sim.serving.tiers.tier import EvictFn, Tier


def place(
    tier: Tier, new: Sequence[int], plans: Sequence[Runs], evict: EvictFn | None
) -> list[Entry]:
    """Decide keys ``new`` (none in the tier), laid out as ``plans``, in order
    (module docstring); returns the entries placed, in order."""
    used, caps = tier.used, tier.capacity
    pool = len(caps) > 1
    walk: Walk | None = None  # the placement's LRU walk, from the first key short of room
    made: list[Entry] = []
    gone: list[Entry] = []
    i = 0
    for plan, group in groupby(plans):  # stretches of keys laid out alike
        end = i + len(list(group))
        need = tier.bytes_on(plan)
        # more than the tier holds (one device: that device; a pool: all of them)
        too_big = sum(need) > sum(caps) if pool else need[0] > caps[0]
        while i < end:
            k = fitting(used, need, caps)
            if k:  # keys i .. i + k - 1 fit as laid out
                k = min(k, end - i)
                made += _put(tier, new[i : i + k], plan, need)
                i += k
                continue
            if pool:
                alt, k = tier.spill(end - i)
                if alt is not None:  # keys i .. i + k - 1 spill alike
                    k = min(k, end - i)
                    made += _put(tier, new[i : i + k], alt, tier.bytes_on(alt))
                    i += k
                    continue
            if too_big:
                i += 1
                continue  # never fits: nothing evicted
            if walk is None:
                walk = tier.lru.walk()
            if pool or used[0] > caps[0]:  # key i (and the keys after it that find the same)
                i = _by_victims(tier, walk, new, i, end, plan, need, evict, made, gone)
            else:  # one device, keys i .. end - 1 each short of room: one victim each
                m = end - i
                victims = walk.victims(used[0] + m * need[0] - caps[0])
                tier.hand_over(victims, evict)
                made += _in_place_of(new[i : i + len(victims)], victims)
                i = end  # the keys past the victims found none: let go
                gone += victims
    entries, lru = tier.entries, tier.lru
    for e in gone:
        del entries[e.key]
        lru.remove(e)
    entries.update([(e.key, e) for e in made])
    lru.add(made)
    return made


def _by_victims(
    tier: Tier, walk: Walk, keys: Sequence[int], i: int, end: int, plan: Runs,
    need: tuple[int, ...], evict: EvictFn | None, made: list[Entry], gone: list[Entry],
) -> int:  # fmt: skip
    """Keys ``i`` .. ``end - 1`` (laid out as ``plan``, ``need`` bytes per
    device), the first short of room (rule 4: it fits neither as laid out nor
    spilled): each key's victims evicted, then the key placed if it fits
    (else its walk's next victim too), while each key leaves ``used`` as key
    ``i`` found it (where rule 4 applies again, with the same shortfall and
    excess); the victims in ``gone``, the entries in ``made``.  Returns the
    first key not decided.

    With no device over its capacity and the tier short by at most one
    block's bytes (what every entry holds), a key's victim from that state is
    the walk's next evictable entry.  When a key's one victim, freed, leaves
    room for it laid out as the victim was (the same runs: the same bytes
    per device), the key takes the victim's bytes and slots
    (:func:`_in_place_of`: freeing a slot then taking one of its size gives
    it back), and so does every next key whose victim has runs a key took
    over so (``alike``): each sees what that key saw after the free.  Those
    victims are taken as one run (:meth:`sim.serving.tiers.lru.Walk.alike`),
    each handed over alone when a callback is told of evictions."""
    used = tier.used
    found = used[:]  # key i's state: nothing fits as laid out or spilled
    short, over = tier.short(need), tier.over()
    one = max(over) <= 0 and short <= sum(need)  # each key's victim: the walk's next entry
    alike: set[Runs] = set()  # a lone victim's runs that a key here takes over
    while True:
        if one and alike:
            run = walk.alike(alike, end - i)
            if run:
                if evict is None:
                    tier.hand_over(run, None)
                else:  # one eviction per key
                    for v in run:
                        tier.hand_over([v], evict)
                gone += run
                made += _in_place_of(keys[i : i + len(run)], run)
                i += len(run)
                if i == end:
                    return i
        # none (the tier not short): free bytes that are not whole layers where a
        # layout wants them, so one victim (what rule 4 asks after placing fails)
        victims = walk.victims(short, over) or walk.victims(1)
        while True:
            lone = len(victims) == 1 and used == found
            tier.hand_over(victims, evict)
            tier.free(victims)
            gone += victims
            runs = _fit(tier, plan, need)
            if runs is not None:
                made += _put(tier, keys[i : i + 1], runs, tier.bytes_on(runs))
                if lone and runs == victims[0].runs:
                    alike.add(runs)
                break
            victims = walk.victims(1)  # a layout short of whole layers: one more
            if not victims:
                break  # the walk ended: let go
        i += 1
        if i == end or used != found:
            return i


def _fit(tier: Tier, plan: Runs, need: tuple[int, ...]) -> Runs | None:
    """Where a key laid out as ``plan`` (``need`` bytes per device) goes now:
    as laid out if it fits, else (a pool) as the spill lays it out, else
    None."""
    if fitting(tier.used, need, tier.capacity):
        return plan
    return tier.spill()[0] if len(need) > 1 else None


def fitting(used: Sequence[int], need: Sequence[int], caps: Sequence[int]) -> int:
    """How many more blocks of ``need`` bytes per device fit: the fewest
    ``(capacity - used) // need`` over the devices it has bytes on (0: none)."""
    k = -1
    for u, x, c in zip(used, need, caps, strict=True):
        if x:
            m = (c - u) // x
            if m <= 0:
                return 0
            if k < 0 or m < k:
                k = m
    return max(k, 0)


def _in_place_of(keys: Sequence[int], victims: Sequence[Entry]) -> list[Entry]:
    """New not-ready entries for ``keys`` on a one-device tier, key ``j`` in
    the bytes and slot ``victims[j]`` left: what freeing the victim then
    :func:`_put` of the key give, pair by pair (the allocator reuses the last
    freed slot first; every entry of the tier holds the same bytes)."""
    return [Entry(k, v.runs, v.slots, v.nbytes, v.devs) for k, v in zip(keys, victims, strict=True)]


def _put(tier: Tier, keys: Sequence[int], runs: Runs, need: tuple[int, ...]) -> list[Entry]:
    """New not-ready entries for ``keys``, all laid out as ``runs``: their
    slots taken (what one ``alloc`` per key and run gives, in order) and their
    bytes added; the caller adds them to ``entries``."""
    n, alloc, used, devs = len(keys), tier.allocators, tier.used, tier.devices_of(need)
    if n == 1:
        used[:] = map(add, used, need)
        slot = tuple([alloc[d].alloc(l1 - l0) for d, l0, l1 in runs])
        return [Entry(keys[0], runs, slot, need, devs)]
    for d, x in enumerate(need):
        used[d] += n * x
    per_run = [alloc[d].alloc_many(l1 - l0, n) for d, l0, l1 in runs]
    slots = [(s,) for s in per_run[0]] if len(runs) == 1 else list(zip(*per_run, strict=True))
    return list(map(Entry, keys, repeat(runs, n), slots, repeat(need, n), repeat(devs, n)))

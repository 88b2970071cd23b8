"""Placing an offload set decides every key as the per-key definition does.

:class:`RefTier` below is the definition written plainly: every key laid out
by Algorithm 1, spilled over the devices with room, and LRU victims found by
walking a plain list in LRU order (pool-wide: whatever devices an entry is
on; no runs, no walk kept across keys).  Hand-worked cases hold both to
bytes worked out by hand; seeded random workloads drive :class:`OffloadTier`
and the definition side by side: the same keys placed, the same victims in
the same order, the same used bytes, slots, live slot counts, reference
counts and LRU order after every step (and the tier never holds more than
its capacity).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from sim.serving.tiers.blocks import READY, Entry, OffloadTier
from sim.serving.tiers.layout import SlotAllocator, layer_stride
from sim.serving.tiers.placement import layer_runs


class RefEntry:
    def __init__(self, key: int, runs, slots, nbytes: list[int]):
        self.key, self.runs, self.slots, self.nbytes = key, runs, slots, nbytes
        self.ref_cnt = -1


class RefTier:
    """Per-key placement, victims by a scan of a list in LRU order (the definition)."""

    def __init__(self, ratios, caps, layers: int, layer_bytes: int):
        self.ratios, self.caps, self.L, self.lb = list(ratios), list(caps), layers, layer_bytes
        self.order: list[RefEntry] = []  # least recently used first
        self.used = [0] * len(caps)
        self.alloc = [SlotAllocator(layer_stride(layer_bytes)) for _ in caps]

    def need(self, runs) -> list[int]:
        out = [0] * len(self.caps)
        for d, l0, l1 in runs:
            out[d] += (l1 - l0) * self.lb
        return out

    def fits(self, need) -> bool:
        return all(u + x <= c for u, x, c in zip(self.used, need, self.caps, strict=True))

    def spill(self, runs):
        if len(self.caps) == 1 or self.fits(self.need(runs)):
            return runs
        room = [c - u >= self.lb for u, c in zip(self.used, self.caps, strict=True)]
        while any(room):
            r = [p if ok else 0.0 for p, ok in zip(self.ratios, room, strict=True)]
            alt = layer_runs([p / sum(r) for p in r], 1, self.L)[0]
            need = self.need(alt)
            if self.fits(need):
                return alt
            fit = [u + x <= c for u, x, c in zip(self.used, need, self.caps, strict=True)]
            room = [ok and f for ok, f in zip(room, fit, strict=True)]
        return runs

    def victims(self, short: int, over: list[int]) -> list[RefEntry]:
        """Ready entries in LRU order while the pool is ``short`` (any entry) or
        one has bytes on a device still ``over`` its capacity."""
        out = []
        for e in self.order:
            if short <= 0 and all(o <= 0 for o in over):
                break
            if e.ref_cnt == READY and (
                short > 0 or any(o > 0 and b > 0 for o, b in zip(over, e.nbytes, strict=True))
            ):
                out.append(e)
                short -= sum(e.nbytes)
                over = [o - b for o, b in zip(over, e.nbytes, strict=True)]
        return out

    def shortfall(self, need) -> tuple[int, list[int]]:
        """The pool's bytes short of ``need`` and each device's bytes over capacity."""
        short = sum(self.used) + sum(need) - sum(self.caps)
        return short, [u - c for u, c in zip(self.used, self.caps, strict=True)]

    def too_big(self, need) -> bool:
        return sum(need) > sum(self.caps)

    def place(self, keys, evict):
        held = {e.key for e in self.order}
        new = [k for k in keys if k not in held]
        placed = []
        for key, planned in zip(new, layer_runs(self.ratios, len(new), self.L), strict=True):
            runs = self.spill(planned)
            need = self.need(runs)
            if not self.fits(need):
                if self.too_big(need):
                    continue  # never fits: nothing evicted
                for e in self.victims(*self.shortfall(need)):
                    evict(e)  # handed over, then dropped
                    self.drop(e)
                runs = self.spill(planned)  # as laid out if it fits, else spilled
                while not self.fits(self.need(runs)):  # free bytes not in whole layers
                    nxt = next((e for e in self.order if e.ref_cnt == READY), None)
                    if nxt is None:
                        break
                    evict(nxt)
                    self.drop(nxt)
                    runs = self.spill(planned)
                need = self.need(runs)
                if not self.fits(need):
                    continue  # no room: let go
            slots = tuple(self.alloc[d].alloc(l1 - l0) for d, l0, l1 in runs)
            self.order.append(RefEntry(key, runs, slots, need))
            self.used = [u + x for u, x in zip(self.used, need, strict=True)]
            placed.append(key)
        return placed

    def drop(self, e: RefEntry) -> None:
        self.order.remove(e)
        self.used = [u - x for u, x in zip(self.used, e.nbytes, strict=True)]
        for (d, l0, l1), s in zip(e.runs, e.slots, strict=True):
            self.alloc[d].free(s, l1 - l0)

    def get(self, key: int) -> RefEntry:
        return next(e for e in self.order if e.key == key)


def lru_keys(t: OffloadTier) -> list[int]:
    """``t``'s keys, least recently used first."""
    return [e.key for e in t.lru.order()]


def same_books(t: OffloadTier, r: RefTier) -> None:
    assert lru_keys(t) == [e.key for e in r.order]  # LRU order
    assert sorted(t.entries) == sorted(e.key for e in r.order)
    assert t.used == r.used and all(type(u) is int for u in t.used)  # whole bytes
    for e in r.order:
        f = t.entries[e.key]
        assert (f.runs, f.slots, f.ref_cnt) == (e.runs, e.slots, e.ref_cnt)
        assert list(f.nbytes) == e.nbytes
    assert [a.live for a in t.allocators] == [a.live for a in r.alloc]
    # the evictable bytes, kept as counts move, against the definition's ready entries
    ready = [e.nbytes for e in r.order if e.ref_cnt == READY]
    assert t.evictable == [sum(b[d] for b in ready) for d in range(len(r.caps))]
    # the room check without a walk answers as the definition's walk does
    for need in _needs(r):
        short, over = r.shortfall(need)
        for e in r.victims(short, over):
            short -= sum(e.nbytes)
            over = [o - b for o, b in zip(over, e.nbytes, strict=True)]
        want = not r.too_big(need) and short <= 0 and max(over) <= 0
        assert t.room_for(need) == want, need


def _needs(r: RefTier) -> list[list[int]]:
    """Needs around what the tier has free and its ready entries hold: none,
    a layer per device, the free bytes plus all ready bytes exactly and one
    byte beyond (on one device and spread), and the whole capacity and one
    byte beyond."""
    n = len(r.caps)
    room = sum(r.caps) - sum(r.used) + sum(sum(e.nbytes) for e in r.order if e.ref_cnt == READY)
    out = [[0] * n, [r.lb] * n, [sum(r.caps)] + [0] * (n - 1), [sum(r.caps) + 1] + [0] * (n - 1)]
    for x in (room, room + 1):
        if x >= 0:
            out.append([x] + [0] * (n - 1))
            out.append([x // n + (i < x % n) for i in range(n)])
    return out


def same_life(t: OffloadTier, r: RefTier, rng: np.random.Generator) -> None:
    """The same random completions and loads (pin, touch, unpin) in a tier and
    the per-key definition, one draw per entry (in LRU order)."""
    for e in list(t.lru.order()):
        f, x = r.get(e.key), rng.random()
        if e.ref_cnt == -1 and x < 0.6:
            t.complete_all([e])
            f.ref_cnt = READY
        elif e.ref_cnt == READY and x < 0.1:
            t.pin_touch_all([e])
            f.ref_cnt += 1
            r.order.remove(f)
            r.order.append(f)
        elif e.ref_cnt > READY and x < 0.4:
            t.unpin_all([e])
            f.ref_cnt -= 1


# ---- hand-worked ------------------------------------------------------------------------
def test_a_full_tier_hands_each_victim_over_then_frees_its_block() -> None:
    """A one-device tier of 4 blocks (4 layers of 4096 bytes: 16384 bytes a
    block) holding 4 ready entries, 1 least recently used.  A set of 6 new
    keys: key 11 evicts 1 and takes its block, 12 evicts 2, ..., 14 evicts
    4; 15 and 16 find only not-ready entries (11..14) and are let go.  Each
    victim is handed over while it is still in the tier (the manager copies
    it below from there) and is gone afterwards; ``used`` stays 4 blocks and
    each new key holds the slot its victim left."""
    layers, lb = 4, 4096
    block = layers * lb
    tier = OffloadTier("cpu", ["m0"], [1.0], [4 * block], layers, lb)
    old = tier.place([1, 2, 3, 4], None)
    tier.complete_all(old)
    slot = {e.key: e.slots for e in old}
    handed: list[tuple[int, bool]] = []

    def demote(t: OffloadTier, es: Sequence[Entry]) -> None:
        handed.extend((e.key, t.entries.get(e.key) is e) for e in es)

    placed = tier.place([11, 12, 13, 14, 15, 16], demote)
    assert [e.key for e in placed] == [11, 12, 13, 14]
    assert handed == [(1, True), (2, True), (3, True), (4, True)]
    assert lru_keys(tier) == [11, 12, 13, 14] and sorted(tier.entries) == [11, 12, 13, 14]
    assert tier.evictions == 4 and tier.used == [4 * block]
    assert [e.slots for e in placed] == [slot[1], slot[2], slot[3], slot[4]]
    assert tier.allocators[0].live == 4


def test_a_one_device_tier_replaces_its_victims_past_a_pinned_one() -> None:
    """A one-device tier of 3 blocks of 32 one-byte layers (96 bytes) holding
    ready entries 1, 2, 3 (LRU order), 2 pinned by a load.  Placing 7, 8, 9
    with victims dropped: 7 replaces 1 (slot 0), 8 passes 2 (in use) and
    replaces 3 (slot 64), 9 finds none left (2 is pinned, 7 and 8 are not
    ready) and is let go; 2 keeps its place at the front.  A slot is 32
    layers of 4096 bytes (a layer's 1 byte rounded up to 4 KiB): 131072."""
    tier = OffloadTier("t", ["d0"], [1.0], [96], 32, 1)
    tier.complete_all(tier.place([1, 2, 3], None))
    assert [tier.entries[k].slots for k in (1, 2, 3)] == [(0,), (131072,), (262144,)]
    tier.pin(tier.entries[2])
    placed = tier.place([7, 8, 9], None)
    assert [(e.key, e.slots) for e in placed] == [(7, (0,)), (8, (262144,))]
    assert lru_keys(tier) == [2, 7, 8] and tier.used == [96] and tier.evictions == 2


def test_a_tier_over_its_capacity_takes_as_many_victims_as_a_key_needs() -> None:
    """A one-device tier of 4 blocks of 32 bytes holding 4 ready entries,
    its capacity then cut to 80 bytes (a lender took memory back): key 9
    is short by 128 + 32 - 80 = 80 bytes and takes 1, 2 and 3 (96 bytes),
    then fits (64 <= 80) in the slot 3 left; key 10 is short by 16: 4 goes,
    and 10 takes its slot.  The definition decides the same."""
    tier, ref = OffloadTier("t", ["d0"], [1.0], [128], 32, 1), RefTier([1.0], [128], 32, 1)
    tier.complete_all(tier.place([1, 2, 3, 4], None))
    ref.place([1, 2, 3, 4], lambda _e: None)
    for e in ref.order:
        e.ref_cnt = READY
    slot = {k: tier.entries[k].slots for k in (3, 4)}
    tier.capacity[0] = ref.caps[0] = 80
    placed = tier.place([9, 10], None)
    assert [(e.key, e.slots) for e in placed] == [(9, slot[3]), (10, slot[4])]
    assert ref.place([9, 10], lambda _e: None) == [9, 10]
    assert tier.used == [64] and tier.evictions == 4
    same_books(tier, ref)


def _three_devices() -> OffloadTier:
    """Devices 0, 1, 2 of ratios 0.5, 0.25, 0.25 and 3000, 4000, 3000 bytes;
    blocks of 4 layers of 1000 bytes.  Algorithm 1 lays a block out as
    layers 0-1 on device 0, 2 on device 1, 3 on device 2: (2000, 1000, 1000)."""
    return OffloadTier("pool", ["d0", "d1", "d2"], [0.5, 0.25, 0.25], [3000, 4000, 3000], 4, 1000)


def test_a_spill_worked_by_hand_in_bytes() -> None:
    """Key A fits as laid out: used (2000, 1000, 1000).  Key B as laid out
    would put 4000 on device 0 (3000): it spills.  Every device has a layer
    of room, and the layout over all three is B's own, short on device 0;
    narrowed to devices 1 and 2 (each 0.5 now): layers 0-1 on 1, 2-3 on 2,
    (0, 2000, 2000), which fits: used (2000, 3000, 3000).  Key C as laid
    out needs 4000 on 0 and 4000 on 2: spill.  Device 2 has no layer of room
    (0 bytes); over devices 0 and 1 (ratios 2/3, 1/3: 4 layers floor to
    2 + 1, the one left over to device 0): layers 0-2 on 0, 3 on 1,
    (3000, 1000, 0), short on device 0 (5000); narrowed to device 1: all four
    layers, 7000 > 4000; nothing left: C must evict.  The pool holds 8000 of
    10000 bytes, 2000 short of C's 4000: A, the least recently used (4000
    bytes), goes, and C is placed as laid out."""
    t = _three_devices()
    a = t.place([1], None)[0]  # A
    assert a.runs == ((0, 0, 2), (1, 2, 3), (2, 3, 4)) and t.used == [2000, 1000, 1000]
    b = t.place([2], None)[0]  # B
    assert b.runs == ((1, 0, 2), (2, 2, 4)) and t.used == [2000, 3000, 3000]
    assert t.runs_over((True, True, False)) == (((0, 0, 3), (1, 3, 4)), (3000, 1000, 0))
    t.complete_all([a, b])
    seen: list[int] = []
    (c,) = t.place([3], lambda _t, es: seen.extend(e.key for e in es))
    assert seen == [1] and c.runs == a.runs
    assert t.used == [2000, 3000, 3000] and lru_keys(t) == [2, 3]


def test_a_three_device_pool_walks_past_a_pinned_entry_at_the_front() -> None:
    """The spill case above with A (at the front) pinned by a load: C's walk
    skips A; B (4000 bytes) covers the pool's 2000 short and goes: used
    (2000, 1000, 1000).  C as laid out would put 4000 on device 0 (3000);
    spilled over all three it is its own layout, short on device 0; over
    devices 1 and 2, (0, 2000, 2000), it fits: used (2000, 3000, 3000), A
    stays, pinned, at the front."""
    t = _three_devices()
    a = t.place([1], None)[0]
    b = t.place([2], None)[0]
    t.complete_all([a, b])
    t.pin_all([a])
    assert t.victims(2000) == [b]  # taking nothing
    (c,) = t.place([3], None)
    assert c.runs == ((1, 0, 2), (2, 2, 4)) and c.nbytes == (0, 2000, 2000)
    assert lru_keys(t) == [1, 3] and t.used == [2000, 3000, 3000] and t.evictions == 1


def _two_device_pool() -> OffloadTier:
    """A pool of host memory (device 0, 2000 bytes) and an SSD (device 1, 5000
    bytes), ratios 0.5 / 0.5, blocks of 2 layers of 1000 bytes: as laid out,
    layer 0 in host memory and layer 1 on the SSD, (1000, 1000)."""
    return OffloadTier("pool", ["dram0", "ssd0"], [0.5, 0.5], [2000, 5000], 2, 1000)


def test_the_pool_evicts_its_lru_entry_whatever_its_devices() -> None:
    """A and B fit as laid out: used (2000, 2000), host memory full.  C
    spills to the SSD, both layers: (0, 2000), used (2000, 4000).  Loads
    touch A then B: the order is C, A, B, C the least recently used and on
    the SSD alone.  D as laid out needs 1000 in host memory (full); spilled
    to the SSD alone it needs 2000 there (1000 free): D must evict.  The pool
    holds 6000 of 7000 bytes, 1000 short of D's 2000: C (2000 bytes) goes,
    though it frees no host memory, and D spills to the SSD: (0, 2000), used
    (2000, 4000), A and B stay.  (Victims per device short would have taken
    A, the least recently used entry with host-memory bytes, more recent
    than C, and placed D as laid out.)"""
    t = _two_device_pool()
    a, b = t.place([1, 2], None)
    assert a.nbytes == b.nbytes == (1000, 1000) and t.used == [2000, 2000]
    (c,) = t.place([3], None)
    assert c.runs == ((1, 0, 2),) and t.used == [2000, 4000]
    t.complete_all([a, b, c])
    t.touch_all([a, b])
    assert lru_keys(t) == [3, 1, 2]
    seen: list[int] = []
    (d,) = t.place([4], lambda _t, es: seen.extend(e.key for e in es))
    assert seen == [3] and d.runs == ((1, 0, 2),) and d.nbytes == (0, 2000)
    assert t.used == [2000, 4000] and lru_keys(t) == [1, 2, 4] and t.evictions == 1


def test_a_full_pool_places_each_key_where_its_one_victim_was() -> None:
    """A pool of two devices of 2 and 4 bytes, blocks of 2 one-byte layers,
    ratios 0.5 / 0.5: laid out, a block has layer 0 on d0 and layer 1 on d1.
    Keys 1, 2 laid out (used 2, 2: d0 full), key 3 spilled to d1 (used 2,
    4: full), all ready; slots of one 4096-byte unit per layer: 1 at
    (0, 0), 2 at (4096, 4096), 3 at (8192,) on d1.  A set of 4, 5, 6, 7,
    each laid out as 1 was: 4 fits neither laid out nor spilled (no device
    has a layer free) and is short by 4 + 2 - 6 = 2 bytes: its victim 1
    frees a layer on each device and 4 takes 1's layout, bytes and slots;
    5 finds the tier as 4 did, evicts 2 and takes its place; 6 evicts 3
    (d1 only: 2 bytes free on d1, none on d0), spills to d1 and takes 3's
    slot; 7 finds no ready entry and is let go.  Victims handed over in LRU
    order, one key at a time; used stays (2, 4)."""
    t = OffloadTier("pool", ["d0", "d1"], [0.5, 0.5], [2, 4], 2, 1)
    both, on1 = ((0, 0, 1), (1, 1, 2)), ((1, 0, 2),)
    t.complete_all(t.place([1, 2], None))
    t.complete_all(t.place([3], None))
    assert [(t.entries[k].runs, t.entries[k].slots) for k in (1, 2, 3)] == [
        (both, (0, 0)),
        (both, (4096, 4096)),
        (on1, (8192,)),
    ]
    assert t.used == [2, 4]
    handed: list[list[int]] = []
    placed = t.place([4, 5, 6, 7], lambda _t, es: handed.append([e.key for e in es]))
    assert [(e.key, e.runs, e.slots) for e in placed] == [
        (4, both, (0, 0)),
        (5, both, (4096, 4096)),
        (6, on1, (8192,)),
    ]
    assert handed == [[1], [2], [3]] and t.evictions == 3
    assert t.used == [2, 4] and lru_keys(t) == [4, 5, 6]
    assert [a.live for a in t.allocators] == [2, 3]
    ref = RefTier([0.5, 0.5], [2, 4], 2, 1)  # the definition decides the same
    ref.place([1, 2], lambda _e: None)
    ref.place([3], lambda _e: None)
    for e in ref.order:
        e.ref_cnt = READY
    assert ref.place([4, 5, 6, 7], lambda _e: None) == [4, 5, 6]
    same_books(t, ref)


def test_a_walk_over_a_pool_takes_its_lru_entries_whatever_their_devices() -> None:
    """A pool of two devices, 2 one-byte layers a block, ratios 0.5 / 0.5:
    as laid out a block has a layer on each; spilled, both on one device.
    Entries in LRU order: P (device 1 only), Q (both), R (device 0 only),
    S (both), all ready, 2 bytes each.  The pool short by 2: P; by 3: P, Q.
    Device 0 over its capacity by 2 (a lender took memory back): Q (1), R.
    One walk asked four times continues where it stopped, and looks first
    at the entries it passed by (P, for device 0's excess)."""
    t = OffloadTier("pool", ["d0", "d1"], [0.5, 0.5], [100, 100], 2, 1)
    both, on0, on1 = ((0, 0, 1), (1, 1, 2)), ((0, 0, 2),), ((1, 0, 2),)
    made = []
    for key, runs in zip("PQRS", (on1, both, on0, both), strict=True):
        need = t.bytes_on(runs)
        made.append(Entry(ord(key), runs, (0,) * len(runs), need, t.devices_of(need)))
    t.lru.add(made)
    t.entries.update({e.key: e for e in made})
    t.complete_all(made)
    p, q, r, s = made
    assert t.victims(2) == [p]
    assert t.victims(3) == [p, q]
    assert t.victims(0, [2, 0]) == [q, r]
    walk = t.lru.walk()  # one walk: each call continues where the last stopped
    assert walk.victims(0, [1, 0]) == [q]  # P passed by
    assert walk.victims(1) == [p]
    assert walk.victims(5) == [r, s]
    assert walk.victims(1) == []  # the walk ended


# ---- the definition on random workloads --------------------------------------------------
SHAPES = {
    "one device": ([1.0], [60 * 32]),
    "pool of three": ([0.2, 0.3, 0.5], [15 * 32, 10 * 32, 40 * 32]),
    # one device far too small for its share: most keys spill over the others
    "pool of four, one tiny": ([0.1, 0.4, 0.2, 0.3], [3 * 32, 12 * 32, 30 * 32, 9 * 32]),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("callback", [True, False])
def test_placement_matches_the_per_key_definition(shape: str, seed: int, callback: bool) -> None:
    """``callback`` False: placement is told victims are dropped (no
    callback: on one device, keys placed where their victims were); the
    definition drops them."""
    ratios, caps = SHAPES[shape]
    _drive(ratios, caps, seed, callback, universe=400, most=40, steps=300)


# a pool like seed 004's: two fast small devices (DRAM) and two slow large
# ones (SSDs), sets of up to 250 keys: long runs of keys that spill to the
# large devices once the small ones are full, and of keys that evict
LONG = {
    "dram and ssd": ([0.4, 0.4, 0.1, 0.1], [30 * 32, 30 * 32, 400 * 32, 400 * 32]),
    "uneven": ([0.5, 0.3, 0.2], [20 * 32, 350 * 32, 200 * 32]),
}


@pytest.mark.parametrize("shape", sorted(LONG))
@pytest.mark.parametrize("seed", [4, 5])
def test_long_sets_with_and_without_a_callback_match_the_per_key_definition(
    shape: str, seed: int
) -> None:
    """Large sets, every third one placed with no callback: still exactly
    the per-key decisions."""
    ratios, caps = LONG[shape]
    _drive(ratios, caps, seed, True, universe=2000, most=250, steps=40, mixed=True)


@pytest.mark.parametrize("seed", [6, 7])
def test_a_one_device_tier_of_large_blocks_matches_the_definition(seed: int) -> None:
    """Whole-byte sizes as a model gives them (Llama-3.1-8B at 16-token
    blocks: 65536 bytes a layer, 32 layers) and a capacity that is not a
    whole number of blocks (60.5 blocks, given as a float and floored)."""
    lb = 65536
    _drive([1.0], [60.5 * 32 * lb], seed, False, universe=400, most=40, steps=200, lb=lb)


def _drive(
    ratios, caps, seed: int, callback: bool, universe: int, most: int, steps: int,
    mixed: bool = False, lb: int = 1,
) -> None:  # fmt: skip
    """Random sets of up to ``most`` of ``universe`` keys placed ``steps``
    times in both tiers, with the same random life in between; ``callback``:
    victims handed to a callback that records them (as the block manager's
    demotion does); ``mixed``: every third set placed with no callback."""
    rng = np.random.default_rng(seed)
    t = OffloadTier("t", [f"d{i}" for i in range(len(caps))], ratios, caps, 32, lb)
    r = RefTier(ratios, [int(c) for c in caps], 32, lb)
    victims: dict[str, list[int]] = {"tier": [], "ref": []}
    for step in range(steps):
        keys = [int(k) for k in rng.choice(universe, int(rng.integers(1, most)), replace=False)]

        def tier_evict(tier: OffloadTier, es: Sequence[Entry]) -> None:
            for e in es:
                assert tier.entries[e.key] is e  # handed over while still in the tier
                victims["tier"].append(e.key)

        def ref_evict(e: RefEntry) -> None:
            victims["ref"].append(e.key)

        dropping = not callback or (mixed and step % 3 == 0)
        seen = len(victims["tier"]), len(victims["ref"])
        placed = t.place(keys, None if dropping else tier_evict)
        assert [e.key for e in placed] == r.place(keys, ref_evict)
        if not dropping:  # this set's victims, in order (none seen when dropped)
            assert victims["tier"][seen[0] :] == victims["ref"][seen[1] :]
        assert t.evictions == len(victims["ref"])
        assert all(u <= c for u, c in zip(t.used, t.capacity, strict=True))
        same_life(t, r, rng)  # the same random life for both
        same_books(t, r)
    if len(caps) > 1:  # some entries spilled: no bytes on a device with a share
        assert any(0 in e.nbytes for e in t.entries.values())
    assert len(victims["ref"]) > 200  # the comparison saw real evictions


def literal_layer_runs(ratios: list[float], n: int, layers: int) -> list:
    """Algorithm 1 item by item: item ``l * n + b`` to its device, runs merged."""
    from sim.serving.tiers.placement import assign

    devices = assign(ratios, layers * n)
    out = []
    for b in range(n):
        runs: list[tuple[int, int, int]] = []
        for layer in range(layers):
            dev = devices[layer * n + b]
            if runs and runs[-1][0] == dev:
                runs[-1] = (dev, runs[-1][1], layer + 1)
            else:
                runs.append((dev, layer, layer + 1))
        out.append(tuple(runs))
    return out


def test_vectorised_layer_runs_equal_the_item_by_item_assignment() -> None:
    rng = np.random.default_rng(5)
    for _ in range(400):
        d = int(rng.integers(2, 6))
        r = rng.random(d) + 0.01
        ratios = [float(x) for x in r / r.sum()]
        n, layers = int(rng.integers(0, 50)), int(rng.integers(1, 40))
        got = layer_runs(ratios, n, layers)
        assert got == literal_layer_runs(ratios, n, layers)
        # blocks laid out alike share one tuple (placement groups keys by layout)
        assert len({id(x) for x in got}) == len(set(got)) <= d + 1

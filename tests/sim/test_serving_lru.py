"""The offload tier's LRU order and its one victim walk, against a plain scan.

:func:`scan_victims` is the victim rule written over a list in LRU order.
:meth:`OffloadTier.victims` (the walk over the order kept per device set)
must give exactly its victims under random pins, touches and spills; one
walk asked several times (as a placement asks it, nothing but victims
leaving in between) must give what fresh scans give with the victims taken
so far removed.
"""

from __future__ import annotations

import numpy as np

from sim.serving.policy.jobs import store_pieces
from sim.serving.tiers.blocks import READY, Entry, OffloadTier


def scan_victims(order: list[Entry], short: list[int]) -> list[Entry]:
    """The definition: walk ``order`` (least recently used first), take every
    ready, idle entry with bytes on a device still short."""
    out = []
    for e in order:
        if all(s <= 0 for s in short):
            break
        if e.ref_cnt != READY:
            continue
        if any(s > 0 and b > 0 for s, b in zip(short, e.nbytes, strict=True)):
            out.append(e)
            short = [s - b for s, b in zip(short, e.nbytes, strict=True)]
    return out


def _random_life(tier: OffloadTier, rng: np.random.Generator) -> None:
    """Random completions, loads (pin and touch) and unpins, one draw per entry."""
    for e in list(tier.lru.order()):
        r = rng.random()
        if e.ref_cnt == -1 and r < 0.5:
            tier.complete(e)
        elif e.ref_cnt == READY and r < 0.05:
            tier.pin(e)
            tier.touch(e.key)
        elif e.ref_cnt > READY and r < 0.3:
            tier.unpin(e)


def test_victims_match_a_scan_under_random_pins_touches_and_spills() -> None:
    rng = np.random.default_rng(7)
    # two devices, 1:3 bandwidth, device 1 full first: blocks spill to device 0 alone
    tier = OffloadTier("pool", ["d0", "d1"], [0.25, 0.75], [40 * 8, 20 * 24], 32, 1)
    checked, sets = 0, set()
    for key in range(2000):
        tier.place([key], None)
        _random_life(tier, rng)
        sets |= {e.devs for e in tier.entries.values()}
        short = [int(x) for x in rng.integers(-4, 12, 2)]
        got = tier.victims(list(short))
        assert got == scan_victims(list(tier.lru.order()), short)
        checked += len(got)
    assert checked > 1000  # the comparison saw real evictions, not empty lists
    assert sets == {0b01, 0b11}  # some entries spilled


def test_one_walk_asked_again_continues_as_fresh_scans_would() -> None:
    """A pool of three devices with random spills, pins and touches: one walk
    asked for several random shortfalls in a row, the victims of each call
    dropped from the reference list before the next, gives what a scan of
    what is left gives, call by call (the walk keeps, per device set, where
    it stopped and the entries it passed)."""
    rng = np.random.default_rng(3)
    tier = OffloadTier("pool", ["a", "b", "c"], [0.2, 0.3, 0.5], [12 * 6, 9 * 10, 30 * 16], 32, 1)
    calls = 0
    for _ in range(300):
        keys = [int(k) for k in rng.choice(600, int(rng.integers(1, 20)), replace=False)]
        tier.place(keys, None)
        _random_life(tier, rng)
        walk, left = tier.lru.walk(), list(tier.lru.order())
        for _ in range(4):
            short = [int(x) for x in rng.integers(-8, 10, 3)]
            got = walk.victims(short)
            assert got == scan_victims(left, short)
            left = [e for e in left if e not in got]
            calls += bool(got)
    assert calls > 500


def test_the_order_is_insertion_then_touch_order_with_stamps_ascending() -> None:
    """Keys placed 1..5 in two sets, 2 and 4 touched (in that order), 1
    pinned and touched by a load: the order is 3, 5, 2, 4, 1, every stamp
    larger than the one before it."""
    t = OffloadTier("t", ["d0"], [1.0], [10 * 32], 32, 1)
    t.complete_all(t.place([1, 2, 3], None))
    t.complete_all(t.place([4, 5], None))
    t.touch_all([t.entries[2], t.entries[4]])
    t.pin_touch_all([t.entries[1]])
    order = list(t.lru.order())
    assert [e.key for e in order] == [3, 5, 2, 4, 1]
    assert [e.stamp for e in order] == sorted(e.stamp for e in order)
    assert t.entries[1].ref_cnt == READY + 1
    assert t.victims([3 * 32]) == [t.entries[k] for k in (3, 5, 2)]


def test_store_extents_are_each_entrys_layer_ranges_in_order() -> None:
    """The vectorised store pieces name, per (source, destination) device pair,
    exactly the layer ranges :meth:`OffloadTier.layer_extents` gives entry by
    entry, and bytes = ranges x layer bytes."""
    src = OffloadTier("cpu", ["m0"], [1.0], [1e9], 32, 4096)
    dst = OffloadTier("ssd", ["s0", "s1"], [0.25, 0.75], [1e9, 1e9], 32, 4096)
    keys = list(range(5))
    for e in src.place(keys, None):
        src.complete(e)
    placed = dst.place(keys, None)
    pieces = {(p.src, p.dst): p for p in store_pieces(src, dst, placed, "gpu0")}
    assert set(pieces) == {("m0", "s0"), ("m0", "s1")}
    for dev, name in enumerate(dst.devices):
        want = [dst.layer_extents(e, d, l0, l1) for e in placed for d, l0, l1 in e.runs if d == dev]
        got = pieces[("m0", name)]
        assert np.array_equal(got.extents, np.concatenate(want))
        assert got.nbytes == len(got.extents) * 4096.0
    # every layer of every entry is copied once: 5 entries x 32 layers
    assert sum(len(p.extents) for p in pieces.values()) == 5 * 32


def test_victims_come_in_runs_of_one_set_bounded_by_the_others_heads() -> None:
    """Two device sets: a1, a2, a4 on both devices (a byte each), b3, b5 on
    device 0 (two bytes each), stamps 1..5 in that order.  Device 0 short by
    5: a1, a2 (a run of set a, up to b3's stamp), b3, a4 (short 0: stop).
    With a2 in use: a1, b3, a4, b5.  Device 1 short by 2: set a alone, a1 and
    a2.  One walk asked twice continues where it stopped."""
    from sim.serving.tiers.lru import LruOrder

    def entries() -> dict[str, Entry]:
        es = {n: Entry(i, (), (), (1, 1) if n[0] == "a" else (2, 0), 0b11 if n[0] == "a" else 0b01)
              for i, n in enumerate(["a1", "a2", "b3", "a4", "b5"], start=1)}  # fmt: skip
        for e in es.values():
            e.ref_cnt = READY
        return es

    es = entries()
    lru = LruOrder()
    lru.add(list(es.values()))
    names = {id(e): n for n, e in es.items()}

    def named(got: list[Entry]) -> list[str]:
        return [names[id(e)] for e in got]

    assert named(lru.walk().victims([5, 0])) == ["a1", "a2", "b3", "a4"]
    assert named(lru.walk().victims([0, 2])) == ["a1", "a2"]
    walk = lru.walk()
    assert named(walk.victims([3, 0])) == ["a1", "a2", "b3"]  # 1 + 1 + 2 >= 3
    assert named(walk.victims([1, 0])) == ["a4"]
    es["a2"].ref_cnt = READY + 1
    assert named(lru.walk().victims([5, 0])) == ["a1", "b3", "a4", "b5"]

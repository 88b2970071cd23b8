"""The offload tier's heap LRU picks exactly the victims of a walk over its entries."""

from __future__ import annotations

import numpy as np

from sim.serving.policy.jobs import store_pieces
from sim.serving.tiers.blocks import READY, Entry, OffloadTier


def scan_victims(tier: OffloadTier, short: list[float]) -> list[int]:
    """The reference: walk ``entries`` in LRU order, take every ready, idle
    entry that frees bytes on a device still short."""
    out = []
    for e in tier.entries.values():
        if all(s <= 1e-6 for s in short):
            break
        if e.ref_cnt != READY:
            continue
        if any(s > 1e-6 and f > 0 for s, f in zip(short, e.nbytes, strict=True)):
            out.append(e.key)
            short = [s - f for s, f in zip(short, e.nbytes, strict=True)]
    return out


def test_heap_victims_match_a_scan_under_random_pins_touches_and_spills() -> None:
    rng = np.random.default_rng(7)
    # two devices, 1:3 bandwidth, room for ~40 blocks: spills put some entries on one device
    tier = OffloadTier("pool", ["d0", "d1"], [0.25, 0.75], [40 * 8.0, 40 * 24.0], 32, 1.0)
    live: list[Entry] = []
    checked = 0
    for key in range(2000):
        placed = tier.place([key], None)
        live = [e for e in live if tier.entries.get(e.key) is e] + placed
        for e in live:
            r = rng.random()
            if e.ref_cnt == -1 and r < 0.5:
                tier.complete(e)
            elif e.ref_cnt == READY and r < 0.05:
                tier.pin(e)
                tier.touch(e.key)
            elif e.ref_cnt > READY and r < 0.3:
                tier.unpin(e)
        short = [float(x) for x in rng.uniform(-4, 12, 2)]
        got = [e.key for e in tier._victims(list(short))]
        assert got == scan_victims(tier, short)
        checked += len(got)
    assert checked > 1000  # the comparison saw real evictions, not empty lists


def test_store_extents_are_each_entrys_layer_ranges_in_order() -> None:
    """The vectorised store pieces name, per (source, destination) device pair,
    exactly the layer ranges :meth:`OffloadTier.layer_extents` gives entry by
    entry, and bytes = ranges x layer bytes."""
    src = OffloadTier("cpu", ["m0"], [1.0], [1e9], 32, 4096.0)
    dst = OffloadTier("ssd", ["s0", "s1"], [0.25, 0.75], [1e9, 1e9], 32, 4096.0)
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


def test_group_pins_touches_and_unpins_keep_the_heap_equal_to_a_scan() -> None:
    """Loads' sources pinned and touched in one pass (``pin_touch_all``) and
    unpinned in one pass (``unpin_all``, offering the ones now idle), some
    entries pinned twice (two loads): the heap's victims are the walk's,
    and ``pin_touch_all`` leaves the counts, stamps and LRU order that
    ``pin_all`` then ``touch_all`` leave on a twin tier."""
    rng = np.random.default_rng(13)
    tiers = [OffloadTier("t", ["d0"], [1.0], [60 * 32.0], 32, 1.0) for _ in range(2)]
    tier, twin = tiers
    pinned: list[int] = []  # keys, once per pin
    checked = 0
    for key in range(1500):
        for t in tiers:
            t.place([key], None)
        for k in [k for k, e in tier.entries.items() if e.ref_cnt == -1 and rng.random() < 0.5]:
            for t in tiers:
                t.complete(t.entries[k])
        idle = [k for k, e in tier.entries.items() if e.ref_cnt >= READY]
        group = [k for k in idle if rng.random() < 0.08]
        tier.pin_touch_all([tier.entries[k] for k in group])
        twin.pin_all([twin.entries[k] for k in group])
        twin.touch_all([twin.entries[k] for k in group])
        pinned += group
        done = [pinned.pop(int(i)) for i in sorted(rng.choice(len(pinned), len(pinned) // 3,
                                                              replace=False))[::-1]]  # fmt: skip
        for t in tiers:
            t.unpin_all([t.entries[k] for k in done])
        for t in tiers:
            assert [(k, e.ref_cnt, e.stamp) for k, e in t.entries.items()] == [
                (k, e.ref_cnt, e.stamp) for k, e in tier.entries.items()
            ]
        short = [float(rng.uniform(-4, 40))]
        got = [e.key for e in tier._victims(list(short))]
        assert got == scan_victims(tier, short) == [e.key for e in twin._victims(list(short))]
        checked += len(got)
    assert checked > 1000  # the comparison saw real evictions, not empty lists

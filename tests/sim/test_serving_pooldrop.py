"""The pool tier's fast eviction path against what it replaces.

* :func:`sim.serving.tiers.poolroom.last_true`: each room check holds exactly up
  to its threshold (the check evaluated on both sides of it), worked by
  hand for one;
* :class:`sim.serving.tiers.poolroom.RoomIndex`: the remembered spill equals the
  plain spill at random used bytes, near the thresholds too;
* a victim with bytes on both devices of a pool, worked by hand: no longer
  the other device's kept head (the next key takes the next entry);
* :class:`sim.serving.tiers.poolcursor.Cursors`: the entries it gives, and the
  heaps it leaves, equal :meth:`LruRuns.top` / :meth:`LruRuns.pop`'s on a
  random tier with stale and pinned entries;
* the whole pool placement (fused eviction loop, remembered spills)
  against the scan-based per-key definition of ``test_serving_tierplace``:
  same keys placed, victims, used bytes, slots, live counts and LRU order.
"""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest

import sim.serving.tiers.pooldrop as pooldrop
import sim.serving.tiers.poolplace as poolplace
import sim.serving.tiers.tierplace as tierplace
from sim.serving.tiers.blocks import READY, OffloadTier
from sim.serving.tiers.poolcursor import Cursors
from sim.serving.tiers.poolroom import last_true, plain_spill, room_index
from tests.sim.test_serving_tierplace import LONG, SHAPES, RefTier, _drive, same_books

SLACK = tierplace.SLACK


def test_threshold_of_a_fit_check_by_hand() -> None:
    """Capacity 10.5, 3 bytes more: ``(u + 3) - 10.5 <= 1e-6`` holds up to
    u = 7.5 + 1e-6 (within rounding), so its threshold lies there, the check
    holds on it and fails on the next float."""
    pred = lambda u: u + 3.0 - 10.5 <= SLACK  # noqa: E731
    t = last_true(pred)
    assert 7.5 + 0.99e-6 <= t <= 7.5 + 1.01e-6
    assert pred(t) and not pred(math.nextafter(t, math.inf))


@pytest.mark.parametrize("seed", [1, 2])
def test_thresholds_split_every_check_exactly(seed: int) -> None:
    """Random capacities (not whole bytes), byte counts and layer sizes: each
    check holds at its threshold and at random ``u`` below it, fails just
    above it and at random ``u`` above it."""
    rng = random.Random(seed)
    for _ in range(60):
        c, x, lb = rng.uniform(1, 1e11), float(rng.randrange(0, 1 << 24)), rng.uniform(1, 1e6)
        for pred in (lambda u, c=c, x=x: u + x - c <= SLACK, lambda u, c=c, lb=lb: c - u >= lb):
            t = last_true(pred)
            assert pred(t) and not pred(math.nextafter(t, math.inf))
            for u in (rng.uniform(0, 2 * c) for _ in range(20)):
                assert pred(u) == (u <= t)


@pytest.mark.parametrize("shape", sorted(LONG) + sorted(SHAPES)[1:])
def test_remembered_spill_equals_the_plain_spill(shape: str) -> None:
    """At random used bytes (whole layers, and a layer's fraction off), the
    spill looked up by state is the spill computed there, and the fit check
    by state is the float expression."""
    ratios, caps = {**LONG, **SHAPES}[shape]
    tier = OffloadTier("t", [f"d{i}" for i in range(len(caps))], ratios, caps, 32, 1.0)
    room = room_index(tier, SLACK)
    rng = np.random.default_rng(7)
    plans = {tier.runs_over(tuple(m))[0] for m in [[True] * len(caps)]}
    found = set()
    for _ in range(3000):
        # at most the capacity (as placement keeps it), often within 40 layers of it
        low = [0.0 if rng.random() < 0.3 else max(0.0, c - 40) for c in caps]
        used = [max(0.0, float(rng.integers(lo, c + 1)) - float(rng.choice([0.0, 0.5, 1e-7])))
                for lo, c in zip(low, caps, strict=True)]  # fmt: skip
        alt = plain_spill(tier, used, SLACK)
        assert room.spill(used) == alt
        found.add(alt)
        for p in plans:
            want = all(
                u + b - c <= SLACK for u, b, c in zip(used, tier.bytes_on(p), caps, strict=True)
            )
            assert room.fits(p, used) == want
    assert None in found and len(found) > 2  # both outcomes, several layouts


def test_spill_follows_a_resized_tier() -> None:
    """A peer tier's capacity changes while it runs (elastic lending): the
    remembered spill is that of the new capacities.  By hand: two devices of
    ratio 1/2 each, 4 layers of 1 byte; device 0 holds 9 of 10 bytes, device 1
    nothing.  A block needs 2 bytes on each: it does not fit as laid out, and
    device 0 has a layer of room, so the spill over both is tried and fails on
    device 0; narrowed to device 1: all 4 layers there.  Device 0 grown to
    11 bytes: the spill over both fits."""
    tier = OffloadTier("peer", ["w0", "w1"], [0.5, 0.5], [10.0, 100.0], 4, 1.0)
    used = [9.0, 0.0]
    assert tierplace.spill_layout(tier, used) == ((1, 0, 4),)
    tier.capacity[0] = 11.0
    assert tierplace.spill_layout(tier, used) == ((0, 0, 2), (1, 2, 4))
    assert tierplace.spill_layout(tier, used) == plain_spill(tier, used, SLACK)


def _random_tier(seed: int) -> OffloadTier:
    """A tier of three devices holding ready, stale-stamped and pinned
    entries, offered in several runs, pairs of them interleaved."""
    rng = random.Random(seed)
    # device a holds 25 keys' shares: later keys spill over b and c (no bytes on a)
    tier = OffloadTier("t", ["a", "b", "c"], [0.5, 0.3, 0.2], [100.0, 1e9, 1e9], 8, 1.0)
    for _ in range(12):
        keys = [rng.randrange(10_000) for _ in range(rng.randrange(1, 40))]
        placed = tier.place(keys, None)
        tier.complete_all(placed[::2])  # two runs whose stamps interleave
        tier.complete_all(placed[1::2])
        for e in rng.sample(placed, len(placed) // 3):
            tier.touch(e.key)  # offered again at a new stamp: the old item is stale
    for e in rng.sample(list(tier.entries.values()), 30):
        r = rng.random()
        if r < 0.3:
            tier.pin(e)  # in use: not evictable, heaped reset when it comes up
        elif r < 0.7:
            del tier.entries[e.key]  # dropped: stale wherever it comes up
    assert sum(e.nbytes[0] == 0 for e in tier.entries.values()) > 50
    return tier


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cursors_give_what_top_and_pop_give(seed: int) -> None:
    """The same random device choices on two copies of one tier: heads,
    takes and drops by :class:`Cursors` on one, ``top``/``pop`` on the
    other; the same entries, then the same heaps (drained by ``top``/``pop``
    on both) after the cursors are written back."""
    rng = random.Random(seed)
    a = _random_tier(seed)
    b = copy.deepcopy(a)
    cur = Cursors(a)
    for _ in range(150):
        d = rng.randrange(3)
        e, f = cur.head(d), b.lru.top(d, b.entries, set())
        assert (e and e.key) == (f and f.key)
        if e is not None and rng.random() < 0.7:
            cur.take(d)
            b.lru.pop(d)
            if rng.random() < 0.8:  # dropped (a victim), else left as a stale-less item
                del a.entries[e.key], b.entries[f.key]
    cur.commit()
    left = 0
    for d in range(3):
        got, want = [], []
        for t, out in ((a, got), (b, want)):
            while (e := t.lru.top(d, t.entries, set())) is not None:
                out.append((e.key, e.heaped))
                t.lru.pop(d)
        assert got == want
        left += len(got)
    assert left > 50  # the written-back heaps still held many entries
    assert [e.heaped for e in a.entries.values()] == [e.heaped for e in b.entries.values()]
    assert any(e.ref_cnt > READY for e in a.entries.values())


@pytest.mark.parametrize("spills", [1, 2, 64])
@pytest.mark.parametrize("shape", sorted(LONG))
def test_fused_eviction_matches_the_reference(
    shape: str, spills: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Victims dropped on large sets: with any hand-back streak, the per-key
    reference's decisions and books."""
    monkeypatch.setattr(pooldrop, "SPILLS", spills)
    _drive(*LONG[shape], 8, False, universe=2000, most=250, steps=25)


@pytest.mark.parametrize("shape", sorted(LONG) + ["pool of three", "pool of four, one tiny"])
def test_fused_placement_keeps_the_books_of_the_per_key_definition(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large random sets placed (victims dropped) in a pool and in the
    per-key definition (:class:`RefTier`), two thirds of each set completed
    in between: the same placed keys, used bytes (bit for bit),
    slots, live counts, evictions and LRU order after every set; and the
    fused loop ran."""
    ratios, caps = {**LONG, **SHAPES}[shape]
    rng = np.random.default_rng(11)
    tier = OffloadTier("t", [f"d{i}" for i in range(len(caps))], ratios, caps, 32, 1.0)
    ref = RefTier(ratios, caps, 32, 1.0)
    ran, dropped = [0], [0]
    real = poolplace.drop_run

    def counting(*args):  # type: ignore[no-untyped-def]
        ran[0] += 1
        return real(*args)

    def ref_drop(_e) -> None:  # type: ignore[no-untyped-def]
        dropped[0] += 1

    monkeypatch.setattr(poolplace, "drop_run", counting)
    for _ in range(60):
        keys = [int(k) for k in rng.choice(3000, int(rng.integers(1, 300)), replace=False)]
        placed = tier.place(keys, None)
        assert [e.key for e in placed] == ref.place(keys, ref_drop)
        same_books(tier, ref)
        assert tier.evictions == dropped[0]
        assert [a.live for a in tier.allocators] == [a.live for a in ref.alloc]
        done = [e for e in tier.entries.values() if e.ref_cnt == -1]
        tier.complete_all(done[: len(done) * 2 // 3])
        for e in done[: len(done) * 2 // 3]:
            ref.entries[e.key].ref_cnt = READY
    assert ran[0] > 20 and tier.evictions > 1000


def test_room_index_does_not_keep_its_tier_alive() -> None:
    """The index is kept in a weak map keyed by its tier: once the tier is
    gone (a sweep builds many), so is its index."""
    import gc
    import weakref

    from sim.serving.tiers.poolroom import _INDEX

    tier = OffloadTier("p", ["a", "b"], [0.5, 0.5], [10.0, 100.0], 4, 1.0)
    tierplace.spill_layout(tier, [9.0, 0.0])
    assert tier in _INDEX
    gone = weakref.ref(tier)
    del tier
    gc.collect()
    assert gone() is None


def test_a_victim_on_both_devices_is_no_longer_either_ones_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By hand: two devices of ratio 1/2 and 4 bytes each, 4 layers of 1 byte;
    keys 1 and 2 each hold 2 bytes on both, so the tier is full (no device
    has a layer of room: nothing spills).  Keys 3 and 4 placed, victims
    dropped (the fused loop): key 3 is short on both, its victim is key 1
    (the oldest; it was the head of both devices), which frees 2 bytes on
    each, so key 3 fits in key 1's slots; key 4 is short on both again, and
    its victim must be key 2 (device 1's kept head, key 1, died with key 3's
    eviction), whose slots it takes.  Used bytes end at 4 on each device."""
    tier = OffloadTier("p", ["a", "b"], [0.5, 0.5], [4.0, 4.0], 4, 1.0)
    first = tier.place([1, 2], None)
    tier.complete_all(first)
    slots = {e.key: e.slots for e in first}
    ran = [0]
    real = poolplace.drop_run

    def counting(*args):  # type: ignore[no-untyped-def]
        ran[0] += 1
        return real(*args)

    monkeypatch.setattr(poolplace, "drop_run", counting)
    placed = tier.place([3, 4], None)
    assert ran[0] == 1
    assert [e.key for e in placed] == [3, 4] and list(tier.entries) == [3, 4]
    assert [e.slots for e in placed] == [slots[1], slots[2]]
    assert tier.used == [4.0, 4.0] and tier.evictions == 2

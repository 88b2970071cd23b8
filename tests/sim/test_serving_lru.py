"""The offload tier's LRU order and its one victim walk, against a plain scan.

:func:`scan_victims` is the victim rule written over a list in LRU order.
:meth:`OffloadTier.victims` must give exactly its victims under random pins,
touches and spills; one walk asked several times (as a placement asks it,
nothing but victims leaving in between) must give what fresh scans give
with the victims taken so far removed.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.serving.policy.jobs import store_pieces
from sim.serving.tiers.blocks import READY, Entry, OffloadTier


def scan_victims(order: list[Entry], short: int, over: list[int]) -> list[Entry]:
    """The definition: walk ``order`` (least recently used first), take every
    ready, idle entry while the tier is short (whatever its devices) or it
    has bytes on a device still over its capacity."""
    out = []
    for e in order:
        if short <= 0 and all(o <= 0 for o in over):
            break
        if e.ref_cnt != READY:
            continue
        if short > 0 or any(o > 0 and b > 0 for o, b in zip(over, e.nbytes, strict=True)):
            out.append(e)
            short -= sum(e.nbytes)
            over = [o - b for o, b in zip(over, e.nbytes, strict=True)]
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


def _shortfall(rng: np.random.Generator, n: int) -> tuple[int, list[int]]:
    """A random pool-wide shortfall and per-device excess (half the time none)."""
    short = int(rng.integers(-4, 24))
    over = [int(x) for x in rng.integers(-4, 8, n)] if rng.random() < 0.5 else [0] * n
    return short, over


def test_victims_match_a_scan_under_random_pins_touches_and_spills() -> None:
    rng = np.random.default_rng(7)
    # two devices, 1:3 bandwidth, device 1 full first: blocks spill to device 0 alone
    tier = OffloadTier("pool", ["d0", "d1"], [0.25, 0.75], [40 * 8, 20 * 24], 32, 1)
    checked, sets = 0, set()
    for key in range(2000):
        tier.place([key], None)
        _random_life(tier, rng)
        sets |= {e.devs for e in tier.entries.values()}
        short, over = _shortfall(rng, 2)
        got = tier.victims(short, list(over))
        assert got == scan_victims(list(tier.lru.order()), short, over)
        checked += len(got)
    assert checked > 1000  # the comparison saw real evictions, not empty lists
    assert sets == {0b01, 0b11}  # some entries spilled


def test_one_walk_asked_again_continues_as_fresh_scans_would() -> None:
    """A pool of three devices with random spills, pins and touches: one walk
    asked for several random shortfalls in a row, the victims of each call
    dropped from the reference list before the next, gives what a scan of
    what is left gives, call by call (the walk keeps where it stopped and
    the evictable entries it passed)."""
    rng = np.random.default_rng(3)
    tier = OffloadTier("pool", ["a", "b", "c"], [0.2, 0.3, 0.5], [12 * 6, 9 * 10, 30 * 16], 32, 1)
    calls = passed = 0
    for _ in range(300):
        keys = [int(k) for k in rng.choice(600, int(rng.integers(1, 20)), replace=False)]
        tier.place(keys, None)
        _random_life(tier, rng)
        walk, left = tier.lru.walk(), list(tier.lru.order())
        for _ in range(4):
            short, over = _shortfall(rng, 3)
            got = walk.victims(short, over)
            assert got == scan_victims(left, short, over)
            taken = {id(e) for e in got}
            # an evictable entry before the last victim, not taken: passed by
            last = max([i for i, e in enumerate(left) if id(e) in taken], default=-1)
            passed += sum(e.ref_cnt == READY and id(e) not in taken for e in left[:last])
            left = [e for e in left if id(e) not in taken]
            calls += bool(got)
    assert calls > 500
    assert passed > 100  # later calls saw entries earlier ones passed by


def test_a_run_of_alike_victims_is_what_one_victim_calls_take_one_by_one() -> None:
    """The same pool and random life; one walk asked, in random turns, for
    random shortfalls (some passing entries by) and for runs of entries laid
    out as one of a random few layouts: a run is the entries left that are
    evictable, in LRU order (what calls each asking for at most one block's
    bytes with no device over take one by one) up to the first laid out
    otherwise or ``most``, and the walk's next call continues after it."""
    rng = np.random.default_rng(11)
    tier = OffloadTier("pool", ["a", "b", "c"], [0.2, 0.3, 0.5], [12 * 6, 9 * 10, 30 * 16], 32, 1)
    runs_seen = stopped = 0
    for _ in range(300):
        keys = [int(k) for k in rng.choice(600, int(rng.integers(1, 20)), replace=False)]
        tier.place(keys, None)
        _random_life(tier, rng)
        walk, left = tier.lru.walk(), list(tier.lru.order())
        layouts = sorted({e.runs for e in left})
        for _ in range(4):
            if rng.random() < 0.5:
                short, over = _shortfall(rng, 3)
                got = walk.victims(short, over)
                assert got == scan_victims(left, short, over)
            else:
                pick = rng.random(len(layouts)) < 0.7
                alike = {r for r, ok in zip(layouts, pick, strict=True) if ok}
                most = int(rng.integers(1, 12))
                got = walk.alike(alike, most)
                want = []
                for e in (e for e in left if e.ref_cnt == READY):
                    if e.runs not in alike or len(want) == most:
                        stopped += e.runs not in alike
                        break
                    want.append(e)
                assert got == want
                runs_seen += len(got) > 1
            taken = {id(e) for e in got}
            left = [e for e in left if id(e) not in taken]
    assert runs_seen > 100 and stopped > 100


def test_the_order_is_insertion_then_touch_order() -> None:
    """Keys placed 1..5, 2 and 4 touched (in that order), 1 pinned and
    touched by a load: the order is 3, 5, 2, 4, 1, and a shortfall of three
    blocks takes 3, 5, 2."""
    t = OffloadTier("t", ["d0"], [1.0], [10 * 32], 32, 1)
    t.complete_all(t.place([1, 2, 3], None))
    t.complete_all(t.place([4, 5], None))
    t.touch_all([t.entries[2], t.entries[4]])
    t.pin_touch_all([t.entries[1]])
    assert [e.key for e in t.lru.order()] == [3, 5, 2, 4, 1]
    assert t.entries[1].ref_cnt == READY + 1
    assert t.victims(3 * 32) == [t.entries[k] for k in (3, 5, 2)]


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


def test_a_pool_short_takes_the_lru_entries_whatever_their_devices() -> None:
    """a1, a2, a4 on both devices (a byte each), b3, b5 on device 0 (two bytes
    each), in that LRU order: two bytes each.  The pool short by 5: a1, a2,
    b3 (6 bytes): stop.  With a2 in use: a1, b3, a4.  No shortfall but device 1 over
    its capacity by 2: only its entries, a1 and a2.  One walk asked for
    device 1's excess passes b3 by; asked then for the pool, it takes b3
    first (older than the entries it has not reached)."""
    from sim.serving.tiers.lru import LruOrder

    es = {n: Entry(i, (), (), (1, 1) if n[0] == "a" else (2, 0), 0b11 if n[0] == "a" else 0b01)
          for i, n in enumerate(["a1", "a2", "b3", "a4", "b5"], start=1)}  # fmt: skip
    for e in es.values():
        e.ref_cnt = READY
    lru = LruOrder()
    lru.add(list(es.values()))
    names = {id(e): n for n, e in es.items()}

    def named(got: list[Entry]) -> list[str]:
        return [names[id(e)] for e in got]

    assert named(lru.walk().victims(5)) == ["a1", "a2", "b3"]
    assert named(lru.walk().victims(0, [0, 2])) == ["a1", "a2"]
    walk = lru.walk()
    assert named(walk.victims(0, [0, 3])) == ["a1", "a2", "a4"]  # b3 passed by
    assert named(walk.victims(1)) == ["b3"]
    assert named(walk.victims(9)) == ["b5"]  # the walk ended
    es["a2"].ref_cnt = READY + 1
    lru.flag(es["a2"])  # as the tier does when a count leaves READY (OffloadTier.pin_all)
    assert named(lru.walk().victims(5)) == ["a1", "b3", "a4"]


# ---- invariants of a pool that evicts as one LRU cache (hypothesis) -----------------------
# (an offload set's keys are distinct: a request's block hashes)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["place", "complete", "load", "unload"]),
        st.lists(st.integers(0, 80), min_size=1, max_size=12, unique=True),
    ),
    min_size=20,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, dram=st.integers(2, 12), ssd=st.integers(4, 40))
def test_a_pool_evicts_its_least_recently_used_and_never_overfills(
    ops: list[tuple[str, list[int]]], dram: int, ssd: int
) -> None:
    """A pool of two host-memory modules and two SSDs (seed 004's ratios,
    0.296 / 0.296 / 0.204 / 0.204; blocks of 32 one-byte layers) under random
    placements, completions of every store in flight, loads (pin and touch)
    and their ends: after
    every step no device holds more than its capacity, the used and
    evictable bytes are the sums over the entries, the order is the one a
    plain list kept beside it gives (placed at the end, touched to the end,
    victims out), every victim was ready and idle, and every evictable
    entry a placement leaves is more recent than each victim it took."""
    ratios = [0.296, 0.296, 0.204, 0.204]
    caps = [dram * 10, dram * 10, ssd * 7, ssd * 7]
    t = OffloadTier("pool", ["dram0", "dram1", "ssd0", "ssd1"], ratios, caps, 32, 1)
    order: list[int] = []  # the model of the LRU order
    victims: list[Entry] = []

    def evict(_t: OffloadTier, es: list[Entry]) -> None:
        assert all(e.ref_cnt == READY for e in es)  # nothing in flight or in use
        victims.extend(es)

    for op, keys in ops:
        held = [t.entries[k] for k in dict.fromkeys(keys) if k in t.entries]
        if op == "place":
            start = list(order)
            before = {e.key for e in t.entries.values() if e.ref_cnt == READY}
            victims.clear()
            placed = t.place(keys, evict)
            gone = {e.key for e in victims}
            if victims:  # pool-wide LRU: what stays evictable is newer than every victim
                newest = max(start.index(k) for k in gone)
                assert all(start.index(k) > newest for k in before - gone)
            order = [k for k in order if k not in gone] + [e.key for e in placed]
        elif op == "complete":
            t.complete_all([e for e in t.entries.values() if e.ref_cnt < READY])  # stores end
        elif op == "load":
            ready = [e for e in held if e.ref_cnt >= READY]
            t.pin_touch_all(ready)
            moved = [e.key for e in ready]
            order = [k for k in order if k not in set(moved)] + moved
        else:
            t.unpin_all([e for e in held if e.ref_cnt > READY])
        assert [e.key for e in t.lru.order()] == order
        assert all(u <= c for u, c in zip(t.used, t.capacity, strict=True))
        es = list(t.entries.values())
        assert t.used == [sum(e.nbytes[d] for e in es) for d in range(4)]
        ready_bytes = [e.nbytes for e in es if e.ref_cnt == READY]
        assert t.evictable == [sum(b[d] for b in ready_bytes) for d in range(4)]


def test_the_evictable_index_is_the_filter_over_the_order() -> None:
    """Through random joins, completions, pins, unpins, touches and removals
    (each count change told to the order, as the tier does), the indexed
    evictable entries are exactly the order's entries whose count is READY, in
    LRU order; 12,000 operations on 100-200 entries give the row of places
    thousands of dead places, so it is compacted several times over."""
    from sim.serving.tiers.lru import LruOrder

    rng = np.random.default_rng(7)
    lru, live, key, compacted = LruOrder(), [], 0, 0
    for step in range(12000):
        op = int(rng.integers(6))
        places = len(lru._at)
        if len(live) < 100 or (op == 0 and len(live) < 200):  # new entries join, not ready
            made = [Entry(key + i, (), (), (1,), 0b1) for i in range(int(rng.integers(1, 4)))]
            key += len(made)
            lru.add(made)
            live += made
        elif op == 5:  # a ready entry evicted
            ready = [e for e in live if e.ref_cnt == READY]
            if ready:
                e = ready[int(rng.integers(len(ready)))]
                lru.remove(e)
                live.remove(e)
        else:
            e = live[int(rng.integers(len(live)))]
            if op == 1 and e.ref_cnt == -1:  # its store ended
                e.ref_cnt = READY
                lru.flag(e)
            elif op == 2 and e.ref_cnt >= READY:  # pinned (a load or a copy from it)
                e.ref_cnt += 1
                lru.flag(e)
            elif op == 3 and e.ref_cnt > READY:  # unpinned
                e.ref_cnt -= 1
                lru.flag(e)
            elif op == 4:
                lru.touch([e])
        compacted += len(lru._at) < places
        want = [e.key for e in lru.order() if e.ref_cnt == READY]
        assert [e.key for e in lru.evictable()] == want, step
        assert all(lru._at[e.at] is e for e in lru.order())
    assert len(lru.entries) == len(live) and compacted >= 4

"""Victims in batches decide exactly what victims one at a time decide.

:meth:`LruRuns.take` against ``k`` rounds of ``top`` then ``pop`` on copies
of one tier, and a one-device tier's placement with ``tierplace.BATCH`` on
(victims counted then taken at once, steady replace runs) against the same
tier with it off (the per-victim loops), on seeded random workloads: the
same keys placed and waiting, the same victims in the same order, the same
used bytes (bit for bit), slots, reference counts and LRU order.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import sim.serving.lru as lru
import sim.serving.tierplace as tierplace
from sim.serving.blocks import READY, Entry, OffloadTier


def _life(tiers: list[OffloadTier], rng: np.random.Generator) -> None:
    """The same random completions, loads (pin, touch, unpin) and drains in
    every tier of ``tiers`` (identical books), one draw per entry."""
    for e in list(tiers[0].entries.values()):
        x = rng.random()
        twins = [t.entries[e.key] for t in tiers]
        if e.ref_cnt == -1 and x < 0.6:
            for t, f in zip(tiers, twins, strict=True):
                t.complete_all([f])
        elif e.ref_cnt == READY and not e.draining and x < 0.1:
            for t, f in zip(tiers, twins, strict=True):
                t.pin(f)
                t.touch(f.key)
        elif e.ref_cnt > READY and not e.draining and x < 0.4:
            for t, f in zip(tiers, twins, strict=True):
                t.unpin_all([f])
        elif e.draining and x < 0.5:
            for t, f in zip(tiers, twins, strict=True):
                t.drained(f)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("devices", [1, 2])
def test_take_consumes_what_top_then_pop_consume(
    devices: int, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On two copies of one tier (random pins, touches, drops; on two
    devices some entries spill to one of them), ``take(dev, k)`` returns
    the entries ``k`` rounds of ``top``/``pop`` return, in order, and leaves
    the same heap behind: draining both heaps afterwards gives the same
    entries again, and the same entries end up marked for re-offering.
    ``fast``: ``take``'s one-device walk as one tight loop (``lru.FAST``)
    or the general one."""
    monkeypatch.setattr(lru, "FAST", fast)
    rng = np.random.default_rng(11 + devices)
    ratios, caps = ([1.0], [50 * 32.0]) if devices == 1 else ([0.25, 0.75], [30 * 8.0, 30 * 24.0])
    tier = OffloadTier("t", [f"d{i}" for i in range(devices)], ratios, caps, 32, 1.0)
    compared = 0
    for step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 30)), replace=False)]
        tier.place(keys, (lambda _t, e: bool(rng.random() < 0.3)) if step % 2 else None)
        _life([tier], rng)
        a, b = tier, copy.deepcopy(tier)
        dev, k = int(rng.integers(devices)), int(rng.integers(1, 40))
        got = [e.key for e in a.lru.take(dev, a.entries, k)]
        want = []
        for _ in range(k):
            e = b.lru.top(dev, b.entries, set())
            if e is None:
                break
            b.lru.pop(dev)
            want.append(e.key)
        assert got == want
        compared += len(got)
        rest_a = [e.key for e in a.lru.take(dev, a.entries, 10**6)]
        rest_b = [e.key for e in b.lru.take(dev, b.entries, 10**6)]
        assert rest_a == rest_b
        assert [e.heaped for e in a.entries.values()] == [e.heaped for e in b.entries.values()]
        for e in tier.entries.values():  # the original keeps its victims: offered again
            e.heaped = -1
        tier.lru.rebuild([e for e in tier.entries.values() if e.evictable])
    assert compared > 1000  # real victims were compared, not empty lists


@pytest.mark.parametrize("fast", [True, False])
def test_take_drop_is_take_then_drop(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``take(..., drop=True)`` on a one-device tier (random pins, touches,
    drains) takes the victims ``take`` takes, and leaves the tier as
    deleting them afterwards does: the same keys left in the same order,
    every victim stamped ``DEAD``, and the next batch of victims the same
    (a dropped entry is never taken again, whatever items still name it)."""
    monkeypatch.setattr(lru, "FAST", fast)
    rng = np.random.default_rng(5)
    tier = OffloadTier("t", ["d0"], [1.0], [50 * 32.0], 32, 1.0)
    dropped = 0
    for step in range(200):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 30)), replace=False)]
        tier.place(keys, (lambda _t, e: bool(rng.random() < 0.3)) if step % 2 else None)
        _life([tier], rng)
        a, b = copy.deepcopy(tier), copy.deepcopy(tier)
        k = int(rng.integers(1, 40))
        got = a.lru.take(0, a.entries, k, drop=True)
        want = b.lru.take(0, b.entries, k)
        for e in want:
            del b.entries[e.key]
        assert [e.key for e in got] == [e.key for e in want]
        assert all(e.stamp == lru.DEAD for e in got) and not set(a.entries) & {e.key for e in got}
        assert list(a.entries) == list(b.entries)
        again = [e.key for e in a.lru.take(0, a.entries, 10**6)]
        assert again == [e.key for e in b.lru.take(0, b.entries, 10**6)]
        assert not set(again) & {e.key for e in got}
        dropped += len(got)
    assert dropped > 500  # real victims were dropped, not empty lists


# (layer bytes, capacity, bytes held from the start): whole bytes and
# fractional ones (on one device ``used`` moves by +-b only, and there
# used - b + b == used held at every filling tried; the off-grid case is
# the hand test below)
SIZES = {
    "whole": (1.0, 60 * 32.0, 0.0),
    "whole, fractional capacity": (2048.0, 60 * 32 * 2048.0 + 0.37, 0.0),
    "fractional": (0.1, 60 * 3.2 + 1e-7, 0.0),
    "large, fractional": (65536.0 * 1.37, 60.3 * 32 * 65536.0 * 1.37, 0.0),
}


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("demote", [False, True])
def test_batched_victims_match_one_at_a_time(
    size: str, seed: int, demote: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-device tier with ``BATCH`` on and one with it off, driven by the
    same random sets and life: identical placements, victims, books and
    LRU order after every step; and the batch paths did run."""
    lb, cap, held = SIZES[size]
    runs = {"take": 0, "replace_run": 0}
    real_run = tierplace._replace_run

    def counted_run(*args):
        runs["replace_run"] += 1
        return real_run(*args)

    monkeypatch.setattr(tierplace, "_replace_run", counted_run)
    rng = np.random.default_rng(seed)
    fast = OffloadTier("t", ["d0"], [1.0], [cap], 32, lb)
    slow = OffloadTier("t", ["d0"], [1.0], [cap], 32, lb)
    fast.used[0] = slow.used[0] = held
    real_take = type(fast.lru).take

    def counted_take(self, dev, alive, k, drop=False, **renew):
        runs["take"] += self is fast.lru
        return real_take(self, dev, alive, k, drop, **renew)

    monkeypatch.setattr(type(fast.lru), "take", counted_take)
    evicted = {"fast": [], "slow": []}
    for step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 40)), replace=False)]
        coin = {k: bool(rng.random() < 0.5) for k in keys + list(fast.entries)}
        dropping = not demote or step % 3 == 0
        out = []
        for name, tier, batch in (("fast", fast, True), ("slow", slow, False)):

            def evict(_t: OffloadTier, e: Entry, name=name, coin=coin) -> bool:
                evicted[name].append(e.key)
                return coin.get(e.key, False)

            monkeypatch.setattr(tierplace, "BATCH", batch)
            placed, waiting = tier.place(keys, None if dropping else evict)
            out.append(([e.key for e in placed], waiting))
        assert out[0] == out[1]
        assert evicted["fast"] == evicted["slow"] and fast.evictions == slow.evictions
        assert fast.used == slow.used  # bit for bit
        assert list(fast.entries) == list(slow.entries)  # LRU order
        for k, e in fast.entries.items():
            f = slow.entries[k]
            got, want = (e.slots, e.stamp, e.ref_cnt), (f.slots, f.stamp, f.ref_cnt)
            assert got == want and e.draining == f.draining
        assert fast.allocators[0].live == slow.allocators[0].live
        free = [{u: f for u, f in t.allocators[0]._free.items() if f} for t in (fast, slow)]
        assert free[0] == free[1]  # the same free slots, in reuse order
        _life([fast, slow], rng)
    assert fast.evictions > 500
    assert runs["take"] > 50
    if size.startswith("whole"):  # used - b + b == used: steady replace runs happen
        assert runs["replace_run"] > 20


@pytest.mark.parametrize("batch", [True, False])
def test_a_key_whose_arithmetic_does_not_return_used_is_placed_key_by_key(
    batch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worked by hand: b = 32 x 1.1 = 35.2 bytes; 5 ready entries and
    ``used`` forced to u = 187.95170319401055, off b's grid, capacity
    u + 10.  Every key is short (u + b - c = 25.2), one victim is enough
    (25.2 - 35.2 < 0) and the key then fits, but u - b + b is not u in
    floats, so the replace run's premise fails: each key must redo the
    arithmetic.  With or without batches, 3 new keys evict the 3 oldest
    entries and ``used`` is exactly u - b + b, three times over."""
    monkeypatch.setattr(tierplace, "BATCH", batch)
    u = 187.95170319401055
    b = 32 * 1.1
    assert u - b + b != u  # the premise of the hand test
    tier = OffloadTier("t", ["d0"], [1.0], [u + 10.0], 32, 1.1)
    old, _ = tier.place([1, 2, 3, 4, 5], None)
    tier.complete_all(old)
    tier.used[0] = u
    assert not tierplace._steady(u, tier.bytes_on(old[0].runs)[0], u + 10.0)
    placed, waiting = tier.place([11, 12, 13], None)
    assert [e.key for e in placed] == [11, 12, 13] and waiting == []
    assert list(tier.entries) == [4, 5, 11, 12, 13]
    want = u
    for _ in range(3):
        want = want - b + b
    assert tier.used[0] == want != u


def test_a_replace_run_reusing_its_victims_decides_what_new_entries_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full one-device tier whose victims are dropped, driven four times by
    the same random sets and life: with ``tierplace.REUSE`` on (each new
    entry the victim's own object), renewed in the walk that takes it
    (``tierplace.FUSED``, with ``lru.FAST``'s tight walk or the general
    one) or after it, and with ``REUSE`` off (new objects): the same keys
    placed, victims, slots, stamps, counts, dict order and LRU order after
    every step, so an item a reused object left in the LRU never comes
    back as the new key; and objects were reused."""
    rng = np.random.default_rng(7)
    modes = {  # (REUSE, FUSED, lru.FAST)
        "new": (False, False, True),
        "reuse": (True, False, True),
        "fused": (True, True, True),
        "fused-general": (True, True, False),
    }
    tiers = {m: OffloadTier("t", ["d0"], [1.0], [60 * 32.0], 32, 1.0) for m in modes}
    reused = 0
    for _step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 40)), replace=False)]
        out = {}
        for mode, tier in tiers.items():
            before = {id(e) for e in tier.entries.values()}
            reuse, fused, fast = modes[mode]
            monkeypatch.setattr(tierplace, "REUSE", reuse)
            monkeypatch.setattr(tierplace, "FUSED", fused)
            monkeypatch.setattr(lru, "FAST", fast)
            placed, waiting = tier.place(keys, None)
            out[mode] = ([e.key for e in placed], waiting, tier.evictions, list(tier.entries))
            out[mode] += ([e.stamp for e in placed], tier._clock, tier.used[0])
            reused += reuse and sum(id(e) in before for e in placed)
        for mode in modes:
            assert out[mode] == out["new"]
        for mode in modes:
            for k, e in tiers[mode].entries.items():
                f = tiers["new"].entries[k]
                assert (e.key, e.slots, e.stamp, e.ref_cnt, e.draining, e.heaped) == (
                    f.key, f.slots, f.stamp, f.ref_cnt, f.draining, f.heaped)  # fmt: skip
        _life(list(tiers.values()), rng)
    assert tiers["fused"].evictions > 500 and reused > 300

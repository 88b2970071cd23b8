"""Victims in batches decide exactly what victims one at a time decide.

:meth:`LruRuns.take` against ``k`` rounds of ``top`` then ``pop`` on copies
of one tier, and a one-device tier's placement (victims counted then taken
at once, steady replace runs renaming their victims in the LRU walk)
against the per-key definition (:class:`tests.sim.test_serving_tierplace.RefTier`:
LRU victims found by walking the entries in order), on seeded random
workloads: the same keys placed, the same victims in the same
order, the same used bytes (bit for bit), slots, reference counts and LRU
order.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import sim.serving.tiers.lru as lru
import sim.serving.tiers.tierplace as tierplace
from sim.serving.tiers.blocks import READY, Entry, OffloadTier
from tests.sim.test_serving_tierplace import RefEntry, RefTier, same_books, same_life


def _life(tiers: list[OffloadTier], rng: np.random.Generator) -> None:
    """The same random completions and loads (pin, touch, unpin) in every
    tier of ``tiers`` (identical books), one draw per entry."""
    for e in list(tiers[0].entries.values()):
        x = rng.random()
        twins = [t.entries[e.key] for t in tiers]
        if e.ref_cnt == -1 and x < 0.6:
            for t, f in zip(tiers, twins, strict=True):
                t.complete_all([f])
        elif e.ref_cnt == READY and x < 0.1:
            for t, f in zip(tiers, twins, strict=True):
                t.pin(f)
                t.touch(f.key)
        elif e.ref_cnt > READY and x < 0.4:
            for t, f in zip(tiers, twins, strict=True):
                t.unpin_all([f])


def _handed(_t: OffloadTier, _e: Entry) -> None:
    """An eviction callback that copies nothing (placement's per-key path)."""


@pytest.mark.parametrize("devices", [1, 2])
def test_take_consumes_what_top_then_pop_consume(devices: int) -> None:
    """On two copies of one tier (random pins, touches, drops; on two
    devices some entries spill to one of them), ``take(dev, k)`` returns
    the entries ``k`` rounds of ``top``/``pop`` return, in order, and leaves
    the same heap behind: draining both heaps afterwards gives the same
    entries again, and the same entries end up marked for re-offering (one
    device: the tight walk that trusts stamps alone; two: the walk that
    tests each entry's device)."""
    rng = np.random.default_rng(11 + devices)
    ratios, caps = ([1.0], [50 * 32.0]) if devices == 1 else ([0.25, 0.75], [30 * 8.0, 30 * 24.0])
    tier = OffloadTier("t", [f"d{i}" for i in range(devices)], ratios, caps, 32, 1.0)
    compared = 0
    for step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 30)), replace=False)]
        tier.place(keys, _handed if step % 2 else None)  # victims handed over, or dropped
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


def test_take_drop_is_take_then_drop() -> None:
    """``take(..., drop=True)`` on a one-device tier (random pins, touches)
    takes the victims ``take`` takes, and leaves the tier as
    deleting them afterwards does: the same keys left in the same order,
    every victim stamped ``DEAD``, and the next batch of victims the same
    (a dropped entry is never taken again, whatever items still name it)."""
    rng = np.random.default_rng(5)
    tier = OffloadTier("t", ["d0"], [1.0], [50 * 32.0], 32, 1.0)
    dropped = 0
    for step in range(200):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 30)), replace=False)]
        tier.place(keys, _handed if step % 2 else None)  # victims handed over, or dropped
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


# (layer bytes, capacity): whole bytes and fractional ones (on one device
# ``used`` moves by +-b only, and there used - b + b == used held at every
# filling tried; the off-grid case is the hand test below)
SIZES = {
    "whole": (1.0, 60 * 32.0),
    "whole, fractional capacity": (2048.0, 60 * 32 * 2048.0 + 0.37),
    "fractional": (0.1, 60 * 3.2 + 1e-7),
    "large, fractional": (65536.0 * 1.37, 60.3 * 32 * 65536.0 * 1.37),
}


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("callback", [False, True])
def test_batched_victims_match_the_per_key_definition(
    size: str, seed: int, callback: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-device tier and the per-key definition, driven by the same
    random sets and life: identical placements, victims, books (used bytes
    bit for bit, slots, counts) and LRU order after every step; and the
    batch paths (``take`` of several victims, steady replace runs) did run."""
    lb, cap = SIZES[size]
    runs = {"take": 0, "replace_run": 0}
    real_run, real_take = tierplace._replace_run, lru.LruRuns.take

    def counted_run(*args):
        runs["replace_run"] += 1
        return real_run(*args)

    def counted_take(self, dev, alive, k, drop=False, **renew):
        runs["take"] += k > 1
        return real_take(self, dev, alive, k, drop, **renew)

    monkeypatch.setattr(tierplace, "_replace_run", counted_run)
    monkeypatch.setattr(lru.LruRuns, "take", counted_take)
    rng = np.random.default_rng(seed)
    tier, ref = OffloadTier("t", ["d0"], [1.0], [cap], 32, lb), RefTier([1.0], [cap], 32, lb)
    evicted: dict[str, list[int]] = {"tier": [], "ref": []}
    for step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 40)), replace=False)]
        dropping = not callback or step % 3 == 0

        def evict(_t: OffloadTier, e: Entry) -> None:
            evicted["tier"].append(e.key)

        def ref_evict(e: RefEntry) -> None:
            evicted["ref"].append(e.key)

        seen = len(evicted["tier"]), len(evicted["ref"])
        placed = tier.place(keys, None if dropping else evict)
        assert [e.key for e in placed] == ref.place(keys, ref_evict)
        if not dropping:  # this set's victims, in order (none reported when dropped)
            assert evicted["tier"][seen[0] :] == evicted["ref"][seen[1] :]
        assert tier.evictions == len(evicted["ref"])
        same_books(tier, ref)
        assert tier.allocators[0].live == len(ref.entries)
        same_life(tier, ref, rng)
    assert tier.evictions > 500
    assert runs["take"] > 50
    if size.startswith("whole"):  # used - b + b == used: steady replace runs happen
        assert runs["replace_run"] > 20


def test_a_key_whose_arithmetic_does_not_return_used_is_placed_key_by_key() -> None:
    """Worked by hand: b = 32 x 1.1 = 35.2 bytes; 5 ready entries and
    ``used`` forced to u = 187.95170319401055, off b's grid, capacity
    u + 10.  Every key is short (u + b - c = 25.2), one victim is enough
    (25.2 - 35.2 < 0) and the key then fits, but u - b + b is not u in
    floats, so the replace run's premise fails: each key must redo the
    arithmetic.  3 new keys evict the 3 oldest entries and ``used`` is
    exactly u - b + b, three times over."""
    u = 187.95170319401055
    b = 32 * 1.1
    assert u - b + b != u  # the premise of the hand test
    tier = OffloadTier("t", ["d0"], [1.0], [u + 10.0], 32, 1.1)
    old = tier.place([1, 2, 3, 4, 5], None)
    tier.complete_all(old)
    tier.used[0] = u
    assert not tierplace._steady(u, tier.bytes_on(old[0].runs)[0], u + 10.0)
    placed = tier.place([11, 12, 13], None)
    assert [e.key for e in placed] == [11, 12, 13]
    assert list(tier.entries) == [4, 5, 11, 12, 13]
    want = u
    for _ in range(3):
        want = want - b + b
    assert tier.used[0] == want != u


def test_a_replace_run_reusing_its_victims_decides_what_new_entries_decide() -> None:
    """A full one-device tier whose victims are dropped, and the per-key
    definition (new objects), driven by the same random sets and life: the
    same keys placed, victims, slots, counts, dict order and LRU order after
    every step, so an item a reused object left in the LRU never comes back
    as the new key; each set's new entries carry consecutive stamps after
    the tier's clock; and objects were reused (renamed in the LRU walk)."""
    rng = np.random.default_rng(7)
    tier, ref = (
        OffloadTier("t", ["d0"], [1.0], [60 * 32.0], 32, 1.0),
        RefTier([1.0], [60 * 32.0], 32, 1.0),
    )
    reused = 0
    for _step in range(300):
        keys = [int(k) for k in rng.choice(400, int(rng.integers(1, 40)), replace=False)]
        before, clock = {id(e) for e in tier.entries.values()}, tier._clock
        placed = tier.place(keys, None)
        assert [e.key for e in placed] == ref.place(keys, lambda _e: None)
        assert [e.stamp for e in placed] == list(range(clock + 1, clock + 1 + len(placed)))
        assert tier._clock == clock + len(placed)
        assert all(
            e.heaped == -1 and e.ref_cnt == -1 for e in placed
        )  # new: not ready, not offered
        same_books(tier, ref)
        reused += sum(id(e) in before for e in placed)
        same_life(tier, ref, rng)
    assert tier.evictions > 500 and reused > 300

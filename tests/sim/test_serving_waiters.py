"""Waiting stores' index: which waiters a key added to the first tier touches.

A waiter holds a store's groups ``base``, of which ``base[lo:]`` still wait
(:mod:`sim.serving.policy.waiters`); a drain moves ``lo`` on instead of copying the
groups.  Invariants worked out by hand: a key added to the tier touches
exactly the waiters holding it at a position at or past their ``lo``; the
tier's log of added keys is empty after every scan (it never grows with
the run), and a key added after a scan is still seen by the next one.
"""

from __future__ import annotations

from sim.serving.policy.jobs import StoreRequest
from sim.serving.policy.waiters import WaitIndex
from sim.serving.tiers.blocks import OffloadTier


def _add(tier: OffloadTier, *keys: int) -> None:
    placed, waiting = tier.place(list(keys), None)
    assert len(placed) == len(keys) and not waiting


def test_added_key_touches_only_waiters_still_waiting_for_it() -> None:
    tier = OffloadTier("cpu", ["m0"], [1.0], [100 * 4096.0], 4, 1024.0)
    index = WaitIndex(tier)
    w = index.register(StoreRequest(1, [(k, (k,)) for k in (1, 2, 3, 4)]))
    v = index.register(StoreRequest(2, [(4, (40,)), (5, (50,))]))
    assert tier.added == [] and w.distinct and v.distinct
    index.advance(w, 2)  # keys 1 and 2 placed: 3 and 4 wait
    assert (w.lo, w.rid, w.base[w.lo][0]) == (2, 1, 3)

    _add(tier, 9, 1)  # nobody waits for 9; 1 is before w's lo
    index.scan()
    assert not w.touched and not v.touched and not index.marked
    assert tier.added == []  # read and emptied

    _add(tier, 4)  # both hold 4 at or past their lo
    index.scan()
    assert w.touched and v.touched and index.marked == {w, v}
    assert tier.added == []

    index.advance(w, 4)  # w placed the rest: nothing of it waits
    assert not w.touched and index.marked == {v}
    _add(tier, 3)  # 3 is behind w's lo now
    index.scan()
    assert not w.touched and tier.added == []


def test_a_repeated_key_makes_a_waiter_not_distinct_and_remove_forgets_it() -> None:
    tier = OffloadTier("cpu", ["m0"], [1.0], [100 * 4096.0], 4, 1024.0)
    index = WaitIndex(tier)
    w = index.register(StoreRequest(1, [(7, (1,)), (8, (2,)), (7, (3,))]))
    assert not w.distinct and index.owner[7] == [(w, 0), (w, 2)]
    index.remove(w)
    assert index.owner == {} and w.lo == 3
    index.clear()
    assert tier.added is None

"""A fresh waiting store placed in chunks decides what placing it whole does.

:func:`sim.serving.policy.chunkplace.place_chunks` places a waiting store's keys
2, 4, 8, ... at a time and stops once the tier is blocked (every later key
would wait with nothing evicted).  Invariants: on a hand-built tier it
places, evicts and leaves waiting exactly what one whole
:meth:`OffloadTier.place` does (worked out by hand below) while going over
fewer keys; and an eviction-heavy paged-cpu-ssd run gives the same request
and op records with chunks as with every store placed whole (every tier
answering :meth:`~chunkplace.FirstTier.chunkable` no).
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.serving.designs import DesignParams
from sim.serving.policy import chunkplace
from sim.serving.policy.jobs import StoreRequest
from sim.serving.policy.manager import BlockManager
from sim.serving.tiers.blocks import Entry, GpuCache, OffloadTier
from sim.serving.tiers.tierplace import fitting_prefix, room_blocked
from tests.sim.test_serving_stores import _run, _same

B = 4 * 1024.0  # one block: 4 layers of 1 KiB


def _tier(free_blocks: int) -> tuple[OffloadTier, list[Entry]]:
    """A one-device tier holding X, Y (being demoted: draining) and A, B
    (ready, evictable, A least recently used), with room for ``free_blocks``
    more; the demotions it decides are appended to the returned list."""
    tier = OffloadTier("cpu", ["m0"], [1.0], [(4 + free_blocks) * B], 4, 1024.0)
    placed, _ = tier.place([901, 902, 1, 2], None)  # X, Y, A, B in LRU order
    tier.complete_all(placed)
    tier.evict_all(tier.lru.take(0, tier.entries, 2), lambda _t, _e: True)
    assert tier.draining == 2 and tier.used[0] == 4 * B
    return tier, []


def _evict(victims: list[Entry]):
    def evict(_tier: OffloadTier, e: Entry) -> bool:
        victims.append(e)
        return True  # demoted: kept (draining) until its copy below is done

    return evict


def _counting(tier: OffloadTier, seen: list[int]) -> None:
    real = tier.place

    def place(keys, evict):
        seen.extend(keys)
        return real(keys, evict)

    tier.place = place  # type: ignore[method-assign]


def test_chunks_stop_at_the_blocked_tier_as_the_whole_store_would() -> None:
    """Room for one block, 10 keys: key 10 fits; key 11 evicts A (demoted:
    its bytes stay) and waits; the tier still has B, so the next chunk
    (12..15) goes on: 12 evicts B and waits, 13 finds no victim (dry) and
    waits, as every later key would.  Whole: the same, over all 10 keys."""
    groups = [(10 + i, (100 + i,)) for i in range(10)]
    assert chunkplace.chunkable(_tier(1)[0], True)

    tier, victims = _tier(1)
    seen: list[int] = []
    _counting(tier, seen)
    first = chunkplace.FirstTier(tier, True)
    placed, waiting, hi = chunkplace.place_chunks(first, groups, 0, _evict(victims))
    assert [e.key for e in placed] == [10]
    assert [e.key for e in victims] == [1, 2]  # A then B, LRU first
    assert seen == [10, 11, 12, 13, 14, 15]  # 2 + 4 keys gone over, not 10
    assert hi == 6 and waiting == [11, 12, 13, 14, 15]  # the rest: groups[1:], a suffix
    assert tier.used[0] == 5 * B and tier.draining == 4

    whole, victims_whole = _tier(1)
    placed_w, waiting_w = whole.place([k for k, _b in groups], _evict(victims_whole))
    assert [(e.key, e.slots, e.stamp) for e in placed] == [
        (e.key, e.slots, e.stamp) for e in placed_w
    ]
    assert [e.key for e in victims_whole] == [e.key for e in victims]
    assert waiting_w == waiting + [k for k, _b in groups[hi:]]
    assert whole.used == tier.used and whole.draining == tier.draining


def test_no_room_and_no_victim_waits_whole_after_one_chunk() -> None:
    """No free block: keys 10 and 11 evict A and B and wait; blocked after
    the first chunk, so the rest waits without a look: all 10 keys, as given."""
    groups = [(10 + i, (100 + i,)) for i in range(10)]
    tier, victims = _tier(0)
    seen: list[int] = []
    _counting(tier, seen)
    first = chunkplace.FirstTier(tier, True)
    placed, waiting, hi = chunkplace.place_chunks(first, groups, 0, _evict(victims))
    assert placed == [] and [e.key for e in victims] == [1, 2] and seen == [10, 11]
    assert waiting == [10, 11] and hi == 2  # with groups[2:]: every group waits


def test_not_chunkable_without_demotions_draining() -> None:
    tier = OffloadTier("cpu", ["m0"], [1.0], [4 * B], 4, 1024.0)
    assert not chunkplace.chunkable(tier, True)  # nothing drains: a key may be let go
    pool = OffloadTier("cpu", ["m0", "m1"], [0.5, 0.5], [4 * B] * 2, 4, 1024.0)
    pool.draining = 1
    assert not chunkplace.chunkable(pool, True)  # a pool: not one device
    tier.draining = 1
    assert chunkplace.chunkable(tier, True) and not chunkplace.chunkable(tier, False)


@pytest.mark.parametrize(
    "n, block, tiers",
    [(60, 16, {"cpu_gib": 0.1, "ssd_gib": 0.5}), (40, 16, {"cpu_gib": 0.2, "ssd_gib": 1.0})],
)
def test_chunks_change_no_record(monkeypatch, n, block, tiers) -> None:
    """Eviction-heavy runs: the same records with every waiting store placed
    whole; the chunks were taken and stopped short of a store's end."""
    real = chunkplace.place_chunks
    calls, short = [0], [0]

    def counted(first, groups, lo, evict):
        out = real(first, groups, lo, evict)
        calls[0] += 1
        short[0] += out[2] < len(groups)  # keys left without a look
        return out

    monkeypatch.setattr(chunkplace, "place_chunks", counted)
    fast = _run(n, block, tiers)
    assert calls[0] > 50 and short[0] > 50
    monkeypatch.setattr(chunkplace.FirstTier, "chunkable", lambda _self: False)
    slow = _run(n, block, tiers)
    _same(fast, slow)


def _random_tier(rng: np.random.Generator, devices: int) -> OffloadTier:
    """A tier of ``devices`` devices holding a random mix of not-ready, ready,
    pinned and draining entries, with 0-2 blocks of room left."""
    cap = int(rng.integers(3, 12))
    free = int(rng.integers(0, 3))
    tier = OffloadTier("cpu", [f"m{d}" for d in range(devices)], [1.0 / devices] * devices,
                       [(cap + free) * B / devices] * devices, 4, 1024.0)  # fmt: skip
    placed, _ = tier.place(list(range(cap)), None)
    done = [e for e in placed if rng.random() < 0.7]
    tier.complete_all(done)
    tier.pin_all([e for e in done if rng.random() < 0.2])
    victims = tier.lru.take(0, tier.entries, int(rng.integers(0, len(done) + 1)))
    tier.evict_all(victims, lambda _t, _e: True)  # demoted: draining
    return tier


def test_first_tier_answers_what_tierplace_does() -> None:
    """:class:`chunkplace.FirstTier`'s questions, from its kept constants,
    against :func:`room_blocked` and :func:`fitting_prefix` working them out
    from the tier's layout, on random tiers (one device and two, victims
    demoted or not); both answers of each question are seen."""
    rng = np.random.default_rng(7)
    seen_blocked, seen_m = set(), set()
    for _ in range(300):
        devices, demotes = int(rng.integers(1, 3)), bool(rng.random() < 0.8)
        tier = _random_tier(rng, devices)
        first = chunkplace.FirstTier(tier, demotes)
        blocked = first.blocked()
        assert blocked == room_blocked(tier, demotes)
        seen_blocked.add(blocked)
        for n in range(1, 6):
            m = first.fitting(n)
            assert m == fitting_prefix(tier, demotes, n)
            seen_m.add(0 < m < n)
    assert seen_blocked == {True, False} and seen_m == {True, False}


def _manager() -> BlockManager:
    """A manager over a CPU tier like :func:`_tier` (room for 1 block; X, Y
    being demoted, A, B evictable) demoting to a large SSD tier."""
    cpu, _ = _tier(1)
    ssd = OffloadTier("ssd", ["s0"], [1.0], [1000 * B], 4, 1024.0)
    design = DesignParams(cpu_gib=1.0, ssd_gib=1.0)
    return BlockManager(GpuCache(64, prefix_cache=False), [cpu, ssd], design, 16, "gpu0")


def test_place_from_says_where_the_waiting_suffix_starts() -> None:
    """Groups 0..2 were placed before; of ``groups[3:]`` (keys 13..19) key 13
    fits, 14 and 15 demote A and B and wait, 16 finds no victim (chunks of
    2 and 4 keys: 13..18 gone over): the rest waits from key 14,
    ``groups[4:]``, told as ``rest_at`` = 4 and not copied; ``place_store``
    of ``groups[3:]`` on an identical manager hands out that very suffix,
    with the same demotions and store."""
    groups = [(10 + i, (100 + i,)) for i in range(10)]
    mgr = _manager()
    out = mgr.place_from(7, groups, 3, fresh=True)
    assert out.rest_at == 4 and out.waiting is None and out.blocked
    twin = _manager().place_store(StoreRequest(7, groups[3:]), fresh=True)
    assert twin.rest_at == -1 and twin.waiting is not None and twin.waiting.groups == groups[4:]
    for got in (out, twin):
        assert [(t.tag, [e.key for e in t.olds]) for t in got.demotions] == [
            ("demote", [1]),
            ("demote", [2]),
        ]
        assert got.store is not None and [e.key for e in got.store.entries] == [13]
        assert set(got.store.sources) == {13, 14, 15, 16, 17, 18}  # chunks of 2 and 4 keys


def test_rest_is_the_suffix_that_waits_or_the_groups_picked() -> None:
    """Keys 10..15, those before ``hi`` gone over: nothing waits; 12 and 13
    wait with 14, 15 after them (the suffix from 2); 11 and 13 wait with 12
    placed between them (not a suffix: picked, then 14, 15)."""
    groups = [(10 + i, (100 + i,)) for i in range(6)]
    sources = dict(groups[:4])
    assert chunkplace.rest(3, groups, 6, [], sources) == (-1, None)
    assert chunkplace.rest(3, groups, 4, [12, 13], sources) == (2, None)
    at, req = chunkplace.rest(3, groups, 4, [11, 13], sources)
    assert at == -1 and req is not None and req.rid == 3
    assert req.groups == [groups[1], groups[3], groups[4], groups[5]]

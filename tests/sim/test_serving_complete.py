"""A store's completion, and the probes it proves unneeded.

:meth:`OffloadTier.complete_all` makes a store's entries ready and says
whether all of them were not ready (so all still held: the write-through
then needs no probe).  :func:`sim.serving.policy.storegroups.store_groups`
finds the usual case (no key held anywhere, every block on the GPU) by
short-circuiting scans; it must return what the numpy masks return.  A
completed store written through copies from its own entries, pinned once
each, and only the keys not below yet.
"""

from __future__ import annotations

import numpy as np

from sim.serving.tiers.blocks import NOT_READY, READY, OffloadTier


def _tier(blocks: int) -> OffloadTier:
    return OffloadTier("t", ["d0"], [1.0], [blocks * 32], 32, 1)


def test_a_fresh_store_is_made_ready_and_said_fresh() -> None:
    """Three fresh entries: complete_all says True, each is ready, and the
    LRU gives them back oldest first."""
    t = _tier(8)
    placed = t.place([5, 6, 7], None)
    assert [e.ref_cnt for e in placed] == [NOT_READY] * 3
    assert t.complete_all(placed) is True
    assert [e.ref_cnt for e in placed] == [READY] * 3
    assert t.victims(3 * 32) == placed


def test_a_store_with_a_ready_entry_is_not_fresh() -> None:
    """[fresh, fresh, ready, fresh]: complete_all makes all four ready and
    says False; the LRU holds each once, in placement order."""
    t = _tier(8)
    placed = t.place([1, 2, 3, 4], None)
    t.complete_all([placed[2]])  # one ready already
    assert t.complete_all(placed) is False
    assert [e.ref_cnt for e in placed] == [READY] * 4
    assert t.victims(10 * 32) == placed
    assert t.complete_all([]) is True  # nothing to say otherwise


class _Gpu:
    """The GPU side _store_groups touches: the references it takes."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.key = np.zeros(64, dtype=np.int64)

    def acquire_all(self, blocks: np.ndarray) -> None:
        self.held += np.asarray(blocks).tolist()


class _Req:
    def __init__(self, hashes: list[int]) -> None:
        self.hashes = tuple(hashes)


class _Seq:
    def __init__(self, hashes: list[int], blocks: list[int]) -> None:
        self.req = _Req(hashes)
        self.blocks = blocks
        self.keys = None  # the manager's cache of its offload-block keys


def _groups_by_definition(tiers, hashes, blocks, k, g0, g1):
    """Group by group: the last key of each group held in no tier and all
    of its blocks on the GPU (>= 0)."""
    out = []
    for g in range(g0, g1):
        key = hashes[g * k + k - 1]
        mine = tuple(blocks[g * k : g * k + k])
        if not any(key in t.entries for t in tiers) and min(mine) >= 0:
            out.append((key, mine))
    return out


def test_store_groups_fast_and_masked_paths_match_the_definition() -> None:
    """On seeded random requests (some keys held in one of two tiers, some
    blocks -1), the groups _store_groups returns and the blocks it gives to
    hold are those picked group by group, for k = 1 and k = 4, whichever of its two
    paths (nothing held and all on the GPU, or masks) it takes."""
    from sim.serving.policy.manager import BlockManager

    rng = np.random.default_rng(7)
    paths = set()
    for trial in range(60):
        k = 1 if trial % 2 else 4
        tiers = [_tier(64), _tier(64)]
        n = int(rng.integers(1, 12))
        hashes = [int(h) for h in rng.choice(10_000, size=n * k, replace=False) + 1]
        blocks = [int(b) for b in rng.permutation(64)[: n * k]]
        if trial % 3 == 0:
            for i in rng.choice(n * k, size=int(rng.integers(1, 3)), replace=True):
                blocks[i] = -1
        if trial % 4 == 0:
            key = hashes[int(rng.integers(0, n)) * k + k - 1]
            placed = tiers[int(rng.integers(0, 2))].place([key], None)
            assert placed
        g0 = int(rng.integers(0, n))
        want = _groups_by_definition(tiers, hashes, blocks, k, g0, n)
        mgr = BlockManager.__new__(BlockManager)
        mgr.k, mgr.tiers, mgr.gpu = k, tiers, _Gpu()
        mgr._one = np.empty(0, dtype=object)
        got, mine = mgr._store_groups(_Seq(hashes, blocks), g0, n)
        assert [(key, tuple(b)) for key, b in got] == want
        assert mine.tolist() == [b for _, bs in want for b in bs]
        paths.add(len(want) == n - g0)
    assert paths == {True, False}  # both paths were taken


def _write_through_manager():
    """A GPU, a CPU tier of 16 blocks and an SSD tier of 64, written through."""
    from sim.serving.designs import DesignParams
    from sim.serving.policy.manager import BlockManager
    from sim.serving.tiers.blocks import GpuCache

    gpu = GpuCache(64, prefix_cache=False)
    cpu = OffloadTier("cpu", ["dram0"], [1.0], [16 * 4 * 8192.0], 4, 8192)
    ssd = OffloadTier("ssd", ["ssd0"], [1.0], [64 * 4 * 8192.0], 4, 8192)
    design = DesignParams(cpu_gib=1.0, ssd_gib=1.0, cpu_to_ssd="write_through")
    return BlockManager(gpu, [cpu, ssd], design, 16, "gpu0")


def _store(mgr, rid: int, hashes: list[int]):
    """Admit a request of ``hashes``, compute it, place its store: the store."""
    from sim.serving.policy.manager import Seq
    from sim.serving.requests import Request

    s = Seq(Request(rid, 0.0, -1, 0, len(hashes) * 16 + 1, 1, tuple(hashes)), len(hashes) + 1)
    assert mgr.acquire(s, mgr.lookup(s), s.total_blocks)
    s.prefilled = s.prefill_left
    store = mgr.place_store(mgr.computed(s)).store
    assert store is not None
    return s, store


def test_a_completed_store_is_written_through_from_its_own_entries() -> None:
    """Five fresh blocks stored in the CPU tier: completing the store starts
    one write-through whose sources are those very five CPU entries, each
    pinned once (not evictable while copied), into five new SSD entries of
    the same keys; completing the copy makes the SSD entries ready and the
    CPU entries unpinned (count 0), nothing following."""
    mgr = _write_through_manager()
    cpu, ssd = mgr.tiers
    _s, store = _store(mgr, 0, [11, 12, 13, 14, 15])
    (wt,) = mgr.on_stored(store)
    assert [e.key for e in wt.entries] == [11, 12, 13, 14, 15]
    assert [id(e) for e in wt.olds] == [id(cpu.entries[k]) for k in (11, 12, 13, 14, 15)]
    assert [e.ref_cnt for e in wt.olds] == [1] * 5
    assert (wt.src, wt.dst) == (cpu, ssd)
    assert mgr.on_stored(wt) == []
    assert [e.ref_cnt for e in wt.olds] == [READY] * 5
    assert [ssd.entries[k].ref_cnt for k in (11, 12, 13, 14, 15)] == [READY] * 5


def test_keys_already_below_are_not_written_through_again() -> None:
    """Keys 21 and 23 reach the SSD tier while a store of 20..24 into the
    CPU tier is in flight: its write-through copies 20, 22 and 24 only,
    from their own CPU entries, and pins no other."""
    mgr = _write_through_manager()
    cpu, ssd = mgr.tiers
    _s, store = _store(mgr, 0, [20, 21, 22, 23, 24])
    ssd.complete_all(ssd.place([21, 23], None))
    (wt,) = mgr.on_stored(store)
    assert [e.key for e in wt.entries] == [20, 22, 24]
    assert [id(e) for e in wt.olds] == [id(cpu.entries[k]) for k in (20, 22, 24)]
    assert [cpu.entries[k].ref_cnt for k in (20, 21, 22, 23, 24)] == [1, 0, 1, 0, 1]

"""The GPU cache by slots and runs against the per-block reference it replaced.

:class:`RefCache` is the former ``GpuCache``: one object per block, an
``OrderedDict`` LRU, one eviction at a time.  Seeded random workloads
(requests sharing prefixes, repeated keys, loads that end or are given up,
stores holding blocks, a small cache so that it evicts) run on both; after
every step the cached keys with their counts and ready flags, the LRU order
(so the same victims in the same order), the private and eviction counts
and every answer must agree.
"""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.serving.policy.prefix import gpu_prefix
from sim.serving.tiers import gpucache
from sim.serving.tiers.gpucache import GpuCache


class RefBlock:
    __slots__ = ("key", "ref_cnt", "ready")

    def __init__(self, key: int, ready: bool):
        self.key, self.ref_cnt, self.ready = key, 1, ready


class RefCache:
    """The per-block GPU cache (the code before slots and runs)."""

    def __init__(self, capacity: int, prefix_cache: bool):
        self.capacity, self.prefix_cache = capacity, prefix_cache
        self.cached: dict[int, RefBlock] = {}
        self.evictable: OrderedDict[int, RefBlock] = OrderedDict()
        self.private = self.evictions = 0

    def lookup(self, key: int) -> RefBlock | None:
        b = self.cached.get(key) if self.prefix_cache else None
        return b if b is not None and b.ready else None

    def acquire(self, block: RefBlock) -> None:
        if block.ref_cnt == 0:
            del self.evictable[block.key]
        block.ref_cnt += 1

    def allocate(self, n: int) -> bool:
        free = self.capacity - len(self.cached) - self.private
        if free + len(self.evictable) < n:
            return False
        for _ in range(n - free):
            key, _b = self.evictable.popitem(last=False)
            del self.cached[key]
            self.evictions += 1
        self.private += n
        return True

    def promote_all(self, keys: list[int], ready: bool) -> list[RefBlock | None]:
        out: list[RefBlock | None] = []
        for key in keys:
            if key in self.cached:
                out.append(None)
            else:
                out.append(RefBlock(key, ready))
                self.cached[key] = out[-1]  # type: ignore[assignment]
                self.private -= 1
        return out

    def release(self, blocks: list[RefBlock], private: int) -> None:
        self.private -= private
        for b in reversed(blocks):
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                if self.prefix_cache and b.ready:
                    self.evictable[b.key] = b
                else:
                    del self.cached[b.key]


def cached(gpu: GpuCache) -> dict[int, int]:
    """The GPU cache's cached keys and their slots (read off its table
    indexed by key), by key."""
    keys = gpu.cached_keys()
    return dict(zip(keys, gpu.slots_of(keys).tolist(), strict=True))


def same_state(ref: RefCache, gpu: GpuCache, order: bool = True) -> None:
    """The same books; ``order``: the LRU order too (reading it turns queued
    tails into runs, so it is not read after every step)."""
    assert {k: (b.ref_cnt, b.ready) for k, b in ref.cached.items()} == {
        k: (int(gpu.ref[s]), bool(gpu.ready[s])) for k, s in cached(gpu).items()
    }
    assert gpu.n_cached == len(ref.cached) and gpu.used == len(ref.cached) + ref.private
    if order:
        assert list(gpu.evictable) == list(ref.evictable)  # LRU order: the same victims next
    assert len(gpu.evictable) == len(ref.evictable)
    assert (gpu.private, gpu.evictions) == (ref.private, ref.evictions)
    assert all((k in gpu.evictable) == (k in ref.evictable) for k in ref.cached)


def run_workload(seed: int, prefix_cache: bool, steps: int = 400, size: int = 1) -> int:
    """Random requests on both caches, compared after each step; the evictions.
    ``size`` scales the cache and the requests (past the short-run paths)."""
    rng = random.Random(seed)
    cap = rng.randint(8, 40) * size
    ref, gpu = RefCache(cap, prefix_cache), GpuCache(cap, prefix_cache)
    held: list[tuple[list, list[int], int]] = []  # (ref blocks, slots, private)
    for _ in range(steps):
        op = rng.random()
        if op < 0.45 or not held:  # a request: its GPU prefix hit, then new blocks
            base = rng.randint(0, 5) * 8 * size
            keys = [base + i for i in range(rng.randint(1, 12) * size)]
            for _ in range(size):
                if rng.random() < 0.15:
                    keys.insert(rng.randrange(len(keys)), rng.choice(keys))  # a repeated key
            hit_r = []
            for key in keys:
                b = ref.lookup(key)
                if b is None:
                    break
                hit_r.append(b)
            hit = [gpu.lookup(k) for k in keys[: len(hit_r)]]
            assert hit == [cached(gpu)[b.key] for b in hit_r]
            for b in hit_r:
                ref.acquire(b)
            n = len(keys) - len(hit) + rng.randint(0, 3)
            ok = ref.allocate(n)
            if rng.random() < 0.5:  # take the hit, then room (as one step, or two)
                assert gpu.hold(hit, n) == ok
                assert not ok or gpu.allocate(n)
            else:
                gpu.acquire_all(hit)
                assert gpu.allocate(n) == ok
                if not ok:
                    gpu.release(hit, 0)
            if not ok:
                ref.release(hit_r, 0)
            else:
                ready = rng.random() < 0.7
                rest = keys[len(hit) :]
                made_r = ref.promote_all(rest, ready)
                made, count = gpu.promote_all(rest, ready)
                assert count == sum(b is not None for b in made_r)
                assert [s >= 0 for s in made] == [b is not None for b in made_r]
                held.append((hit_r + made_r, hit + made, n - count))
        elif op < 0.6:  # a load ends
            blocks_r, slots, _p = rng.choice(held)
            for b in blocks_r:
                if b is not None:
                    b.ready = True
            gpu.set_ready(slots)
        elif op < 0.75:  # a store holds some of a request's blocks until it ends
            blocks_r, slots, _p = rng.choice(held)
            pick = [i for i in range(len(slots)) if slots[i] >= 0 and rng.random() < 0.5]
            for i in pick:
                ref.acquire(blocks_r[i])
            gpu.acquire_all([slots[i] for i in pick])
            held.append(([blocks_r[i] for i in pick], [slots[i] for i in pick], 0))
        else:  # a request (or store) lets go
            blocks_r, slots, private = held.pop(rng.randrange(len(held)))
            ref.release([b for b in blocks_r if b is not None], private)
            gpu.release(slots, private)
        same_state(ref, gpu, order=rng.random() < 0.1)
    same_state(ref, gpu)
    return ref.evictions


@pytest.mark.parametrize("seed", range(12))
def test_slots_and_runs_match_the_per_block_cache(seed: int) -> None:
    evictions = run_workload(seed, prefix_cache=True)
    assert evictions > 0  # the workload did evict: the LRU order was exercised


@pytest.mark.parametrize("seed", range(4))
def test_long_requests_too(seed: int) -> None:
    """Requests of up to 192 blocks: repeats and runs past the short paths."""
    assert run_workload(100 + seed, prefix_cache=True, steps=150, size=16) > 0


@pytest.mark.parametrize("seed", range(3))
def test_without_prefix_caching_too(seed: int) -> None:
    run_workload(seed, prefix_cache=False)


def test_the_arrays_grow_and_stale_lru_entries_are_dropped() -> None:
    """Many releases and re-acquires of the same blocks keep the LRU queue
    within a bound (stale entries compacted), and a cache larger than the
    initial arrays grows them with every slot still unique."""
    gpu = GpuCache(200_000)
    assert gpu.allocate(100_000)
    slots, made = gpu.promote_all(list(range(100_000)), ready=True)
    assert made == 100_000 and len(set(slots)) == 100_000 and gpu.private == 0
    gpu.release(slots, 0)
    for _ in range(50):  # one block taken and let go again and again
        gpu.acquire_all(slots[:10])
        gpu.release(slots[:10], 0)
    assert gpu._queued <= 2 * len(gpu.evictable) + 1024
    assert list(gpu.evictable)[:3] == [99_999, 99_998, 99_997]  # released tail first
    assert gpu.allocate(200_000 - 50)  # evicts the 99,950 least recently used
    assert gpu.evictions == 99_950 and sorted(cached(gpu)) == list(range(50))  # 99,999 -> 50 went
    assert np.all(gpu.ref[list(cached(gpu).values())] == 0)


def test_a_repeat_or_a_cached_key_undoes_the_one_probe_path() -> None:
    """``promote_all`` tries every key as new in one probe each; a repeat or
    a key cached already undoes that try: the blocks and free slots are
    then those of promoting only the new keys on a twin cache."""
    for keys, new in (([1, 2, 1, 3], [1, 2, 3]), ([7, 2, 8], [2, 8])):
        gpu, twin = GpuCache(16), GpuCache(16)
        for g in (gpu, twin):
            assert g.allocate(1)
            g.promote_all([7], ready=True)  # key 7 cached already
            assert g.allocate(len(keys))
        got, made = gpu.promote_all(keys, ready=True)
        want, made_t = twin.promote_all(new, ready=True)
        assert made == made_t == len(new)
        assert [s for s in got if s >= 0] == want and got.count(-1) == len(keys) - len(new)
        assert cached(gpu) == cached(twin) and np.array_equal(gpu.key, twin.key)
        assert gpu._top == twin._top and np.array_equal(gpu._free, twin._free)
        assert gpu.allocate(2) and twin.allocate(2)  # the next slots taken are the same too
        assert gpu.promote_all([40, 41], True) == twin.promote_all([40, 41], True)


def test_keys_are_paged_and_past_the_table_are_not_cached() -> None:
    """The key -> slot table starts with 64 pages of 256 keys and a sentinel,
    no page made: a lookup of key 50,000 (page 195, past the table) reads
    the sentinel, not cached and not ready, and makes nothing; promoting
    keys 50,000 and 7 (pages 195 and 0) grows the table past page 195 (the
    sentinel last) and makes two pages of the pool in page order (page 0:
    pool page 1, entries from 256; page 195: pool page 2, entries from 512,
    so key 50,000 = 195 x 256 + 80 sits at 592); key 8 (page 0 too) then
    makes none; lookups find them, every other key stays uncached."""
    gpu = GpuCache(4)
    assert len(gpu._shift) == 65 and gpu._pages == 1 and 50_000 not in gpu
    assert gpu.slots_of([3, 50_000]).tolist() == [-1, -1]
    assert gpu.ready[gpu.slots_of([50_000])].tolist() == [False]
    assert len(gpu._shift) == 65 and gpu._pages == 1
    assert gpu.allocate(3)
    slots, made = gpu.promote_all([50_000, 7], ready=True)
    assert made == 2 and len(gpu._shift) > 196 and gpu._shift[-1] == gpu._shift[1]  # not made
    assert (0 + gpu._shift[0], 50_000 + gpu._shift[195]) == (256, 592) and gpu._pages == 3
    assert gpu._pool[[256 + 7, 592]].tolist() == [slots[1], slots[0]]
    (s8,), _ = gpu.promote_all([8], ready=True)
    assert gpu._pages == 3
    assert gpu.lookup(50_000) == slots[0] and gpu.lookup(7) == slots[1] and gpu.lookup(8) == s8
    assert gpu.cached_keys() == [7, 8, 50_000] and 49_999 not in gpu and 9 not in gpu


def test_a_page_left_without_keys_is_let_go_by_a_sweep_and_reused() -> None:
    """Keys 0 and 300 (key pages 0 and 1) take pool pages 1 and 2; key 300
    dropped (released before its load ended: not kept) leaves key page 1
    empty; a sweep unmakes it (300 reads uncached) and keeps pool page 2
    spare, the next sweep due at 64 pages (twice the one left, at least 64);
    key 600 (key page 2) then takes pool page 2 again, its entry at
    512 + 600 % 256 = 600, and no new page is made."""
    gpu = GpuCache(4)
    assert gpu.allocate(2)
    (a,), _ = gpu.promote_all([0], ready=True)
    (b,), _ = gpu.promote_all([300], ready=False)
    assert gpu._pages == 3 and (300 + gpu._shift[1]) == 512 + 300 % 256
    gpu.release([b], 0)  # not ready: dropped, not kept
    assert 300 not in gpu and gpu._spare == []  # the page stays until a sweep
    gpu._sweep()
    assert gpu._spare == [2] and gpu._shift[1] == gpu._shift[-1] and gpu._limit == 64
    assert gpu.slots_of([300]).tolist() == [-1]
    assert gpu.allocate(1)
    (c,), _ = gpu.promote_all([600], ready=True)
    assert gpu._pages == 3 and gpu._spare == [] and 600 + gpu._shift[2] == 600
    assert gpu.cached_keys() == [0, 600] and gpu.lookup(600) == c and gpu.lookup(0) == a


_GPU_OPS = st.lists(
    st.tuples(
        st.sampled_from(["request", "release", "load"]),
        st.integers(0, 40),  # where the request's keys start (id / 64: several grow the array)
        st.integers(1, 10),  # its blocks
        st.integers(0, 3),  # private blocks beyond its keys
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(ops=_GPU_OPS, cap=st.integers(4, 24))
def test_the_id_indexed_cache_keeps_its_lru_policy(ops, cap: int) -> None:
    """:func:`_lru_policy_case`, its key table swept for empty pages at every page made."""
    sweep_min = gpucache._SWEEP_MIN
    gpucache._SWEEP_MIN = 1  # a sweep whenever a page is made: pages let go and reused often
    try:
        _lru_policy_case(ops, cap)
    finally:
        gpucache._SWEEP_MIN = sweep_min


def _lru_policy_case(ops, cap: int) -> None:
    """Random requests over ids up to 2,600 (pages made as they come):
    ``used`` never exceeds the capacity; an allocation evicts exactly the
    least recently used unreferenced keys, in the order the evictable view
    listed them, and never a referenced block; the table reads a slot for
    exactly the cached keys, each slot holding its key (pages let go as
    their last key leaves and reused stay clean); a hit is the leading ready
    cached keys of the request."""
    gpu = GpuCache(cap)
    held: list[tuple[list[int], int]] = []  # (slots, private) of live requests
    for op, start, n, extra in ops:
        if op == "release" and held:
            slots, private = held.pop(start % len(held))
            gpu.release(slots, private)
        elif op == "load" and held:
            gpu.set_ready(held[start % len(held)][0])
        else:
            keys = [64 * start + i for i in range(n)]
            want = []
            for k in keys:  # the leading ready cached keys, one lookup each
                b = gpu.lookup(k)
                if b is None:
                    break
                want.append(b)
            hit = gpu_prefix(gpu, keys, len(keys))
            assert hit == want
            need = len(keys) - len(hit) + extra
            if not gpu.hold(hit, need):  # the hit only touched
                continue
            lru = list(gpu.evictable)  # the hit held: no longer evictable
            before = set(gpu.cached_keys())
            referenced = {int(gpu.key[s]) for s in np.flatnonzero(gpu.ref[: len(gpu.key)] > 0)}
            free = gpu.free
            assert gpu.allocate(need)
            gone = [k for k in lru if k not in set(gpu.cached_keys())]
            assert gone == lru[: max(need - free, 0)]  # the least recently used, in order
            assert not (set(gone) & referenced) and set(gone) <= before
            made, count = gpu.promote_all(keys[len(hit) :], ready=bool(start % 2))
            held.append((hit + made, need - count))
        assert gpu.used <= gpu.capacity and gpu.n_cached == len(gpu.cached_keys())
        table = gpu.slots_of(np.arange(2_700))  # every key's entry, pages let go and reused
        keys = gpu.cached_keys()
        assert np.flatnonzero(table >= 0).tolist() == keys and gpu.key[table[keys]].tolist() == keys

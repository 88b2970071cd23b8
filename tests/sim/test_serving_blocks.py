"""Block books of the serving model: LRU order, ref-count states, placement (Algorithm 1)."""

from __future__ import annotations

import pytest

from sim.serving.tiers.blocks import NOT_READY, READY, GpuCache, OffloadTier
from sim.serving.tiers.placement import assign, layer_runs, placement_ratios, target_counts


# ---- GPU cache ------------------------------------------------------------------------
def fill(gpu: GpuCache, keys: list[int]) -> list:
    """One request computing blocks ``keys``: allocate, then hash them."""
    assert gpu.allocate(len(keys))
    return [gpu.promote(k, ready=True) for k in keys]


def test_gpu_cache_evicts_least_recently_used_and_a_prefix_last() -> None:
    gpu = GpuCache(4)
    blocks = fill(gpu, [10, 11, 12, 13])  # one request's prefix 10 -> 13
    gpu.release(blocks, 0)  # tail first: 13 is the least recently used
    assert list(gpu.evictable) == [13, 12, 11, 10]
    assert gpu.allocate(2)  # a new request needs two blocks: evicts 13, then 12
    assert gpu.cached_keys() == [10, 11] and gpu.evictions == 2
    assert gpu.used == 4 and gpu.free == 0


def test_gpu_cache_reuse_moves_a_block_out_of_the_lru() -> None:
    gpu = GpuCache(3)
    a, b, c = fill(gpu, [1, 2, 3])
    gpu.release([a, b, c], 0)
    hit = gpu.lookup(3)
    assert hit == c  # a block is its slot
    gpu.acquire(hit)  # a second request uses block 3
    assert 3 not in gpu.evictable and gpu.ref[c] == 1
    assert gpu.allocate(2)  # 2 and 1 go; 3 is in use
    assert gpu.cached_keys() == [3]
    assert not gpu.allocate(1)  # nothing left to evict: refused, nothing changed
    assert gpu.cached_keys() == [3] and gpu.private == 2


def test_gpu_blocks_being_loaded_are_neither_hits_nor_evictable() -> None:
    gpu = GpuCache(2)
    assert gpu.allocate(2)
    loading = gpu.promote(7, ready=False)
    assert gpu.lookup(7) is None  # not ready: another request cannot share it yet
    gpu.release([loading], 1)  # its request gives up before the load ends
    assert 7 not in gpu and gpu.used == 0  # dropped, never left evictable
    off = GpuCache(2, prefix_cache=False)
    assert off.allocate(1)
    off.promote(5, ready=True)
    assert off.lookup(5) is None  # no prefix caching: nothing is ever a hit


# ---- offload tier -----------------------------------------------------------------------
def tier(blocks: int, devices: int = 1) -> OffloadTier:
    """A tier of ``devices`` devices holding ``blocks`` 4-layer blocks of 1 byte a layer."""
    ratios = [1.0 / devices] * devices
    caps = [4 * blocks // devices] * devices
    return OffloadTier("cpu", [f"dram{i}" for i in range(devices)], ratios, caps, 4, 1)


def lru_keys(t: OffloadTier) -> list[int]:
    return [e.key for e in t.lru.order()]


def place_ready(t: OffloadTier, keys: list[int]) -> list:
    placed = t.place(keys, None)
    for e in placed:
        t.complete(e)
    return placed


def test_offload_tier_is_lru_over_ready_entries() -> None:
    t = tier(3)
    place_ready(t, [1, 2, 3])
    t.touch(1)  # 1 was loaded: most recently used
    place_ready(t, [4])
    assert lru_keys(t) == [3, 1, 4]  # 2 went first
    assert t.evictions == 1 and t.used == [12]


def test_entries_in_flight_are_never_evicted() -> None:
    t = tier(2)
    loading, storing = t.place([1, 2], None)
    t.complete(loading)
    t.pin(loading)  # being loaded from: in use
    assert (loading.ref_cnt, storing.ref_cnt) == (READY + 1, NOT_READY)
    assert t.place([3], None) == []  # no room can be made: 3 is not offloaded
    assert set(t.entries) == {1, 2} and t.evictions == 0
    assert t.lookup(2) is None  # not ready: not a hit
    with pytest.raises(RuntimeError, match="not ready"):
        t.pin(storing)
    t.unpin(loading)
    assert [e.key for e in t.place([3], None)] == [3]  # now 1 (ready, idle) goes
    assert set(t.entries) == {2, 3}


def test_a_victim_is_handed_over_in_its_tier_then_dropped() -> None:
    """A full tier of one 4-byte block: placing 2 evicts 1, which the
    callback sees still in the tier (a demotion copies it from there); 1 is
    then gone, its 4 bytes taken by 2."""
    t = tier(1)
    place_ready(t, [1])
    seen: list[tuple[int, bool]] = []
    placed = t.place([2], lambda tr, es: seen.extend((e.key, tr.lookup(e.key) is e) for e in es))
    assert [e.key for e in placed] == [2] and seen == [(1, True)]
    assert list(t.entries) == [2] and t.lookup(1) is None
    assert t.used == [4] and t.evictions == 1


def test_a_full_pool_device_spills_to_the_others() -> None:
    t = OffloadTier("pool", ["a", "b"], [0.5, 0.5], [2, 10], 4, 1)
    first = place_ready(t, [1])[0]
    assert first.runs == ((0, 0, 2), (1, 2, 4))  # half the layers on each device
    second = place_ready(t, [2])[0]
    assert second.runs == ((1, 0, 4),)  # a is full: all of block 2 goes to b
    assert t.used == [2, 6] and t.evictions == 0


def test_byte_counts_are_whole() -> None:
    """Capacities given in GiB split over devices arrive as floats and are
    floored to whole bytes (18.63 GiB over two modules: 10001905090.56 ->
    10001905090); a layer of a fractional number of bytes is refused."""
    gib = 1 << 30
    t = OffloadTier("cpu", ["m0", "m1"], [0.5, 0.5], [18.63 * gib / 2] * 2, 32, 65536)
    assert t.capacity == [10001905090, 10001905090]
    assert all(type(c) is int for c in t.capacity) and t.layer_bytes == 65536
    with pytest.raises(ValueError, match="whole number"):
        OffloadTier("cpu", ["m0"], [1.0], [1e9], 32, 65536.5)


# ---- Algorithm 1 (seed 004) ----------------------------------------------------------------
def test_placement_ratios_are_bandwidth_shares() -> None:
    # seed 004's server: two 10.65 GB/s DDR4 modules and two 14.7 GB/s SSDs
    p = placement_ratios([10.65, 10.65, 14.7, 14.7])
    assert p == pytest.approx([10.65 / 50.7, 10.65 / 50.7, 14.7 / 50.7, 14.7 / 50.7])
    assert sum(p) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        placement_ratios([1.0, 0.0])


def test_algorithm1_floors_then_gives_the_remainder_to_the_largest_ratios() -> None:
    p = placement_ratios([10.65, 10.65, 14.7, 14.7])  # 0.210, 0.210, 0.290, 0.290
    # 10 items: floor(2.10) = floor(2.90) = 2 each -> 8; the 2 left go to the SSDs
    assert target_counts(p, 10) == [2, 2, 3, 3]
    assert assign(p, 10) == [0, 0, 1, 1, 2, 2, 2, 3, 3, 3]  # lines 13-16: in order
    # 7 items at 0.5/0.3/0.2: floors 3, 2, 1 -> one left, to the largest ratio
    assert target_counts([0.5, 0.3, 0.2], 7) == [4, 2, 1]
    # ties broken by device index; every count sums to the set size
    assert target_counts([0.25] * 4, 3) == [1, 1, 1, 0]
    for n in range(50):
        assert sum(target_counts(p, n)) == n


def test_layerwise_enumeration_gives_each_device_a_range_of_layers() -> None:
    # 2 blocks x 4 layers = 8 items, layer-major: (l0,b0) (l0,b1) (l1,b0) ...
    # two equal devices get 4 items each: layers 0-1 of both blocks on a, 2-3 on b
    assert layer_runs([0.5, 0.5], 2, 4) == [((0, 0, 2), (1, 2, 4))] * 2
    # one block, 3 layers over 0.5/0.3/0.2: counts [2, 1, 0] (the remainder to device 0)
    assert layer_runs([0.5, 0.3, 0.2], 1, 3) == [((0, 0, 2), (1, 2, 3))]
    assert layer_runs([1.0], 3, 32) == [((0, 0, 32),)] * 3

"""The serving block manager decides without a clock: driven by hand, no engine, no simpy."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from sim.serving.designs import DesignParams
from sim.serving.policy.manager import BlockManager, Seq
from sim.serving.requests import Request
from sim.serving.tiers.blocks import GpuCache, OffloadTier

B = 16
LAYERS = 4
LAYER_BYTES = 8192  # one GPU block (= one offload block here) of one layer


def manager(cpu_blocks: int = 16) -> BlockManager:
    gpu = GpuCache(64, prefix_cache=False)  # every hit has to come from the CPU tier
    cap = float(cpu_blocks * LAYERS * LAYER_BYTES)
    cpu = OffloadTier("cpu", ["dram0"], [1.0], [cap], LAYERS, LAYER_BYTES)
    return BlockManager(gpu, [cpu], DesignParams(cpu_gib=1.0), B, "gpu0")


def seq(rid: int, hashes: list[int]) -> Seq:
    req = Request(rid, 0.0, -1, 0, len(hashes) * B, 1, tuple(hashes))
    return Seq(req, len(hashes) + 1)


def prefill(mgr: BlockManager, s: Seq) -> None:
    """Admit ``s``, compute its whole prompt, store what it computed, release it."""
    hit = mgr.lookup(s)
    assert mgr.acquire(s, hit, s.total_blocks - len(hit.gpu))
    s.prefilled = s.prefill_left
    req = mgr.computed(s)
    assert req is not None
    placement = mgr.place_store(req)
    assert placement.demotions == []
    store = placement.store
    assert store is not None and (store.tag, store.by) == ("store", "dst")
    assert mgr.on_stored(store) == []  # one tier: nothing follows
    mgr.release(s)


def test_a_three_block_prefix_hit_is_one_load_of_those_three_entries() -> None:
    mgr = manager()
    cpu = mgr.tiers[0]
    prefill(mgr, seq(0, [1, 2, 3, 4, 5, 6, 7, 8]))
    assert [cpu.entries[k].slots for k in (1, 2, 3)] == [(0,), (4 * 8192,), (8 * 8192,)]
    s = seq(1, [1, 2, 3, 40, 50])
    hit = mgr.lookup(s)
    assert (len(hit.gpu), hit.blocks) == (0, 3)
    assert mgr.acquire(s, hit, s.total_blocks)
    assert s.req.hits == {"gpu": 0, "cpu": 3}
    assert all(cpu.entries[k].ref_cnt == 1 for k in (1, 2, 3))  # pinned while loading
    load = mgr.load(s, layerwise=False)
    assert (load.tag, load.by, load.rid) == ("load", "src", 1)
    assert {(p.src, p.dst) for p in load.pieces} == {("dram0", "gpu0")}
    assert load.nbytes == 3 * LAYERS * LAYER_BYTES  # exactly the 3 entries, all layers
    ranges = sorted(tuple(r) for p in load.pieces for r in p.extents.tolist())
    slots = (0, 4 * 8192, 8 * 8192)  # 4 layers of 8 KiB per slot, in order of store
    assert ranges == [(slot + layer * 8192, 8192) for slot in slots for layer in range(4)]
    assert not any(mgr.gpu.ready[s.blocks[:3]])  # not until the executor says so
    mgr.on_loaded(s)
    assert all(mgr.gpu.ready[s.blocks[:3]]) and s.load is None
    assert all(cpu.entries[k].ref_cnt == 0 for k in (1, 2, 3))


def test_layerwise_loads_are_one_piece_per_layer_of_every_entry() -> None:
    mgr = manager()
    prefill(mgr, seq(0, [1, 2, 3, 4]))
    s = seq(1, [1, 2, 3, 9])
    assert mgr.acquire(s, mgr.lookup(s), s.total_blocks)
    load = mgr.load(s, layerwise=True)
    assert [p.layer for p in load.pieces] == [0, 1, 2, 3]
    for p in load.pieces:  # layer l of entries 1, 2, 3, in hit order
        assert p.nbytes == 3 * LAYER_BYTES
        assert p.extents[:, 0].tolist() == [p.layer * 8192 + slot for slot in (0, 32768, 65536)]


def test_a_full_tier_evicts_its_lru_entry_and_reuses_its_slot() -> None:
    mgr = manager(cpu_blocks=2)
    cpu = mgr.tiers[0]
    prefill(mgr, seq(0, [1, 2]))
    prefill(mgr, seq(1, [3]))  # 1 (least recently used) goes
    assert set(cpu.entries) == {2, 3} and cpu.evictions == 1
    assert cpu.entries[3].slots == (0,)  # the slot 1 had


class CountingDict(OrderedDict):
    """A tier's entries that count the probes made through ``get``."""

    probes = 0

    def get(self, key, default=None):  # type: ignore[override]
        CountingDict.probes += 1
        return super().get(key, default)


def test_a_refused_admission_probes_no_tier_and_takes_nothing() -> None:
    mgr = manager()
    cpu = mgr.tiers[0]
    prefill(mgr, seq(0, [1, 2, 3, 4, 5, 6, 7, 8]))
    s = seq(1, [1, 2, 3, 40, 50])
    at_once = mgr.lookup(s).lower  # read straight away: 1, 2, 3 in the CPU tier
    assert [(e.key, j, n) for _t, e, j, n in at_once] == [(1, 0, 1), (2, 1, 1), (3, 2, 1)]
    assert mgr.gpu.allocate(60)  # another request holds 60 of the 64 GPU blocks
    cpu.entries = CountingDict(cpu.entries)
    assert not mgr.acquire(s, mgr.lookup(s), s.total_blocks)  # 6 blocks: no room
    assert CountingDict.probes == 0  # the lower hits were never looked for
    assert all(cpu.entries[k].ref_cnt == 0 for k in (1, 2, 3)) and mgr.gpu.private == 60
    mgr.gpu.release([], 60)  # that request ends
    hit = mgr.lookup(s)
    assert mgr.acquire(s, hit, s.total_blocks)
    assert CountingDict.probes > 0 and hit.lower == at_once and hit.blocks == 3
    assert all(cpu.entries[k].ref_cnt == 1 for k in (1, 2, 3))  # pinned for the load


def test_one_block_groups_share_one_tuple_per_gpu_slot() -> None:
    """With one GPU block to an offload block, a store's group of slot s is
    ``(s,)``, the same tuple object every time slot s is a group's block,
    past the GPU's first arrays too (the table grows)."""
    mgr = manager()
    got = mgr._ones(np.array([3, 0, 3], dtype=np.int64))
    assert got == [(3,), (0,), (3,)] and got[0] is got[2]
    far = len(mgr.gpu.key) + 5
    again = mgr._ones(np.array([far, 3], dtype=np.int64))
    assert again == [(far,), (3,)] and again[1] is got[0]
    s = seq(1, [11, 12, 13])
    hit = mgr.lookup(s)
    assert mgr.acquire(s, hit, s.total_blocks - len(hit.gpu))
    s.prefilled = s.prefill_left
    req = mgr.computed(s)
    assert req is not None
    assert req.groups == [(h, (b,)) for h, b in zip([11, 12, 13], s.blocks, strict=True)]

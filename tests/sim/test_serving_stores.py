"""vLLM's step-synchronous offload stores (stores ``step``: the paged designs).

Hand-worked cases of the rules :mod:`sim.serving.execute.stores` takes from
vLLM's offloading connector: a store is prepared all or nothing
(``LRUOffloadingManager.prepare_store`` returns None when it cannot evict
enough) and tried again at the request's next step; a store that ends
mid-step is seen at the next step boundary; a finished request's GPU blocks
are freed only once its stores are seen ending (``delay_free_blocks``).  And
invariants on seeded random interleavings: the tier never holds more than its
capacity, a prepared store places every one of its blocks, nothing in flight
is evicted (the tier raises if it were), bytes are conserved.
"""

from __future__ import annotations

import numpy as np

from sim.serving.designs import get_design
from sim.serving.policy.manager import BlockManager, Seq
from sim.serving.requests import Request
from sim.serving.tiers.blocks import NOT_READY, READY, GpuCache, OffloadTier
from tests.sim.test_serving_engine import LLAMA, requests, row, run

B = 16
BLOCK = B * LLAMA.kv_bytes_per_token  # one 16-token block of Llama-3.1-8B: 2 MiB
GIB = 2.0**30


def _manager(cpu_blocks: int, gpu_blocks: int = 64) -> BlockManager:
    """A GPU of ``gpu_blocks`` and a CPU tier of ``cpu_blocks`` one-block
    offload blocks (4 layers of 8 KiB), stores ``step``."""
    gpu = GpuCache(gpu_blocks, prefix_cache=True)
    cpu = OffloadTier("cpu", ["dram0"], [1.0], [cpu_blocks * 4 * 8192.0], 4, 8192)
    design = get_design("paged-cpu", {"cpu_gib": 1.0, "block_factor": 1})
    return BlockManager(gpu, [cpu], design, B, "gpu0")


def _computed(mgr: BlockManager, rid: int, hashes: list[int]) -> Seq:
    """Admit a request of ``hashes`` (one more token than its blocks) and
    compute its whole prompt."""
    s = Seq(Request(rid, 0.0, -1, 0, len(hashes) * B + 1, 1, tuple(hashes)), len(hashes) + 1)
    assert mgr.acquire(s, mgr.lookup(s), s.total_blocks)
    s.prefilled = s.prefill_left
    return s


def test_a_store_that_cannot_be_prepared_is_tried_again_and_holds_nothing() -> None:
    """A CPU tier of 2 blocks.  Step k: A's 2 blocks are prepared (the tier
    full of entries in flight, not ready) and touched in reverse (vLLM's
    ``touch``: the first block, key 11, ends most recent); B's 1 block finds
    no victim: None, nothing evicted or held (B's blocks referenced by B
    alone, its index at 0).  A's store ends; step k+1: B's block is prepared,
    evicting the least recently used block, key 12; B's index moves to 1."""
    mgr = _manager(2)
    cpu = mgr.tiers[0]
    a, b = _computed(mgr, 0, [11, 12]), _computed(mgr, 1, [21])
    (store_a,) = mgr.prepare_store(a)
    assert [e.key for e in store_a.entries] == [11, 12] and a.stored_groups == 2
    assert [cpu.entries[k].ref_cnt for k in (11, 12)] == [NOT_READY, NOT_READY]
    assert mgr.prepare_store(b) is None
    assert b.stored_groups == 0 and mgr.gpu.ref[b.blocks[0]] == 1  # held by B alone
    assert [e.key for e in cpu.lru.order()] == [12, 11] and cpu.evictions == 0  # LRU first
    assert mgr.on_stored(store_a) == []
    assert [cpu.entries[k].ref_cnt for k in (11, 12)] == [READY, READY]
    (store_b,) = mgr.prepare_store(b)
    assert [e.key for e in store_b.entries] == [21] and b.stored_groups == 1
    assert [e.key for e in cpu.lru.order()] == [11, 21] and cpu.evictions == 1
    assert mgr.gpu.ref[b.blocks[0]] == 2  # and by the store until it ends


def test_a_store_is_all_or_nothing() -> None:
    """A CPU tier of 3 blocks holding A's 2 (ready) and C's 1 (in flight):
    B's 3 blocks need 3 victims, only A's 2 can go: None, and A's entries are
    still there (nothing evicted for a store that is not prepared)."""
    mgr = _manager(3)
    cpu = mgr.tiers[0]
    a = _computed(mgr, 0, [11, 12])
    (store_a,) = mgr.prepare_store(a)
    mgr.on_stored(store_a)
    c = _computed(mgr, 2, [31])
    (store_c,) = mgr.prepare_store(c)
    b = _computed(mgr, 1, [21, 22, 23])
    assert mgr.prepare_store(b) is None
    assert [e.key for e in cpu.lru.order()] == [12, 11, 31] and cpu.evictions == 0
    mgr.on_stored(store_c)
    (store_b,) = mgr.prepare_store(b)  # now all three can go
    assert [e.key for e in store_b.entries] == [21, 22, 23] and cpu.evictions == 3


def test_prepared_stores_keep_the_tier_within_capacity_and_never_evict_in_flight() -> None:
    """Seeded random interleavings of requests (some sharing keys) prepared
    and completed in random order on a tier of 6 blocks: a prepared store
    places all its new groups (those whole on the GPU), the tier never goes over capacity, the bytes
    held are the ready plus in-flight entries' bytes, and no in-flight entry
    is ever evicted (the tier raises if one is)."""
    rng = np.random.default_rng(3)
    for _trial in range(40):
        mgr = _manager(6, gpu_blocks=400)
        cpu = mgr.tiers[0]
        flying = []
        for rid in range(12):
            n = int(rng.integers(1, 5))
            hashes = [int(h) for h in rng.choice(30, size=n, replace=False) + 1]
            s = _computed(mgr, rid, hashes)
            before = set(cpu.entries)
            got = mgr.prepare_store(s)
            if got is None:
                assert set(cpu.entries) == before and s.stored_groups == 0
            else:
                # a key cached on the GPU in another slot is not promoted (-1): not stored
                new = [
                    h for h, g in zip(hashes, s.blocks, strict=True) if h not in before and g >= 0
                ]
                assert [e.key for t in got for e in t.entries] == new
                flying += got
            assert cpu.used[0] <= cpu.capacity[0]
            assert cpu.used[0] == sum(e.nbytes[0] for e in cpu.entries.values())
            while flying and rng.random() < 0.5:
                mgr.on_stored(flying.pop(int(rng.integers(0, len(flying)))))
            mgr.release(s)


def test_a_finished_requests_blocks_are_freed_when_its_store_is_seen_ending() -> None:
    """A GPU of 5 blocks.  A (64-token prompt, 1 output token) takes all 5,
    its first iteration finishes it and prepares the store of its 4 full
    blocks.  B (8 tokens, 1 block) waits for a free block: A's 5th block is
    not stored, yet it is freed only with the rest, when A's store is seen
    ending (the engine is idle then: at the store's end), so B is admitted at
    the end of A's store, after A finished."""
    params = {"cpu_gib": 1.0, "block_factor": 1}
    rec = run([row(0, 0.0, 64, [], 1), row(1, 0.0, 8, [], 1)], "paged-cpu", params, gpu_blocks=5)
    r, ops = requests(rec), rec.ops.to_pandas()
    store = ops.query("tag == 'store'")
    assert store["bytes"].sum() == 4 * BLOCK
    assert r.loc[0, "finish_s"] < store["end_s"].max()
    assert r.loc[1, "admit_s"] == store["end_s"].max()


def test_a_store_not_prepared_at_step_k_is_at_the_step_after_the_completion_is_seen() -> None:
    """A CPU tier of exactly 4 blocks; A and B (64-token prompts: 4 blocks
    each, 4 output tokens) are computed in iteration 0.  A's store is
    prepared at its end and starts there; B's finds the tier full of A's
    entries in flight: not prepared.  A's store ends during iteration 1,
    seen at the boundary after it; B's retry at the end of iteration 1
    comes before that boundary (vLLM prepares a step's store at its schedule,
    before the forward pass), fails again; at the end of iteration 2 it is
    prepared, evicting A's 4 blocks, and starts there."""
    params = {"cpu_gib": 4 * BLOCK / GIB, "block_factor": 1}
    rows = [row(0, 0.0, 64, [], 4), row(1, 0.0, 64, [], 4)]
    rec = run(rows, "paged-cpu", params)
    ops = rec.ops.to_pandas()
    ends = sorted(ops.query("kind == 'compute'")["end_s"])
    a, b = ops.query("tag == 'store'").sort_values("start_s").itertuples()  # one copy each
    assert a.start_s == ends[0] and ends[0] < a.end_s < ends[1]
    assert b.start_s == ends[2]
    assert a.bytes == b.bytes == 4 * BLOCK
    assert rec.stats["cpu_evictions"] == 4


def test_a_load_ending_mid_step_is_seen_at_the_next_boundary() -> None:
    """A warm CPU tier holds C's 8 blocks; A (long prompt, 8 output tokens)
    runs alone.  C (its 8 blocks and one token more) arrives while A decodes:
    its load starts at admission (a step boundary) and ends mid-step; C joins
    the batch at the first boundary after the load's end: its first compute
    starts at the end of the iteration during which its load ended."""
    params = {"cpu_gib": 1.0, "block_factor": 1}
    hashes = list(range(100, 108))
    warm = [row(9, 0.0, 8 * B + 1, hashes)]
    rows = [row(0, 0.0, 2048, [], 8), row(1, 0.02, 8 * B + 1, hashes, 1)]
    rec = run(rows, "paged-cpu", params, prefix_cache=False, warm=warm)
    r, ops = requests(rec), rec.ops.to_pandas()
    load = ops.query("tag == 'load'")
    assert r.loc[1, "hit_blocks_cpu"] == 8 and len(load)
    ends = np.array(sorted(ops.query("kind == 'compute'")["end_s"]))
    landed = load["end_s"].max()
    seen = ends[ends >= landed].min()  # the boundary after the load ended
    assert landed < seen and r.loc[1, "first_token_s"] > seen
    assert r.loc[1, "admit_s"] in set(ends)  # admitted at a boundary, the load started there


def test_a_stores_victims_are_demoted_as_one_job_that_the_store_follows() -> None:
    """A CPU tier of 2 blocks over an SSD tier of 8 (paged-cpu-ssd's rule).
    A's 2 blocks are stored and complete (touched in reverse: 12 is the least
    recently used); B's 2 evict both, 12 first: they leave the CPU tier at
    once, their SSD copies placed not ready, as one demotion transfer holding
    both; B's store is the second transfer (its slots are theirs once the
    demotion has read them)."""
    gpu = GpuCache(64, prefix_cache=True)
    cpu = OffloadTier("cpu", ["dram0"], [1.0], [2 * 4 * 8192.0], 4, 8192)
    ssd = OffloadTier("ssd", ["ssd0"], [1.0], [8 * 4 * 8192.0], 4, 8192)
    design = get_design("paged-cpu-ssd", {"cpu_gib": 1.0, "ssd_gib": 1.0, "block_factor": 1})
    mgr = BlockManager(gpu, [cpu, ssd], design, B, "gpu0")
    a = _computed(mgr, 0, [11, 12])
    (store_a,) = mgr.prepare_store(a)
    mgr.on_stored(store_a)
    b = _computed(mgr, 1, [21, 22])
    demote, store_b = mgr.prepare_store(b)
    assert demote.tag == "demote" and [e.key for e in demote.entries] == [12, 11]
    assert demote.src is cpu and demote.dst is ssd and demote.nbytes == 2 * 4 * 8192
    assert [e.key for e in cpu.lru.order()] == [22, 21] and cpu.evictions == 2
    assert [ssd.entries[k].ref_cnt for k in (11, 12)] == [NOT_READY, NOT_READY]
    assert ssd.lookup(11) is None  # not a hit until its copy is done
    assert mgr.on_stored(demote) == []
    assert ssd.lookup(11) is not None and ssd.lookup(12) is not None
    assert [e.key for e in store_b.entries] == [21, 22]


def test_the_store_starts_when_its_demotion_job_ends() -> None:
    """The retry case above on paged-cpu-ssd (a CPU tier of exactly 4 blocks
    over an SSD tier): B's store, prepared at the end of iteration 2, evicts
    A's 4 blocks; their demotion starts there, one write of 4 blocks, and B's
    store starts when it ends."""
    params = {"cpu_gib": 4 * BLOCK / GIB, "ssd_gib": 1.0, "block_factor": 1}
    rows = [row(0, 0.0, 64, [], 4), row(1, 0.0, 64, [], 4)]
    ops = run(rows, "paged-cpu-ssd", params).ops.to_pandas()
    ends = sorted(ops.query("kind == 'compute'")["end_s"])
    demote = ops.query("tag == 'demote'")
    a, b = ops.query("tag == 'store'").sort_values("start_s").itertuples()
    assert demote["bytes"].sum() == 4 * BLOCK
    assert demote["start_s"].min() == ends[2] and a.start_s == ends[0]
    assert b.start_s == demote["end_s"].max() > ends[2]


def test_a_store_not_prepared_is_remembered_only_until_what_it_read_changes() -> None:
    """A CPU tier of 2 blocks full of A's stores in flight: B's block finds no
    victim (None) and again at its next step (nothing changed).  A lender
    giving the tier one block more (its capacity set from outside, nothing
    else changed) changes the verdict: B's block is prepared in the free room,
    nothing evicted."""
    mgr = _manager(2)
    cpu = mgr.tiers[0]
    a, b = _computed(mgr, 0, [11, 12]), _computed(mgr, 1, [21])
    mgr.prepare_store(a)
    assert mgr.prepare_store(b) is None and b.unstored
    assert mgr.prepare_store(b) is None and b.unstored  # the same verdict, remembered
    cpu.capacity[0] += 4 * 8192  # one offload block more
    (store_b,) = mgr.prepare_store(b)
    assert [e.key for e in store_b.entries] == [21] and cpu.evictions == 0 and not b.unstored


def test_every_change_a_placement_reads_changes_the_tiers_state() -> None:
    """OffloadTier.state() moves with each change to the entries, their counts,
    used or evictable bytes, or a capacity; a touch (order only) leaves it."""
    tier = OffloadTier("cpu", ["dram0"], [1.0], [4 * 4 * 8192.0], 4, 8192)
    seen = [tier.state()]

    def moved() -> bool:
        seen.append(tier.state())
        return seen[-1] != seen[-2]

    (e1, e2) = tier.place([1, 2], None)
    assert moved()
    tier.complete_all([e1, e2])
    assert moved()
    tier.touch_all([e1])
    assert not moved()
    tier.pin_all([e1])
    assert moved()
    tier.unpin_all([e1])
    assert moved()
    tier.drop([e2], None)
    assert moved()
    (e3,) = tier.place([3], None)
    tier.complete_all([e3])
    seen.append(tier.state())
    tier.hand_over([e3], None)
    assert moved()
    tier.free([e3])
    assert moved()
    tier.capacity[0] -= 4 * 8192
    assert moved()


def test_remembered_verdicts_are_the_verdicts_worked_afresh() -> None:
    """Seeded random steps on a 6-block tier (requests computed, stores tried,
    stores ending, capacity lent and taken back): each store's verdict equals
    the verdict of a copy of the manager and request that remembers nothing."""
    import copy

    rng = np.random.default_rng(11)
    mgr = _manager(6, gpu_blocks=256)
    seqs: list[Seq] = []
    inflight: list = []
    compared = remembered = 0
    for step in range(400):
        act = rng.random()
        if act < 0.2 and len(seqs) < 24:
            n = int(rng.integers(1, 5))
            hs = [1000 * (len(seqs) + 1) + j for j in range(n)]
            seqs.append(_computed(mgr, len(seqs), hs))
        elif act < 0.7 and seqs:
            s = seqs[int(rng.integers(0, len(seqs)))]
            fresh_mgr, fresh_s = copy.deepcopy((mgr, s))
            fresh_s.no_room = None
            want = fresh_mgr.prepare_store(fresh_s)
            remembered += s.unstored and s.no_room is not None
            got = mgr.prepare_store(s)
            assert (got is None) == (want is None), step
            compared += 1
            if got:
                inflight += got
        elif act < 0.9 and inflight:
            t = inflight.pop(int(rng.integers(0, len(inflight))))
            mgr.on_stored(t)
        else:
            mgr.tiers[0].capacity[0] = int(rng.integers(3, 8)) * 4 * 8192
    assert compared > 100 and remembered > 10


def test_a_lookup_with_nothing_changed_since_its_last_leaves_the_order_as_a_touch_would() -> None:
    """Seeded random steps on a 6-block tier (requests computed, looked up,
    stores tried and ending): after every lookup the tier's LRU order is the
    order a copy of the manager gets from the same lookup remembering nothing
    (its touch done again); some lookups found nothing changed."""
    import copy

    rng = np.random.default_rng(5)
    mgr = _manager(6, gpu_blocks=256)
    cpu = mgr.tiers[0]
    seqs: list[Seq] = []
    inflight: list = []
    lookups = skipped = 0
    for _ in range(500):
        act = rng.random()
        if act < 0.15 and len(seqs) < 16:
            n = int(rng.integers(1, 4))
            seqs.append(_computed(mgr, len(seqs), [1000 * (len(seqs) + 1) + j for j in range(n)]))
        elif act < 0.6 and seqs:
            s = seqs[int(rng.integers(0, len(seqs)))]
            fresh_mgr, fresh_s = copy.deepcopy((mgr, s))
            fresh_s.touched = None
            fresh_mgr.lookup(fresh_s)
            skipped += s.touched == [(t.lru.clock, t.changes) for t in mgr.tiers]
            mgr.lookup(s)
            order = [e.key for e in cpu.lru.order()]
            assert order == [e.key for e in fresh_mgr.tiers[0].lru.order()]
            lookups += 1
        elif act < 0.85 and seqs:
            got = mgr.prepare_store(seqs[int(rng.integers(0, len(seqs)))])
            inflight += got or []
        elif inflight:
            mgr.on_stored(inflight.pop(int(rng.integers(0, len(inflight)))))
    assert lookups > 150 and skipped > 10

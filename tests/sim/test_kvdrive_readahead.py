"""KVDrive's sync comparison on one I/O path, and (c)'s read-ahead (seed 003 §7.3)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sim.executor import simulate
from sim.policies import Layout, get_design
from sim.policies.kvdrive.sync import SYNCS, memmap_reads
from sim.policies.selection import always_selected, take_units
from sim.scenarios.kvdrive import assemble
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.swarm import LaneResult

D, N, E = 8, 2048, 4096
BUDGET = 4 + 8 + 64  # sinks + local window + 64 selected


def _design(sync="hierarchical", readahead=0.0, ssd_io="memmap"):
    """No GPU cache (window 0), no warm-up, an *empty* memmap region of 1024 entries
    (large enough that nothing is evicted over two steps)."""
    lay = Layout(
        n_ssd=2,
        entry_bytes=E,
        key_bytes=128,
        budget=BUDGET,
        local_window=8,
        sink_tokens=4,
        dram_cache_entries=1024,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    d = get_design(
        "kvdrive",
        chunk_size=4,
        chunks_per_centroid=4,
        window=0,
        sync=sync,
        warmup=False,
        readahead=readahead,
        ssd_io=ssd_io,
    )
    keys = np.random.default_rng(3).normal(size=(N + 8, D)).astype(np.float32)
    act = sp.csr_matrix(np.random.default_rng(1).random((16, N)) < 0.05)
    d.build(act, keys[:N], lay, np.random.default_rng(0))
    d.memmap.resident[:] = False
    return d, keys


@pytest.mark.parametrize("name, memmap", [("kvdrive-sync", True), ("kvdrive-sync-iouring", False)])
def test_every_strategy_of_a_sync_comparison_reads_ssd_by_one_path(name, memmap):
    from sim.config import load_scenario

    cfg = load_scenario(name)
    params = [cfg.variant_params(v) for v in cfg.variants]
    kv = [dict(p.design_params) for p in params if p.design == "kvdrive"]
    assert {d["sync"] for d in kv} == set(SYNCS)  # the four, then the read-ahead pair
    paths = {memmap_reads(d["sync"], d.get("ssd_io", "per_sync")) for d in kv}
    assert paths == {memmap}
    assert len({p.io_path for p in params}) == 1  # and one io_path for the non-memmap reads


@pytest.mark.parametrize("ssd_io, want", [("memmap", 1.0), ("io_path", 0.0)])
def test_blockwise_and_hierarchical_follow_ssd_io_not_their_strategy(ssd_io, want):
    q = np.ones(D, dtype=np.float32)
    for sync in ("blockwise", "hierarchical"):
        d, keys = _design(sync, ssd_io=ssd_io)
        assert d.step(0, q, keys[N]).info["memmap_reads"] == want


def test_read_ahead_faults_in_the_previous_querys_next_budget_and_the_fetch_skips_it():
    rng = np.random.default_rng(7)
    q0, q1 = rng.normal(size=D).astype(np.float32), rng.normal(size=D).astype(np.float32)
    ra, keys = _design(readahead=1.0)
    twin, _ = _design()  # the same design without read-ahead: the same state after step 0
    a0, t0 = ra.step(0, q0, keys[N]), twin.step(0, q0, keys[N])
    assert a0.info["ahead_entries"] == 0 and a0.prefetch_extents is None  # nothing known yet
    assert a0.read_bytes == t0.read_bytes
    # by hand: q0's ranking taken to two budgets at step 0's visible length, minus what
    # the region holds (no GPU cache); step 1 places nothing new (local window)
    visible = N + 1
    always = always_selected(visible, 4, 8)
    _, guess = take_units(ra.index.centroids @ q0, ra.members, 2 * BUDGET, always, visible)
    want = guess[~twin.memmap.resident[guess]]
    assert len(want) > 0
    resident = twin.memmap.resident.copy()
    a1, t1 = ra.step(1, q1, keys[N + 1]), twin.step(1, q1, keys[N + 1])
    assert a1.info["ahead_entries"] == len(want)
    got = ra.packed.extents(want, E)
    assert all(np.array_equal(a, b) for a, b in zip(a1.prefetch_extents, got, strict=True))
    # the fetch: the twin reads step 1's selection minus the region; the read-ahead
    # design reads that minus the guessed entries
    extra1 = np.setdiff1d(t1.selected, always_selected(visible + 1, 4, 8))
    twin_ssd = extra1[~resident[extra1]]
    assert t1.read_bytes == len(twin_ssd) * E
    assert a1.read_bytes == len(np.setdiff1d(twin_ssd, want)) * E < t1.read_bytes


def test_read_ahead_starts_with_the_selection_and_the_copy_waits_for_it(tiny):
    """Hand-drawn schedule of step 1 (one layer, one micro-batch)::

        attn(0) | select ------ | lookup | kv_fetch | stage | h2d | attn(1)
                | readahead ------------------ |
    the read-ahead starts when step 0's compute ends (the gate), with the select;
    the fetch waits for the lookup; the staging for both reads."""
    rng = np.random.default_rng(7)
    q0, q1 = rng.normal(size=D).astype(np.float32), rng.normal(size=D).astype(np.float32)
    ra, keys = _design(readahead=1.0)
    decs = [ra.step(0, q0, keys[N]), ra.step(1, q1, keys[N + 1])]
    p = KVDriveParams(
        model="Llama-3-8B-1048K", context_tokens=N, batch=1, steps=2, layers=1, profile_steps=0
    )
    lane = LaneResult(decs, [d.selected for d in decs], BUDGET - 64, 0, np.zeros(2), "gpu")
    ssds = {"ssd0": 1 << 20, "ssd1": 1 << 20}
    plan = assemble(p, tiny, ssds, ra.layout, {(0, 0): lane}, {(0, 0): np.zeros(2, int)}, N)
    ops = simulate(plan, tiny).ops.to_pandas()
    s1 = ops[ops["step"] == 1]

    def one(tag, kind=None):
        g = s1[(s1["tag"] == tag) & ((s1["kind"] == kind) if kind else True)]
        return g["start_s"].min(), g["end_s"].max()

    gate = ops[(ops["step"] == 0) & (ops["tag"] == "attn")]["end_s"].max()
    ahead, select, lookup = one("readahead"), one("select"), one("lookup")
    fetch, stage, h2d = one("kv_fetch"), one("stage"), one("h2d")
    assert ahead[0] == pytest.approx(gate) and select[0] == pytest.approx(gate)
    assert ahead[0] < select[1]  # overlaps the selection
    assert fetch[0] == pytest.approx(lookup[1])
    assert stage[0] == pytest.approx(max(fetch[1], ahead[1]))
    assert h2d[0] >= stage[1] - 1e-12
    reads = s1[s1["kind"] == "read"]
    assert reads["bytes"].sum() == decs[1].read_bytes + decs[1].info["ahead_entries"] * E
    assert set(ops[ops["step"] == 0]["tag"]) >= {"kv_fetch"} and "readahead" not in set(
        ops[ops["step"] == 0]["tag"]
    )


def test_read_ahead_needs_the_memmap_region():
    from sim.registry import RegistryError

    with pytest.raises(RegistryError, match="readahead"):
        get_design("kvdrive", sync="blockwise", readahead=1.0)

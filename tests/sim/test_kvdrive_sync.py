"""KVDrive's four sync strategies (seed 003 §7.3): each one's mechanism by hand."""

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from sim.executor import simulate
from sim.policies import Layout, get_design
from sim.policies.kvdrive.sync import MEMMAP_IO_BYTES, allocate_pinned
from sim.scenarios.kvdrive import assemble
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.swarm import LaneResult

D, N, E = 8, 2048, 4096  # key dims, prefix entries, entry bytes (one 4 KiB page)
ALWAYS = 4 + 8  # sinks + local window


def _design(sync, dram=0, window=0, warmup=False):
    lay = Layout(
        n_ssd=2,
        entry_bytes=E,
        key_bytes=128,
        budget=ALWAYS + 64,
        local_window=8,
        sink_tokens=4,
        dram_cache_entries=dram,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    d = get_design(
        "kvdrive", chunk_size=4, chunks_per_centroid=4, window=window, sync=sync, warmup=warmup
    )
    keys = np.random.default_rng(3).normal(size=(N + 8, D)).astype(np.float32)
    act = sp.csr_matrix(np.random.default_rng(1).random((16, N)) < 0.05)
    d.build(act, keys[:N], lay, np.random.default_rng(0))
    return d, keys


def _runs(design, ids):
    """Hand count of ranges: per SSD, sorted slots, a new range at every gap."""
    runs = 0
    for k in range(2):
        s = np.sort(design.packed.slot[ids][design.packed.disk[ids] == k])
        runs += int(len(s) > 0) + int((np.diff(s) != 1).sum())
    return runs


@pytest.mark.parametrize("dram", [0, N - 1])
def test_layerwise_reads_the_layers_whole_kv_every_step_when_dram_cannot_hold_it(dram):
    design, keys = _design("layerwise", dram=dram, warmup=True)
    q = np.ones(D, dtype=np.float32)
    for t in range(3):
        dec = design.step(t, q, keys[N + t])
        # the whole packed layer (the prefix: decode tokens are still in the local window)
        assert dec.read_bytes == N * E
        assert dec.info["h2d_entries"] == dec.info["stage_entries"] == N
        assert _runs(design, np.arange(N)) == sum(len(e) for e in dec.ssd_extents) == 2


def test_layerwise_reuses_the_memmap_when_dram_holds_the_layer():
    design, keys = _design("layerwise", dram=N, warmup=True)
    dec = design.step(0, np.ones(D, dtype=np.float32), keys[N])
    assert dec.read_bytes == 0 and dec.info["dram_hits"] == N


def test_blockwise_reads_exactly_the_coalesced_extents_of_the_misses_outside_dram():
    design, keys = _design("blockwise", dram=300)
    in_dram = design.in_dram.copy()  # static: positions 0..299 (no warm-up)
    assert in_dram[:300].all() and not in_dram[300:].any()
    dec = design.step(0, np.ones(D, dtype=np.float32), keys[N])
    extra = np.setdiff1d(dec.selected, np.r_[0:4, N + 1 - 8 : N + 1])  # no GPU cache: all miss
    want = extra[~in_dram[extra]]
    assert dec.read_bytes == len(want) * E
    got = design.packed.extents(want, E)
    assert all(np.array_equal(a, b) for a, b in zip(dec.ssd_extents, got, strict=True))
    assert sum(len(e) for e in dec.ssd_extents) == _runs(design, want) < len(want)
    assert dec.info["stage_entries"] == dec.info["h2d_entries"] == len(extra)
    assert dec.info["blocking_h2d"] == 1 and dec.info["memmap_reads"] == 0


def test_hierarchical_second_access_reads_nothing_and_the_first_pays_page_faults(tiny):
    design, keys = _design("hierarchical", dram=256)
    q = np.ones(D, dtype=np.float32)
    first = design.step(0, q, keys[N])
    second = design.step(1, q, keys[N + 1])
    miss = first.info["gpu_misses"]
    assert 0 < first.info["ssd_entries"] <= miss <= 256  # the region holds all it faulted in
    below = N - 8  # the same entries chosen beyond the (moving) local window
    assert np.array_equal(
        first.selected[first.selected < below], second.selected[second.selected < below]
    )
    assert second.read_bytes == 0 and second.info["dram_hits"] == second.info["gpu_misses"]
    # the plan: the first access's reads go by the kernel path, a 4 KiB page each
    p = KVDriveParams(
        model="Llama-3-8B-1048K", context_tokens=N, batch=1, steps=2, layers=1, profile_steps=0
    )
    lane = LaneResult([first, second], [first.selected] * 2, ALWAYS, 0, np.zeros(2), "gpu")
    ssds = {"ssd0": 1 << 20, "ssd1": 1 << 20}
    plan = assemble(p, tiny, ssds, design.layout, {(0, 0): lane}, {(0, 0): np.zeros(2, int)}, N)
    ops = simulate(plan, tiny).ops.to_pandas()
    reads = ops[ops["kind"] == "read"]
    assert set(reads["step"]) == {0} and reads["bytes"].sum() == first.read_bytes
    sw = tiny.software
    for k, r in zip(reads["src"], reads.itertuples(), strict=True):
        ext = first.ssd_extents[int(k[-1])]
        n_ios = int(np.ceil(ext[:, 1] / MEMMAP_IO_BYTES).sum())  # readahead-sized I/Os
        pages = int(ext[:, 1].sum()) // 4096
        assert r.n_ios == n_ios
        assert r.cpu_s == pytest.approx(
            1e-6 * (pages * sw.kernel_fs_per_io_us + n_ios * sw.syscall_us)
        )
    # the staging copy: 2 x the staged bytes on the DRAM bus, once per step
    stage = ops[(ops["tag"] == "stage") & (ops["kind"] == "copy")]
    assert list(stage["bytes"]) == [2 * first.info["stage_entries"] * E, 2 * miss * E]


def test_balanced_pinned_entries_skip_ssd_page_faults_and_staging():
    plain, keys = _design("balanced", dram=64)
    q = np.ones(D, dtype=np.float32)
    ref = plain.step(0, q, keys[N])
    extra = np.setdiff1d(ref.selected, np.r_[0:4, N + 1 - 8 : N + 1])
    pinned, _ = _design("balanced", dram=64)
    half = extra[: len(extra) // 2]
    pinned.pin(half)
    assert pinned.memmap.capacity == 64 - len(half)  # carved out of the same DRAM tier
    dec = pinned.step(0, q, keys[N])
    rest = np.setdiff1d(extra, half)
    # no warm-up: the region held positions 0..63, the most recent first; shrunk, it
    # keeps 0..capacity-1, which the unpinned misses hit
    from_memmap = rest[rest < 64 - len(half)]
    assert dec.info["h2d_entries"] == len(extra)
    assert dec.info["stage_entries"] == len(rest)  # only the memmap part is staged
    assert dec.read_bytes == (len(rest) - len(from_memmap)) * E
    all_pinned, _ = _design("balanced", dram=len(extra))
    all_pinned.pin(extra)
    dec = all_pinned.step(0, q, keys[N])
    assert dec.read_bytes == 0 and dec.info["stage_entries"] == 0
    assert dec.info["dram_hits"] == dec.info["h2d_entries"] == len(extra)


def test_the_pinned_budget_goes_to_the_most_stalling_entries_over_all_lanes():
    picked = {}

    def lane(i, counts):
        return SimpleNamespace(
            stall_profile=lambda: np.array(counts),
            layout=SimpleNamespace(entry_bytes=100),
            pin=lambda ids: picked.__setitem__(i, sorted(ids.tolist())),
        )

    lanes = [lane(0, [5, 0, 2, 7]), lane(1, [6, 1, 0, 5])]
    # each lane stands for 2 layers: an entry costs 200 B; 800 B hold four entries:
    # 7 (lane 0, id 3), 6 (1, 0), 5 (0, 0), 5 (1, 3); never a zero count
    assert allocate_pinned(lanes, 800, 2.0) == 4
    assert picked == {0: [0, 3], 1: [0, 3]}
    assert allocate_pinned(lanes, 1e9, 2.0) == 6  # only entries that stalled


def test_the_sync_scenario_runs_the_four_settings_where_dram_cannot_hold_the_kv():
    from hwprofiles import load_profile
    from sim.config import load_scenario
    from sim.policies.kvdrive.sync import SYNCS
    from sim.scenarios.kvdrive_memory import host_budget

    cfg = load_scenario("kvdrive-sync")
    params = [cfg.variant_params(v) for v in cfg.variants]
    syncs = [dict(p.design_params).get("sync") for p in params if p.design == "kvdrive"]
    assert syncs[:4] == list(SYNCS)  # then the read-ahead pair (hierarchical, balanced)
    profile = load_profile("l20-server")
    assert {host_budget(p, profile) for p in params} == {32e9}  # one budget for all
    p = params[0]
    kv = p.context_tokens * p.batch * 32 * (2 * 8 * 128 * 2)  # 32 layers x 4 KiB per token
    assert kv == pytest.approx(64.4e9, rel=1e-3) and kv > 32e9

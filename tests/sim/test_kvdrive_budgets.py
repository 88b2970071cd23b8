"""Equal budgets in the KVDrive comparisons: one host and one GPU budget for every
design, the host check by hand (MagicPIG out of memory at init), KVDrive's DRAM
tier spilling to SSD at the budget, and memory charging every model layer."""

import math
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.factors import expand_matrix
from sim.policies import Layout, StepDecision, get_design
from sim.policies.design_base import DesignBase
from sim.scenarios.kvdrive import plan_kvdrive
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.kvdrive_memory import (
    dram_tier_entries,
    dram_tier_fraction,
    gpu_memory,
    host_budget,
    host_memory,
)
from sim.scenarios.swarm import LaneResult

SCENARIOS = ("kvdrive", "kvdrive-quick", "kvdrive-sweep", "kvdrive-paper")
PROFILES = ("l20-server", "h20-server", "rtx4090-ws")
ENTRY = 2 * 8 * 128 * 2  # Llama-3-8B-1048K: K and V of 8 KV heads x 128 x bf16 per layer
GIB = 2**30


def _budgets(p, profile) -> tuple:
    """Everything a design's memory and hardware assumptions depend on."""
    return (
        host_budget(p, profile),
        profile.gpu.hbm_capacity_gib,
        p.gpu_cache_mb,
        p.dram_cache,
        p.dram_fill,
        p.model,
        p.context_tokens,
        p.batch,
        p.ssds,
        p.io_path,
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_design_of_a_comparison_gets_the_same_gpu_and_host_budget(name):
    cfg = load_scenario(name)
    designs = {cfg.variant_params(v).design for v in cfg.variants}
    assert len(designs) >= 3  # a comparison, not one design
    # a scenario with points compares at each (pair, host size): the DRAM-limited host
    # variants of `kvdrive` share their own budget, the same for every design there
    runs = [cfg.variant_params(v) for v in expand_matrix(cfg)]
    groups = {(p.context_tokens, p.batch, p.host_mem_gb) for p in runs}
    for hw in PROFILES:
        profile = load_profile(hw)
        for g in groups:
            at = [p for p in runs if (p.context_tokens, p.batch, p.host_mem_gb) == g]
            seen = {_budgets(p, profile) for p in at}
            assert len(seen) == 1, (name, hw, g, seen)
            if len(at) > 1:  # more than one design shares the budget
                assert len({p.design for p in at}) >= 2, (name, g)


def test_the_paper_scenarios_host_budget_is_the_machines_dram_less_the_reserve():
    # seed 003 §9.1: L20 100 GB, H20 200 GB, 4090 120 GB of host memory (GiB in the
    # profiles); the scenario reserves 8 GB (1e9 B) for OS, runtime and staging buffers
    p = load_scenario("kvdrive-paper").workload
    for hw, gib in (("l20-server", 100), ("h20-server", 200), ("rtx4090-ws", 120)):
        assert host_budget(p, load_profile(hw)) == gib * GIB - 8e9
    assert host_budget(replace(p, host_mem_gb=32.0), load_profile("l20-server")) == 32e9


@pytest.mark.parametrize("budget_gb, oom", [(0.569344, False), (0.569343, True)])
def test_magicpig_is_out_of_host_memory_where_kv_and_tables_exceed_the_budget(budget_gb, oom):
    lay = Layout(
        n_ssd=1,
        entry_bytes=ENTRY,
        key_bytes=ENTRY // 2,
        budget=64,
        local_window=8,
        sink_tokens=4,
        dram_cache_entries=0,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    keys = np.random.default_rng(0).normal(size=(1000, 8)).astype(np.float32)
    design = get_design("magicpig")
    design.build(sp.csr_matrix((4, 1000), dtype=bool), keys, lay, np.random.default_rng(0))
    # 1000 entries x (4096 B of KV + 150 tables x 8 heads x a 4-byte id) = 8,896,000 B
    assert design.host_bytes() == 1000 * (4096 + 150 * 8 * 4) == 8_896_000
    # 2 lanes (batch 2, one modeled layer), each standing for all 32 layers:
    # 2 x 32 x 8,896,000 = 569,344,000 B
    p = KVDriveParams(batch=2, layers=8, host_mem_gb=budget_gb)
    need, budget, got = host_memory(p, load_profile("l20-server"), [design.host_bytes()] * 2)
    assert need == 569_344_000 and budget == pytest.approx(budget_gb * 1e9)
    assert got is oom


def test_kvdrives_dram_tier_is_what_the_budget_holds():
    # budget 1 GB over batch 2 x 32 layers x 4096 B = 3,814.7 entries per lane; of a
    # 10,000-entry prefix that is 38.147%; dram_cache caps it, dram_fill lifts the cap
    profile = load_profile("l20-server")
    p = KVDriveParams(batch=2, host_mem_gb=1.0, dram_cache=0.25)
    assert dram_tier_fraction(p, profile, 10_000) == 0.25
    fill = replace(p, dram_fill=True)
    assert dram_tier_fraction(fill, profile, 10_000) == pytest.approx(1e9 / (2 * 32 * 4096) / 1e4)
    roomy = replace(fill, host_mem_gb=1e3)  # the whole prefix fits: just under 1
    assert dram_tier_fraction(roomy, profile, 10_000) == math.nextafter(1.0, 0.0)
    # in whole entries: floor(3,814.7) = 3,814; the whole prefix when it fits
    assert dram_tier_entries(fill, profile, 10_000) == 3_814
    assert dram_tier_entries(p, profile, 10_000) == 2_500  # dram_cache's quarter, below it
    assert dram_tier_entries(roomy, profile, 10_000) == 10_000


SMALL = dict(context_tokens=2048, batch=2, steps=2, profile_steps=16, layers=2, trace="positional")


def _plan(**kw):
    return plan_kvdrive(KVDriveParams(**{**SMALL, **kw}), load_profile("l20-server"), seed=0)


def test_at_one_budget_kvdrive_spills_to_ssd_and_shadowkv_runs_out():
    # prefix 2,064 entries; all 32 layers x batch 2 of whole entries = 541,065,216 B;
    # ShadowKV's values are half: 270,532,608 B.  At 0.1 GB KVDrive keeps
    # 0.1e9 / (2 x 32 x 4096) = 381 entries per lane in DRAM, ShadowKV does not fit.
    # Sparsity 0.2 (412 entries a step) so that selections reach past the GPU cache.
    budget = dict(host_mem_gb=0.1, dram_fill=True, sparsity=0.2)
    kvd, shadow = _plan(design="kvdrive", **budget), _plan(design="shadowkv", **budget)
    assert kvd.info["host_budget_gb"] == shadow.info["host_budget_gb"] == pytest.approx(0.1)
    assert shadow.info["host_need_gb"] == pytest.approx(270_532_608 / 1e9)
    assert shadow.info["host_oom"] and not kvd.info["host_oom"]
    assert kvd.layout.dram_cache_entries == 381
    # the DRAM tier is exactly what the check charges: entries x 4096 B x 32 x 2 lanes
    assert kvd.info["host_need_gb"] == pytest.approx(381 * 4096 * 32 * 2 / 1e9)
    roomy = _plan(design="kvdrive", host_mem_gb=10.0, dram_fill=True, sparsity=0.2)
    read = [
        sum(d.read_bytes for lane in s.lanes.values() for d in lane.decisions) for s in (kvd, roomy)
    ]
    assert read[0] > read[1] == 0  # what the budget leaves out is read from SSD
    assert roomy.layout.dram_cache_entries == 2064  # the whole prefix in DRAM, the
    # GPU-warmed entries included: 2,064 x 4096 B x 32 layers x 2 lanes
    assert roomy.info["host_need_gb"] == pytest.approx(2064 * 4096 * 32 * 2 / 1e9)


@pytest.mark.parametrize("room, warmed_in_dram", [(900, 0), (990, 40), (5000, 50)])
def test_kvdrives_gpu_warmed_entries_get_a_dram_copy_only_from_spare_room(room, warmed_in_dram):
    # 1,000 prefix entries, all important (ranked), 50 warmed into the GPU cache: the
    # DRAM tier takes the next 950 first; what room is left copies warmed ones
    lay = Layout(1, 256, 128, 16, 8, 4, room, 80.0, 0.04)
    keys = np.random.default_rng(2).normal(size=(1000, 8)).astype(np.float32)
    act = sp.csr_matrix(np.ones((2, 1000), dtype=bool))
    design = get_design("kvdrive", gpu_cache_entries=50)
    design.build(act, keys, lay, np.random.default_rng(0))
    warmed = design.ranked[:50]
    assert design.in_dram[warmed].sum() == warmed_in_dram
    assert design.in_dram.sum() == min(room, 950) + warmed_in_dram
    assert design.host_bytes() == design.in_dram.sum() * 256


def test_original_gpu_memory_charges_every_model_layer_not_only_the_timed_ones():
    dec = StepDecision(
        selected=np.arange(3), dram_entries=0, ssd_extents=[], info={"hbm_entries": 100_000.0}
    )
    lane = LaneResult([dec], [], 0, 0, np.zeros(1, dtype=np.int64))
    profile = load_profile("l20-server")
    needs = [
        gpu_memory(KVDriveParams(batch=1, layers=n, design="original"), profile, {0: lane}, ENTRY)
        for n in (8, 32)
    ]
    # weights 16.06e9 B + 32 layers x 100,000 entries x 4096 B, whatever layers are timed
    assert needs[0] == needs[1]
    assert needs[0][0] == pytest.approx(16.06e9 + 32 * 100_000 * ENTRY)


def test_every_kvdrive_design_shares_the_one_base_and_its_step_order():
    keys = np.random.default_rng(1).normal(size=(300, 8)).astype(np.float32)
    lay = Layout(1, 256, 128, 16, 8, 4, 0, 80.0, 0.04)
    for name in ("kvdrive", "flexgen", "quest", "shadowkv", "magicpig", "retroinfer", "original"):
        design = get_design(name)
        assert isinstance(design, DesignBase)
        assert type(design)().params == design.params  # no params given: the defaults
        design.build(sp.csr_matrix((4, 296), dtype=bool), keys[:296], lay, np.random.default_rng(0))
        design.step(0, keys[0], keys[296])
        with pytest.raises(ValueError, match="step 2 out of order"):
            design.step(2, keys[0], keys[297])


@pytest.mark.parametrize("key", ["host_mem_gb", "host_reserved_gb"])
def test_a_negative_host_budget_is_named(tmp_path, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: b\ndescription: d\nseed: 0\nworkload:\n  kind: kvdrive\n  {key}: -1\n")
    with pytest.raises(ValueError, match=f"{key}.*must be >= 0"):
        load_scenario(str(bad))


def test_flexgen_streams_one_layer_so_it_fits_where_original_does_not():
    # 360K x 2 on the L20 (48 GiB = 51.54e9 B): one sequence's visible layer is
    # 368,673 entries.  Original keeps every layer: 16.06e9 + 2 x 32 x 368,673 x 4096 B
    # = 112.7e9 B, out of memory.  FlexGen holds one layer's KV while it runs:
    # 16.06e9 + 2 x 368,673 x 4096 B = 19.08e9 B, it fits (seed 003 §9.2).
    n, profile = 368_673, load_profile("l20-server")
    p = KVDriveParams(batch=2, layers=8)

    def lanes(info):
        dec = StepDecision(selected=np.arange(n), dram_entries=0, ssd_extents=[], info=info)
        return {(b, 0): LaneResult([dec], [], 0, 0, np.zeros(1, dtype=np.int64)) for b in (0, 1)}

    orig = gpu_memory(p, profile, lanes({"hbm_entries": float(n)}), ENTRY)
    flex = gpu_memory(p, profile, lanes({}), ENTRY)
    assert orig == (pytest.approx(16.06e9 + 2 * 32 * n * ENTRY), True)
    assert flex == (pytest.approx(16.06e9 + 2 * n * ENTRY), False)

"""The Swarm scenario driver: designs through plans to records, by mechanism.

Tiny settings (4K-token prefix, 2 sequences, 2 layers) keep this fast; every
assertion is a mechanism the issue names, not a snapshot of numbers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import SwarmParams
from sim.executor import simulate
from sim.metrics import design_summary
from sim.registry import Unsupported
from sim.scenarios.swarm import plan_swarm

BASE = SwarmParams(
    context_tokens=4096,
    batch=2,
    steps=3,
    profile_steps=96,
    layers=2,
    local_window=64,
    dram_cache=0.05,
)


@pytest.fixture(scope="module")
def h20():
    return load_profile("h20-8ssd")


def run(h20, **kw):
    p = dataclasses.replace(BASE, **kw)
    splan = plan_swarm(p, h20, seed=0)
    rec = simulate(splan.plan, h20)
    summary = design_summary(
        rec.ops,
        h20,
        splan.lanes,
        list(splan.ssds),
        p.batch,
        p.steps,
        splan.layout.entry_bytes,
        55.2,
    )
    return splan, rec, summary


@pytest.mark.parametrize("design", ["swarm", "nocluster", "infllm", "pqcache", "swarm-no-dedup"])
def test_plan_bytes_are_the_decisions_bytes(h20, design):
    splan, rec, s = run(h20, design=design)
    plan = splan.plan.to_pandas()
    fetch = plan[plan["tag"] == "kv_fetch"]
    per_ssd = fetch.groupby("src")["bytes"].sum()
    # what the decisions say each SSD reads, summed over lanes and cycled layers
    expect = {ssd: 0 for ssd in splan.ssds}
    for (_, lm), lane in splan.lanes.items():
        layers = sum(1 for layer in range(BASE.layers) if layer % BASE.layers_modeled == lm)
        for dec in lane.decisions:
            for k, ext in enumerate(dec.ssd_extents):
                expect[splan.ssds[k]] += layers * int(ext[:, 1].sum()) if len(ext) else 0
    for ssd, b in expect.items():
        assert per_ssd.get(ssd, 0) == b
    dev = rec.devices.to_pandas().set_index("device")
    reads = plan[plan["kind"] == "read"].groupby("src")["bytes"].sum()
    for ssd, b in reads.items():
        assert dev.loc[ssd, "bytes_read"] == b  # the simulator moved exactly those bytes
    assert 0.0 <= s["recall"] <= 1.0


def test_one_ssd_every_swarm_variant_reads_the_same(h20):
    # with one SSD there is nothing to balance: placement and routing ablations coincide
    results = [
        run(h20, design=d, ssds=1)[2] for d in ("swarm", "swarm-no-balance", "swarm-first-replica")
    ]
    assert len({round(r["read_bytes_per_step"]) for r in results}) == 1
    assert results[0]["io_ms_per_step"] == pytest.approx(results[1]["io_ms_per_step"])
    assert results[0]["io_ms_per_step"] == pytest.approx(results[2]["io_ms_per_step"])


def test_swarm_bandwidth_grows_with_ssds(h20):
    one = run(h20, design="swarm", ssds=1)[2]
    eight = run(h20, design="swarm", ssds=8)[2]
    # on one SSD a cluster is one contiguous run (coalesced into 1280 KiB I/Os), so
    # that disk is near its 6.9 GB/s; striped over 8 each disk's run is 1/8 as long
    # (smaller I/Os), so 8 disks give less than 8x (was > 4x with one I/O per entry)
    assert one["ssd_gbps"] <= 6.9
    assert eight["ssd_gbps"] > 3 * one["ssd_gbps"]
    assert eight["read_bytes_per_step"] == one["read_bytes_per_step"]


@pytest.mark.xfail(
    strict=True,
    reason="issue 12.3: at this test's scale (2.39 MB per layer-step) the per-op access "
    "latency L = 80 us does not shrink with the SSD count, so even perfect striping gains "
    "at most (L + B/bw) / (L + B/(8 bw)) = 427 / 123 us = 3.46x (measured first replica "
    "5.61 -> 18.73 GB/s = 3.34x); > 5x needs B > 32 L bw / 3 = 5.9 MB per layer-step. "
    "The other half fails too: no-balance-first gains 14.23 / 5.61 = 2.54x > 0.6 x 3.34",
)
def test_no_balance_placement_does_not_scale_with_ssds(h20):
    # routing fixed to the first replica, so only the placement differs: striped
    # clusters spread every read over all disks, whole clusters on one disk do not
    def gain(design):
        one, eight = (run(h20, design=design, ssds=n)[2] for n in (1, 8))
        assert one["read_bytes_per_step"] == eight["read_bytes_per_step"]
        return eight["ssd_gbps"] / one["ssd_gbps"]

    assert gain("swarm-first-replica") > 5.0
    nb = gain("swarm-no-balance-first")
    assert nb < 0.6 * gain("swarm-first-replica")


def test_clustering_gains_nothing_on_unstructured_traces(h20):
    # the worth of the co-activation clusters = recall over clusters of the same
    # sizes with random members, at (nearly) the same read volume
    def gain(trace):
        swarm = run(h20, design="swarm", trace=trace)[2]
        shuffled = run(h20, design="swarm-shuffled", trace=trace)[2]
        ratio = swarm["read_bytes_per_step"] / shuffled["read_bytes_per_step"]
        assert 0.8 < ratio < 1.25
        return swarm["recall"] - shuffled["recall"]

    structured, unstructured = gain("default"), gain("unstructured")
    assert structured > 0.25
    assert unstructured < 0.1
    assert unstructured < structured / 3


def test_key_clustering_follows_key_geometry_coactivation_does_not(h20):
    # "positional" selects exactly what "default" selects; only keys gain a
    # position part no query probes, which PQCache's k-means clusters on
    swarm = [run(h20, design="swarm", trace=t)[2] for t in ("default", "positional")]
    pq = [run(h20, design="pqcache", trace=t)[2] for t in ("default", "positional")]
    assert swarm[0]["recall"] == pytest.approx(swarm[1]["recall"])
    assert pq[1]["recall"] < pq[0]["recall"] - 0.1


def test_balanced_routing_beats_first_replica(h20):
    bal = run(h20, design="swarm")[2]
    first = run(h20, design="swarm-first-replica")[2]
    assert bal["read_bytes_per_step"] == first["read_bytes_per_step"]
    assert bal["io_ms_per_step"] < first["io_ms_per_step"]


def test_dedup_reduces_volume_when_replicas_overlap(h20):
    splan, _, dedup = run(h20, design="swarm")
    nsplan, _, nodedup = run(h20, design="swarm-no-dedup")
    decisions = [d for lane in nsplan.lanes.values() for d in lane.decisions]
    assert sum(d.duplicate_entries for d in decisions) > 0  # the clusters overlap (replicas)
    assert all(d.duplicate_entries == 0 for lane in splan.lanes.values() for d in lane.decisions)
    assert nodedup["read_bytes_per_step"] > dedup["read_bytes_per_step"]


def test_no_cluster_is_the_oracle_and_loads_the_whole_kv(h20):
    splan, _, s = run(h20, design="nocluster")
    assert s["recall"] == pytest.approx(1.0, abs=0.01)
    plan = splan.plan.to_pandas()
    assert (plan["tag"] == "kv_prefetch").any()


def test_lanes_share_traces_and_same_seed_same_plan(h20):
    a = plan_swarm(dataclasses.replace(BASE, design="pqcache"), h20, seed=0)
    b = plan_swarm(dataclasses.replace(BASE, design="pqcache"), h20, seed=0)
    assert a.plan.equals(b.plan)
    c = plan_swarm(dataclasses.replace(BASE, design="pqcache"), h20, seed=1)
    assert not a.plan.equals(c.plan)
    # every design of a run sees the same oracle
    d = plan_swarm(dataclasses.replace(BASE, design="infllm"), h20, seed=0)
    for key in a.lanes:
        for x, y in zip(a.lanes[key].oracle, d.lanes[key].oracle, strict=True):
            assert np.array_equal(x, y)


def test_profile_limits_are_reported(h20):
    with pytest.raises(Unsupported, match="ssds"):
        plan_swarm(dataclasses.replace(BASE, ssds=9), h20, seed=0)
    with pytest.raises(Unsupported, match="no SSDs"):
        plan_swarm(BASE, load_profile("h20-4gpu-nvlink"), seed=0)

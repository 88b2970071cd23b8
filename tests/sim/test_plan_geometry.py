"""The designs' geometry in the plan: every read names the ranges the design placed.

Swarm with one cluster striped over 4 SSDs reads exactly the slots its placement
gave (worked out by hand); for every design of the default scenario each plan
read lies in its lane's region, lanes never overlap, and the plan's bytes and
I/Os are the decisions' extents summed independently.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim.scenarios.swarm as swarm_scenario
from hwprofiles import load_profile
from kvtier.contracts.plan import BLOCK, extents_csr, io_extents
from sim.config import SwarmParams
from sim.policies.swarm.types import Clustering
from sim.scenarios.sparse_decode import SparseDecodeShape, build_plan
from sim.scenarios.swarm import plan_swarm

SCENARIOS = Path(__file__).parents[2] / "sim" / "scenarios"
# every design of the default comparison and of its ablations
DESIGNS = list(
    dict.fromkeys(
        v["design"]
        for name in ("default.yaml", "swarm-ablations.yaml")
        for v in yaml.safe_load((SCENARIOS / name).read_text())["variants"]
    )
)

TINY = SwarmParams(
    context_tokens=2048,
    batch=2,
    steps=2,
    profile_steps=64,
    layers=3,
    layers_modeled=2,
    local_window=32,
    dram_cache=0.05,
    ssds=4,
)


@pytest.fixture(scope="module")
def h20():
    return load_profile("h20-8ssd")


def h20_max_io(splan) -> list[int]:
    """Per SSD of the plan, its I/O size cap: h20-8ssd's PM9A3 max_io_kib in bytes."""
    return [load_profile("h20-8ssd").ssd(s).max_io_kib * 1024 for s in splan.ssds]


def read_ops(splan):
    """(op ids, SSD index, step, layer, tag, extents) of every read op."""
    plan = splan.plan
    ptr, ext = extents_csr(plan)
    kind = plan.column("kind").to_pylist()
    src = plan.column("src").to_pylist()
    step = plan.column("step").to_pylist()
    layer = plan.column("layer").to_pylist()
    tag = plan.column("tag").to_pylist()
    index = {s: k for k, s in enumerate(splan.ssds)}
    return [
        (j, index[src[j]], step[j], layer[j], tag[j], ext[ptr[j] : ptr[j + 1]])
        for j in range(plan.num_rows)
        if kind[j] == "read"
    ]


def test_one_cluster_striped_over_4_ssds_reads_exactly_its_slots(h20, monkeypatch):
    p = dataclasses.replace(TINY, layers=1, layers_modeled=1, dram_cache=0.0, design="swarm")
    n = p.context_tokens + p.profile_steps  # 2112 entries = 4 x 528
    one = Clustering([np.arange(n, dtype=np.int64)], 1.0, n)
    monkeypatch.setattr(swarm_scenario, "_clustering", lambda *_a: one)
    splan = plan_swarm(p, h20, seed=0)
    eb = splan.layout.entry_bytes
    # one cluster of n members striped round robin: member e on disk (s0 + e) mod 4 at
    # slot e // 4, so each disk holds n/4 slots and lane 1's region starts there
    for lane in splan.lanes.values():
        assert lane.ssd_bytes.tolist() == [n // 4 * eb] * 4
    assert splan.bases[(0, 0)].tolist() == [0] * 4
    assert splan.bases[(1, 0)].tolist() == [n // 4 * eb] * 4
    reads = read_ops(splan)
    assert {r[4] for r in reads} == {"kv_fetch"} and len(reads) == 4 * p.steps
    for j, k, t, _layer, _tag, ext in reads:
        # read: the members after the sinks, up to the window of step t (cache empty), in
        # member order until the budget, sinks and window included, is spent (the cut)
        budget = round(p.sparsity * (n + t))  # the oracle's count at step t
        room = budget - p.sink_tokens - p.local_window
        entries = np.arange(p.sink_tokens, n + t + 1 - p.local_window)[:room]
        expect = (entries[entries % 4 == k] // 4) * eb  # the first cluster starts on disk 0
        # those slots are consecutive on disk k: one range per lane, cut at max_io
        assert len(ext) == 2, f"op {j}: one range per lane"
        assert np.array_equal(entry_offsets(ext[:1], eb), expect)  # lane (0, 0), base 0
        assert np.array_equal(entry_offsets(ext[1:], eb), expect + n // 4 * eb)  # lane (1, 0)
        max_io = h20.ssds[0].max_io_kib * 1024
        assert splan.plan.column("n_ios")[j].as_py() == 2 * -(-(expect.size * eb) // max_io)


def entry_offsets(ext: np.ndarray, eb: int) -> np.ndarray:
    """The entry offsets the (offset, length) ranges cover, each range in order."""
    return np.concatenate([np.arange(o, o + n, eb) for o, n in ext.tolist()])


@pytest.fixture(scope="module", params=DESIGNS)
def design_plan(request, h20):
    p = dataclasses.replace(TINY, design=request.param)
    return p, plan_swarm(p, h20, seed=0)


def test_lanes_have_disjoint_aligned_regions(design_plan):
    p, splan = design_plan
    lanes = sorted(splan.lanes)
    assert len(lanes) == p.batch * p.layers_modeled
    for k in range(len(splan.ssds)):
        for a, b in zip(lanes, lanes[1:], strict=False):
            end_a = splan.bases[a][k] + splan.lanes[a].ssd_bytes[k]
            assert splan.bases[b][k] >= end_a, f"lanes {a} and {b} overlap on SSD {k}"
        assert all(splan.bases[lane][k] % BLOCK == 0 for lane in lanes)


def test_every_read_lies_in_its_lanes_region_and_sums_to_the_decisions(design_plan):
    p, splan = design_plan
    reads = read_ops(splan)
    seen = {}
    for j, k, t, layer, tag, ext in reads:
        which = "prefetch_extents" if tag == "kv_prefetch" else "ssd_extents"
        seen[(t, layer, tag, k)] = j
        lanes = [(s, layer % p.layers_modeled) for s in range(p.batch)]
        at = 0
        for lane in lanes:
            decided = getattr(splan.lanes[lane].decisions[t], which) or []
            mine = decided[k] if k < len(decided) else np.zeros((0, 2), np.int64)
            chunk = ext[at : at + len(mine)]
            at += len(mine)
            lo, size = splan.bases[lane][k], splan.lanes[lane].ssd_bytes[k]
            assert (chunk[:, 0] >= lo).all() and (chunk.sum(axis=1) <= lo + size).all(), (
                f"op {j}: lane {lane} reads outside its region [{lo}, {lo + size}) of SSD {k}"
            )
            assert np.array_equal(chunk - [lo, 0], mine)  # submission order kept, no merging
        assert at == len(ext), f"op {j}: extents beyond the lanes' decisions"
    # per op bytes and I/Os: the decisions' extents summed (every non-empty one has its op)
    plan = splan.plan
    nbytes, n_ios = plan.column("bytes").to_numpy(), plan.column("n_ios").to_numpy()
    for t in range(p.steps):
        for layer in range(p.layers):
            for tag, which in (("kv_fetch", "ssd_extents"), ("kv_prefetch", "prefetch_extents")):
                for k in range(len(splan.ssds)):
                    lanes = [(s, layer % p.layers_modeled) for s in range(p.batch)]
                    exts = [getattr(splan.lanes[x].decisions[t], which) or [] for x in lanes]
                    parts = [e[k] for e in exts if k < len(e)]
                    want_b = sum(int(e[:, 1].sum()) for e in parts)
                    iob = h20_max_io(splan)[k]
                    want_n = sum(int((-(-e[:, 1] // iob)).sum()) for e in parts)
                    j = seen.get((t, layer, tag, k))
                    got = (int(nbytes[j]), int(n_ios[j])) if j is not None else (0, 0)
                    assert got == (want_b, want_n), f"step {t} layer {layer} {tag} SSD {k}"


def test_sparse_decode_spreads_each_layers_entries_over_its_region():
    # 4 SSDs, 40 entries per layer = 10 per SSD, 100-entry regions: 10 entries apart,
    # step s starting s entries into layer l's region at l x 100 entries
    eb = 8192
    shape = SparseDecodeShape(
        steps=3,
        layers=2,
        ssds=("ssd0", "ssd1", "ssd2", "ssd3"),
        gpu="gpu0",
        dram="dram0",
        entries_per_layer=40,
        entry_bytes=eb,
        ios_per_entry=1,
        flops_per_layer=1e9,
        hbm_bytes_per_layer=1e6,
        region_entries=100,
    )
    plan = build_plan(shape)
    reads = np.nonzero(np.asarray(plan.column("kind").to_pylist()) == "read")[0]
    assert len(reads) == 3 * 2 * 4
    ios = io_extents(plan, reads)
    step = plan.column("step").to_numpy()
    layer = plan.column("layer").to_numpy()
    for n, j in enumerate(reads):
        mine = slice(ios.ptr[n], ios.ptr[n + 1])
        s, lay = int(step[j]), int(layer[j])
        want = lay * 100 * eb + s * eb + np.arange(10) * 10 * eb
        assert ios.offset[mine].tolist() == want.tolist(), f"op {j}"
        assert (ios.length[mine] == eb).all()
        assert (ios.offset[mine] + ios.length[mine] <= (lay + 1) * 100 * eb).all()

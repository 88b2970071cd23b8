"""Offload tiers at three scopes on the two-node fleet (sim/fleet/scopes.py).

Two requests of 1,000 prompt tokens with the same 62 full-block hashes (16-token
blocks), in two sessions, one second apart, behind round-robin: the first goes to
instance 0, the second to instance 1.  Llama-3.1-8B, ``paged-cpu`` (1 GiB of host
memory an instance; vLLM's offloading connector stores every complete offload
block of ``block_factor`` 4 GPU blocks).  The prompt's 62 full blocks ((1,000 - 1)
// 16 = 62: the last token is always computed) make 15 offload blocks = 60 GPU
blocks stored.  Instance 1's GPU never saw them, so:

* ``instance`` scope: instance 1's own host tier is empty: 0 offload hits, the
  prompt recomputed (1,000 tokens);
* ``node`` scope, both on node 0 (gpu0, gpu1): the one node store holds the blocks
  instance 0 stored: 60 hits, 1,000 - 960 = 40 tokens computed;
* ``fleet`` scope, instance 1 on node 1 (gpu8): the pool striped over n0.dram0 and
  n1.dram0 holds them: 60 hits, half of each block's layers fetched over the network.

A fleet-pool fetch alone: B bytes from node 1's DRAM to gpu0 cross
n1.dram0.bus, node 1's PCIe switch uplink and NIC PCIe (63 x 0.88 = 55.44 GB/s),
both NIC ports (50 x 0.99 = 49.5 GB/s) and gpu0's PCIe link: 2 us (the ports'
latency) + B / 49.5e9.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwprofiles import load_profile
from sim.fleet.routed import run_routed
from sim.fleet.router import make_router
from sim.fleet.scopes import ScopeError, level_hits, scoped_tiers
from sim.hw.machine import Machine
from sim.models import get_model
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.multi import Instance
from sim.serving.requests import Request
from tests.sim.test_fleet_network import finish_times

FLEET = load_profile("fleet-2x-dgx-h100")
CARD = get_model("Llama-3.1-8B")
B = 16
PORT = 50e9 * 0.99


def _run(scope: str, gpus: list[str], reqs: list[Request], cpu_gib: float = 1.0):
    design = get_design("paged-cpu", {"cpu_gib": cpu_gib})
    sets = scoped_tiers(scope, design, FLEET, CARD, B, gpus)
    inst = [Instance(f"r{k}", CARD, design, EngineConfig(gpu_blocks=4000, gpu=g), [], tiers=t)
            for k, (g, t) in enumerate(zip(gpus, sets, strict=True))]  # fmt: skip
    policy = make_router("round_robin", {}, len(inst), B, np.random.default_rng(0))
    records, where = run_routed(FLEET, inst, reqs, policy)
    return records, where, sets


def _two() -> list[Request]:
    hs = tuple(range(1, 63))
    return [Request(0, 0.0, 0, 0, 1000, 2, hs), Request(1, 1.0, 1, 0, 1000, 2, hs)]


def _second(records) -> dict:
    (row,) = [r for r in records["r1"].requests.to_pylist() if r["request_id"] == 1]
    return row


@pytest.mark.parametrize(
    ("scope", "gpus", "cpu_hits", "computed"),
    [
        ("instance", ["gpu0", "gpu1"], 0, 1000),
        ("node", ["gpu0", "gpu1"], 60, 1000 - 60 * 16),
        ("instance", ["gpu0", "gpu8"], 0, 1000),
        ("fleet", ["gpu0", "gpu8"], 60, 1000 - 60 * 16),
    ],
)
def test_a_block_stored_by_a_is_a_hit_for_b_only_when_shared(scope, gpus, cpu_hits, computed):
    records, where, sets = _run(scope, gpus, _two())
    assert where == {0: 0, 1: 1}  # round-robin
    row = _second(records)
    assert row["hit_blocks_gpu"] == 0
    assert row["hit_blocks_cpu"] == cpu_hits
    assert row["computed_tokens"] == computed
    shared = sets[0][0][0] is sets[1][0][0]
    assert shared == (scope != "instance")


def test_instance_scope_tiers_are_each_nodes_own_devices():
    design = get_design("paged-cpu-ssd", {})
    sets = scoped_tiers("instance", design, FLEET, CARD, B, ["gpu0", "gpu9"])
    assert [t.devices for t in sets[0][0]] == [("n0.dram0",), ("ssd0",)]
    assert [t.devices for t in sets[1][0]] == [("n1.dram0",), ("ssd8",)]
    assert sets[1][1]["ssd8"] == "n1.dram0"  # an SSD bounces through its own node's DRAM
    node = scoped_tiers("node", design, FLEET, CARD, B, ["gpu0", "gpu1", "gpu8"])
    assert node[0] is node[1] and node[0] is not node[2]
    gib = 2**30  # a node store holds the design's capacity once per instance on it
    assert node[0][0][0].capacity == [2 * gib] and node[2][0][0].capacity == [1 * gib]
    fleet = scoped_tiers("fleet", design, FLEET, CARD, B, ["gpu0", "gpu1", "gpu8"])
    assert fleet[0][0][0].devices == ("n0.dram0", "n1.dram0")
    assert fleet[0][0][0].capacity == [int(1.5 * gib)] * 2  # 3 GiB over two modules


def test_node_local_stores_stay_on_their_node():
    """Instance scope on gpu0 and gpu8: each instance stores its 15 offload blocks
    into its own node's DRAM, and no byte crosses a NIC port."""
    records, _, _ = _run("instance", ["gpu0", "gpu8"], _two())
    for name, gpu, dram in (("r0", "gpu0", "n0.dram0"), ("r1", "gpu8", "n1.dram0")):
        ops = records[name].ops.to_pandas()
        stores = ops[(ops["tag"] == "store") & (ops["src"] == gpu)]
        assert set(stores["dst"]) == {dram}
        assert stores["bytes"].sum() == 60 * 16 * 131_072
    dev = records["r1"].devices.to_pandas()
    ports = dev[dev["device"].str.contains(r"\.nic\d+\.port")]
    assert len(ports) and ports["bytes_read"].sum() == 0


def test_fleet_scope_loads_cross_the_network():
    records, _, _ = _run("fleet", ["gpu0", "gpu8"], _two())
    ops = records["r1"].ops.to_pandas()
    loads = ops[(ops["dst"] == "gpu8") & (ops["src"].str.endswith("dram0"))]
    assert set(loads["src"]) == {"n0.dram0", "n1.dram0"}  # the striped block, both halves
    remote = loads[loads["src"] == "n0.dram0"]
    assert (remote["end_s"] - remote["start_s"] >= 2e-6).all()  # the NIC ports' latency first
    # half of each offload block's layers on each node: 60 GPU blocks x 16 x 131,072 B / 2
    assert remote["bytes"].sum() == 60 * 16 * 131_072 // 2


def test_a_fleet_pool_fetch_alone_takes_latency_plus_bytes_over_the_nic():
    m = Machine(FLEET)
    assert m.route_names("n1.dram0", "gpu0")[2:5] == ["n1.nic0.pcie<", "n1.nic0.port>",
                                                     "n0.nic0.port<"]  # fmt: skip
    nbytes = 64 * 10**6
    (end,) = finish_times(m, [("n1.dram0", "gpu0", nbytes)])
    assert end == pytest.approx(2e-6 + nbytes / PORT, rel=1e-9)
    (local,) = finish_times(Machine(FLEET), [("n0.dram0", "gpu0", nbytes)])
    assert local < end - 2e-6  # no network hop: PCIe Gen5 at 55.44 GB/s, no latency


@pytest.mark.parametrize("scope", ["instance", "node", "fleet"])
def test_level_hits_sum_to_the_hits_and_the_store_stays_within_capacity(scope):
    """40 sessions of 3 turns over 4 instances (two per node); histories grow by 300
    tokens a turn; host stores of 0.5 GiB an instance (an offload block is 4 x 16
    tokens x 131,072 B = 8 MiB: 64 of them an instance, for 40 x 11 stored) so they evict."""
    reqs, rid = [], 0
    for s in range(40):
        for t in range(3):
            n = 400 + 300 * t
            hs = tuple(s * 1000 + j for j in range(n // B))
            reqs.append(Request(rid, 0.05 * s + 0.5 * t, s, t, n, 4, hs))
            rid += 1
    records, _, sets = _run(scope, ["gpu0", "gpu1", "gpu8", "gpu9"], reqs, cpu_gib=0.5)
    rows = [r for name in records for r in records[name].requests.to_pylist()]
    assert len(rows) == len(reqs) and not any(r["rejected"] for r in rows)
    per_tier = {t: sum(r[f"hit_blocks_{t}"] for r in rows) for t in ("gpu", "cpu", "ssd", "pool")}
    levels = level_hits(scope, per_tier)
    hit_tokens = sum(r["input_tokens"] - r["computed_tokens"] for r in rows)
    assert sum(levels.values()) * B == hit_tokens  # hits by level vs tokens not computed
    assert per_tier["cpu"] > 0 or scope == "instance"  # shared stores turn misses into hits
    for tiers, _ in sets:
        for t in tiers:
            assert all(0 <= u <= c for u, c in zip(t.used, t.capacity, strict=True))
    assert sum(t.evictions for t in {id(x[0][0]): x[0][0] for x in sets}.values()) > 0


def test_a_store_larger_than_its_devices_is_refused():
    design = get_design("paged-cpu", {"cpu_gib": 300.0})
    gpus = [f"gpu{k}" for k in range(8)]  # 8 x 300 GiB on one node's 2,048 GiB module
    with pytest.raises(ScopeError, match="2,400.0 GiB on n0.dram0, which has 2,048.0 GiB"):
        scoped_tiers("node", design, FLEET, CARD, B, gpus)
    with pytest.raises(ScopeError, match="unknown scope 'rack'"):
        scoped_tiers("rack", design, FLEET, CARD, B, gpus)
    assert len(scoped_tiers("node", design, FLEET, CARD, B, gpus[:6])) == 6  # 1,800 GiB fits


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sessions=st.lists(
        st.tuples(st.integers(4, 40), st.integers(1, 3), st.floats(0.0, 0.5)),
        min_size=2,
        max_size=10,
    ),
    share=st.sampled_from(["prefix", "fresh"]),
)
def test_a_shared_store_never_holds_more_than_its_capacity(sessions, share):
    """Sessions of random length (blocks of 16 tokens), turns and arrivals over
    three instances sharing node 0's store of 3 x 0.03 GiB (96.6 MB: 11 offload
    blocks of 8 MiB, fewer than one long session stores): after every placement,
    by any instance, no device of the store holds more than its capacity, and
    every entry's bytes are counted once."""
    reqs, rid = [], 0
    for s, (blocks, turns, t0) in enumerate(sessions):
        base = 0 if share == "prefix" else 10_000 * s  # "prefix": all share one system prompt
        for t in range(turns):
            n = 16 * (blocks + 8 * t) + 5
            reqs.append(Request(rid, t0 + 0.3 * t, s, t, n, 2, tuple(range(base, base + n // B))))
            rid += 1
    design = get_design("paged-cpu", {"cpu_gib": 0.03})
    gpus = ["gpu0", "gpu1", "gpu2"]
    sets = scoped_tiers("node", design, FLEET, CARD, B, gpus)
    (tier,) = sets[0][0]
    checks = []

    def checked(place):
        def run(keys, evict):
            out = place(keys, evict)
            assert all(0 <= u <= c for u, c in zip(tier.used, tier.capacity, strict=True))
            assert sum(sum(e.nbytes) for e in tier.entries.values()) == sum(tier.used)
            checks.append(len(out))
            return out

        return run

    tier.place = checked(tier.place)
    inst = [Instance(f"r{k}", CARD, design, EngineConfig(gpu_blocks=4000, gpu=g), [], tiers=t)
            for k, (g, t) in enumerate(zip(gpus, sets, strict=True))]  # fmt: skip
    policy = make_router("round_robin", {}, len(inst), B, np.random.default_rng(0))
    records, _ = run_routed(FLEET, inst, reqs, policy)
    assert checks  # the store was placed into
    assert sum(len(records[n].requests) for n in records) == len(reqs)


def test_instances_of_one_machine_take_their_own_devices_and_fit_them():
    """h20-8ssd (8 SSDs, one 1,024 GiB DRAM module), one machine: LMCache uses one SSD
    an instance, so four instances take ssd0..ssd3 (and the one module); the pool uses
    every device in every instance."""
    h20 = load_profile("h20-8ssd")
    lm = get_design("lmcache", {"cpu_gib": 10.0, "ssd_gib": 10.0})
    sets = scoped_tiers("instance", lm, h20, CARD, 256, [f"gpu{k}" for k in range(4)])
    assert [[t.devices for t in tiers] for tiers, _ in sets] == [
        [("dram0",), (f"ssd{k}",)] for k in range(4)
    ]
    pool = get_design("pool", {"cpu_gib": 10.0, "ssd_gib": 10.0})
    (a, _), (b, _) = scoped_tiers("instance", pool, h20, CARD, 256, ["gpu0", "gpu1"])
    assert a[0].devices == b[0].devices == tuple(h20.dram_names + h20.ssd_names)
    assert a[0] is not b[0]  # each its own
    # the instances' tiers together must fit: 8 x 200 GiB of host memory on the one
    # 1,024 GiB module is 1,600 GiB
    big = get_design("lmcache", {"cpu_gib": 200.0, "ssd_gib": 1.0})
    with pytest.raises(ScopeError, match="1,600.0 GiB on dram0, which has 1,024.0 GiB"):
        scoped_tiers("instance", big, h20, CARD, 256, [f"gpu{k}" for k in range(8)])
    assert len(scoped_tiers("instance", big, h20, CARD, 256, ["gpu0"] * 5)) == 5  # 1,000 fits

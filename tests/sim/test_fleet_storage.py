"""Storage nodes on a fleet's network and the pool on them (hwprofiles/fleet.py,
sim/fleet/scopes.py ``tier_scope: storage``), worked by hand.

``fleet-2x-dgx-h100-storage``: two DGX H100 nodes (8 GPUs, 8 SSDs, one DRAM module
and eight ConnectX-7 of 50 GB/s each) and two ``3fs-storage`` servers (16 SSDs, one
512 GiB DRAM module on 307.2 GB/s, two NICs of 25 GB/s on PCIe 4.0 x16 = 31.5 GB/s),
all four on one leaf.  Storage node ``s``'s SSDs follow the compute nodes' 16:
``ssd{16 + 16 s + j}``; its names carry ``s{s}.``.

A pool fetch alone, B bytes from ``s0.dram0`` to gpu0, crosses ``s0.dram0.bus``
(307.2 x 0.80 = 245.76 GB/s), ``s0.nic0.pcie`` (31.5 x 0.88 = 27.72), the storage
port ``s0.nic0.port`` (25 x 0.99 = 24.75), gpu0's port ``n0.nic0.port`` (49.5),
``n0.nic0.pcie`` and ``n0.gpu0.pcie`` (63 x 0.88 = 55.44): the storage port binds,
and the two ports' latency, 2.0 / 2 each, comes first: 2 us + B / 24.75e9.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from hwprofiles.assume import with_value
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

P = load_profile("fleet-2x-dgx-h100-storage")
CARD = get_model("Llama-3.1-8B")
B = 16
GIB = 2**30
STORAGE_PORT = 25e9 * 0.99


def test_storage_nodes_expand_after_the_compute_nodes() -> None:
    f = P.fleet
    assert f is not None and f.storage is not None
    assert (f.nodes, f.storage.nodes, f.hosts) == (2, 2, 4)
    assert (f.ssds_per_node, f.storage.ssds_per_node, f.storage.nics_per_node) == (8, 16, 2)
    assert P.gpu.count == 16  # no GPUs on a storage node
    assert P.dram_names == ("n0.dram0", "n1.dram0", "s0.dram0", "s1.dram0")
    assert len(P.ssd_names) == 2 * 8 + 2 * 16
    assert P.ssd("ssd15").model.startswith("Samsung PM1733 3.84")  # node 1's last
    assert P.ssd("ssd16").model.startswith("Samsung PM1733 15.36")  # storage node 0's first
    assert P.ssd("ssd16").capacity_gib == 14 * 1024  # 3FS: "14TiB NVMe SSDs"
    assert P.link("s0.ssd0.pcie").between == ("ssd16", "s0.rc0")
    assert P.link("s1.ssd15.pcie").between == ("ssd47", "s1.rc0")
    assert P.link("s1.dram0.bus").between == ("s1.rc0", "s1.dram0")
    nic = P.link("s0.nic1.pcie")
    assert (nic.between, nic.gbps, nic.kind) == (("s0.nic1", "s0.rc0"), 31.5, "pcie")
    port = P.link("s0.nic1.port")
    assert (port.between, port.gbps, port.kind) == (("s0.nic1", "leaf0"), 25.0, "rdma")
    assert port.latency_us == 1.0  # half the NIC's 2 us
    assert "spine" not in P.topology.switches  # four hosts, four a leaf
    # the compute side is fleet-2x-dgx-h100's, link for link
    plain = load_profile("fleet-2x-dgx-h100")
    assert [ln for ln in P.topology.links if not ln.name.startswith("s")] == list(
        plain.topology.links
    )
    hosts = {x: f.host_of(x) for x in ("gpu8", "ssd15", "ssd16", "ssd47", "n1.dram0", "s1.dram0")}
    assert hosts == {"gpu8": 1, "ssd15": 1, "ssd16": 2, "ssd47": 3, "n1.dram0": 1, "s1.dram0": 3}


def test_storage_nodes_on_a_leaf_of_their_own_get_an_uplink_of_their_nics() -> None:
    """nodes_per_leaf 2: compute nodes on leaf0, storage nodes on leaf1; each uplink
    carries its members' NICs, 2 x 8 x 50 = 800 and 2 x 2 x 25 = 100 GB/s."""
    q = with_value(P, "fleet.network.nodes_per_leaf", 2)
    assert q.link("s0.nic0.port").between == ("s0.nic0", "leaf1")
    assert q.link("n1.nic7.port").between == ("n1.nic7", "leaf0")
    assert q.link("leaf0.up").gbps == 800.0 and q.link("leaf1.up").gbps == 100.0
    route = Machine(q).route_names("s0.dram0", "gpu0")
    assert route[2:6] == ["s0.nic0.port>", "leaf1.up>", "leaf0.up<", "n0.nic0.port<"]


def test_a_storage_nic_latency_change_rebuilds_its_ports() -> None:
    q = with_value(P, "fleet.storage.nic.latency_us", 5.0)
    assert q.link("s1.nic0.port").latency_us == 2.5
    assert q.link("n0.nic0.port").latency_us == 1.0  # the compute NICs keep theirs
    assert [ln.name for ln in q.topology.links] == [ln.name for ln in P.topology.links]


def test_a_gpu_reaches_a_storage_node_through_its_own_nic_and_a_storage_nic_of_its_rail():
    m = Machine(P)
    assert m.route_names("s0.dram0", "gpu0") == [
        "s0.dram0.bus", "s0.nic0.pcie<", "s0.nic0.port>", "n0.nic0.port<", "n0.nic0.pcie>",
        "n0.gpu0.pcie<",
    ]  # fmt: skip
    assert m.route_names("gpu9", "s1.dram0")[2:4] == ["n1.nic1.port>", "s1.nic1.port<"]
    assert m.route_names("gpu10", "ssd16")[2:4] == ["n1.nic2.port>", "s0.nic0.port<"]  # 2 mod 2
    assert m.route_latency_s("ssd47", "gpu3") == pytest.approx(2e-6)


def test_a_storage_pool_fetch_alone_takes_latency_plus_bytes_over_the_storage_port() -> None:
    nbytes = 64 * 10**6
    (end,) = finish_times(Machine(P), [("s0.dram0", "gpu0", nbytes)])
    assert end == pytest.approx(2e-6 + nbytes / STORAGE_PORT, rel=1e-9)
    # rails 0 and 1 leave by the server's two NICs: each as fast as alone
    ends = finish_times(Machine(P), [("s0.dram0", "gpu0", nbytes), ("s0.dram0", "gpu1", nbytes)])
    assert ends == pytest.approx([end, end], rel=1e-9)
    # gpu0 and gpu8 are both rail 0: they share s0.nic0's port, 12.375 GB/s each
    ends = finish_times(Machine(P), [("s0.dram0", "gpu0", nbytes), ("s0.dram0", "gpu8", nbytes)])
    assert ends == pytest.approx([2e-6 + 2 * nbytes / STORAGE_PORT] * 2, rel=1e-9)


def test_the_storage_scope_puts_the_pool_on_the_storage_nodes_only() -> None:
    design = get_design("paged-cpu-ssd", {})  # 1 GiB DRAM + 64 GiB SSD an instance
    gpus = ["gpu0", "gpu1", "gpu8"]
    sets = scoped_tiers("storage", design, P, CARD, B, gpus)
    assert sets[0] is sets[1] is sets[2]
    cpu, ssd = sets[0][0]
    assert cpu.devices == ("s0.dram0", "s1.dram0") and ssd.devices == ("ssd16", "ssd32")
    assert cpu.capacity == [int(1.5 * GIB)] * 2  # 3 instances x 1 GiB over two modules
    assert ssd.capacity == [3 * 64 * GIB // 2] * 2
    assert sets[0][1]["ssd16"] == "s0.dram0" and sets[0][1]["ssd47"] == "s1.dram0"
    fleet = scoped_tiers("fleet", design, P, CARD, B, gpus)  # the compute nodes' pool
    assert fleet[0][0][0].devices == ("n0.dram0", "n1.dram0")
    assert fleet[0][0][1].devices == ("ssd0", "ssd8")
    assert level_hits("storage", {"gpu": 1.0, "cpu": 2.0, "ssd": 3.0}) == {
        "gpu": 1.0, "node_local": 0.0, "node_shared": 0.0, "fleet_pool": 5.0}  # fmt: skip


def test_a_storage_pool_larger_than_the_storage_devices_is_refused() -> None:
    gpus = [f"gpu{k}" for k in range(16)]
    fits = get_design("paged-cpu", {"cpu_gib": 64.0})  # 16 x 64 = 1,024 GiB on 2 x 512
    assert len(scoped_tiers("storage", fits, P, CARD, B, gpus)) == 16
    big = get_design("paged-cpu", {"cpu_gib": 64.5})
    with pytest.raises(ScopeError, match="516.0 GiB on s0.dram0, which has 512.0 GiB"):
        scoped_tiers("storage", big, P, CARD, B, gpus)
    with pytest.raises(ScopeError, match="no storage nodes"):
        scoped_tiers("storage", fits, load_profile("fleet-2x-dgx-h100"), CARD, B, gpus)


def test_a_block_stored_on_a_storage_node_is_a_hit_for_another_node() -> None:
    """Two 1,000-token prompts with the same 62 blocks on gpu0 then gpu8 (as in
    test_serving_scopes): the second hits the 60 blocks the first stored, every byte
    of them on the storage nodes: each block's layers half on s0.dram0, half on
    s1.dram0, loaded through the storage NICs; nothing enters a compute node's DRAM."""
    design = get_design("paged-cpu", {"cpu_gib": 1.0})
    gpus = ["gpu0", "gpu8"]
    sets = scoped_tiers("storage", design, P, CARD, B, gpus)
    inst = [Instance(f"r{k}", CARD, design, EngineConfig(gpu_blocks=4000, gpu=g), [], tiers=t)
            for k, (g, t) in enumerate(zip(gpus, sets, strict=True))]  # fmt: skip
    hs = tuple(range(1, 63))
    reqs = [Request(0, 0.0, 0, 0, 1000, 2, hs), Request(1, 1.0, 1, 0, 1000, 2, hs)]
    policy = make_router("round_robin", {}, 2, B, np.random.default_rng(0))
    records, where = run_routed(P, inst, reqs, policy)
    assert where == {0: 0, 1: 1}
    (row,) = [r for r in records["r1"].requests.to_pylist() if r["request_id"] == 1]
    assert (row["hit_blocks_cpu"], row["computed_tokens"]) == (60, 1000 - 60 * 16)
    ops = records["r1"].ops.to_pandas()
    loads = ops[ops["dst"] == "gpu8"]
    loads = loads[loads["src"].str.endswith("dram0")]
    assert set(loads["src"]) == {"s0.dram0", "s1.dram0"}
    assert loads["bytes"].sum() == 60 * 16 * 131_072  # 60 blocks x 16 tokens x 131,072 B
    assert (loads["end_s"] - loads["start_s"] >= 2e-6).all()  # the ports' latency first
    stores = records["r0"].ops.to_pandas()
    stores = stores[stores["tag"] == "store"]
    assert set(stores["dst"]) == {"s0.dram0", "s1.dram0"}
    dev = records["r1"].devices.to_pandas()
    sent = dev[dev["device"].str.match(r"s\d\.nic\d\.port>")]["bytes_read"].sum()
    assert sent == 60 * 16 * 131_072  # every loaded byte left a storage NIC
    assert dataclasses.replace(P.fleet, storage=None).storage_hosts() == []

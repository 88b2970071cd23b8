"""A fleet of nodes on one network: its expansion, routes and transfer times by hand.

The shipped fleet is two dgx-h100 nodes on one leaf switch, one ConnectX-7 per
GPU: NIC port 50 GB/s x rdma 0.99 = 49.5 GB/s per direction, below the GPU's
and the NIC's PCIe 5.0 x16 (63.0 x pcie 0.88 = 55.44 GB/s), so a transfer
between nodes runs at 49.5 GB/s after the NIC-to-NIC latency of 2 us.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hwprofiles import ProfileError, load_profile
from sim.hw.machine import Machine
from sim.serving.execute.online import OnlineOps

MB = 10**6
PORT = 50e9 * 0.99  # NIC port x rdma efficiency, bytes/s


def fleet_file(
    tmp_path: Path,
    nodes: int = 2,
    per_leaf: int = 2,
    oversub: float = 1.0,
    nic_gbps: float = 50.0,
    node: str = "dgx-h100",
    extra: str = "",
) -> Path:
    text = f"""\
name: f
description: "test fleet"
fleet:
  node_profile: {node}
  nodes: {nodes}
  nic: {{model: N, gbps: {nic_gbps}, pcie_gbps: 63.0, latency_us: 2.0}}
  network:
    nodes_per_leaf: {per_leaf}
    uplink_oversubscription: {oversub}
    switch_latency_us: 0.5
efficiency: {{rdma: 0.99}}
{extra}"""
    p = tmp_path / "f.yaml"
    p.write_text(text)
    return p


def finish_times(m: Machine, copies: list[tuple[str, str, int]]) -> list[float]:
    ops = OnlineOps(m, keep_plan=False)
    events = [ops.submit("copy", a, b, nbytes=n)[1] for a, b, n in copies]
    ends: list[float] = []
    for ev in events:
        ev.callbacks.append(lambda _e: ends.append(m.env.now))
    m.env.run()
    return ends


def test_shipped_fleet_expands_two_dgx_h100_nodes():
    p = load_profile("fleet-2x-dgx-h100")
    assert p.fleet is not None and p.fleet.gpus_per_node == 8
    assert p.gpu.count == 16 and len(p.ssd_names) == 16
    assert p.dram_names == ("n0.dram0", "n1.dram0")
    assert p.fleet.node_of("gpu7") == 0 and p.fleet.node_of("gpu8") == 1
    assert p.fleet.nic_of("gpu9") == "n1.nic1"
    # node 1's GPUs hang off node 1's switches, with node 1's names
    link = p.link("n1.gpu2.pcie")
    assert link.between == ("gpu10", "n1.sw1")


def test_gpus_of_one_node_talk_over_nvlink_and_between_nodes_through_their_own_nics():
    m = Machine(load_profile("fleet-2x-dgx-h100"))
    assert m.route_names("gpu0", "gpu1") == ["n0.gpu0.nvlink>", "n0.gpu1.nvlink<"]
    # gpu1 and gpu0 share switch n0.sw0 and so reach both NICs in the same hops:
    # each takes its own (GPUDirect RDMA pairs a GPU with its NIC)
    assert m.route_names("gpu1", "gpu9") == [
        "n0.gpu1.pcie>", "n0.nic1.pcie<", "n0.nic1.port>",
        "n1.nic1.port<", "n1.nic1.pcie>", "n1.gpu1.pcie<",
    ]  # fmt: skip
    assert m.route_latency_s("gpu1", "gpu9") == pytest.approx(2e-6)  # 1 us on each port
    assert m.route_latency_s("gpu0", "gpu1") == 0.0  # no latency inside a machine


def test_one_transfer_between_nodes_takes_bytes_over_the_nic_rate_plus_latency():
    m = Machine(load_profile("fleet-2x-dgx-h100"))
    (end,) = finish_times(m, [("gpu0", "gpu8", 64 * MB)])
    assert end == pytest.approx(2e-6 + 64 * MB / PORT, rel=1e-9)  # 1.295 ms


def test_two_transfers_through_one_oversubscribed_uplink_share_it(tmp_path: Path):
    # one node per leaf, uplink 8 NICs x 50 GB/s / 8 = 50 GB/s (x 0.99): two
    # transfers from different NICs cross it together and get half each
    p = load_profile(fleet_file(tmp_path, per_leaf=1, oversub=8.0))
    assert p.link("leaf0.up").gbps == pytest.approx(50.0)
    m = Machine(p)
    assert "leaf0.up>" in m.route_names("gpu0", "gpu8")
    lat = 1e-6 + 0.5e-6 + 0.5e-6 + 1e-6  # two ports, two uplinks
    assert m.route_latency_s("gpu0", "gpu8") == pytest.approx(lat)
    a, b = finish_times(m, [("gpu0", "gpu8", 64 * MB), ("gpu1", "gpu9", 64 * MB)])
    assert a == b == pytest.approx(lat + 2 * 64 * MB / PORT, rel=1e-9)
    # non-blocking uplinks (400 GB/s): each moves at its own NIC's rate
    m = Machine(load_profile(fleet_file(tmp_path, per_leaf=1, oversub=1.0)))
    a, b = finish_times(m, [("gpu0", "gpu8", 64 * MB), ("gpu1", "gpu9", 64 * MB)])
    assert a == b == pytest.approx(lat + 64 * MB / PORT, rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "extra", "key", "message"),
    [
        ({"nodes": 0}, "", "fleet.nodes", "must be >= 1"),
        ({"nic_gbps": 0}, "", "fleet.nic.gbps", "must be > 0"),
        ({"nic_gbps": -400}, "", "fleet.nic.gbps", "must be > 0"),
        ({"oversub": 0.5}, "", "fleet.network.uplink_oversubscription", "must be >= 1"),
        ({"node": "dgx-h1000"}, "", "fleet.node_profile", "unknown hardware profile 'dgx-h1000'"),
        ({}, "assumptions: []\nextra: 1\n", "extra", "unknown key"),
    ],
)
def test_bad_fleet_is_one_line_naming_the_key(tmp_path: Path, kwargs, extra, key, message):
    with pytest.raises(ProfileError) as err:
        load_profile(fleet_file(tmp_path, extra=extra, **kwargs))
    text = str(err.value)
    assert "\n" not in text and f": {key}: " in text and message in text, text

"""A fleet of identical nodes on one network, expanded into one profile.

A fleet file names a node profile (an existing machine), how many nodes, the
RDMA NIC every GPU has and the network between them::

    name: fleet-2x-dgx-h100
    description: ...
    fleet:
      node_profile: dgx-h100
      nodes: 2
      nic: {model: ..., gbps: 50.0, pcie_gbps: 63.0, latency_us: 2.0}
      network: {nodes_per_leaf: 1, uplink_oversubscription: 1.0, switch_latency_us: 0.5}

:func:`expand` turns it into one :class:`~hwprofiles.schema.HardwareProfile`
whose topology holds every node's links and the network's, so the simulator
builds ONE flow network (:class:`sim.hw.machine.Machine`) in which PCIe, NVLink
and network links are shared by the same max-min fairness:

* node ``n``'s GPUs are ``gpu{n*G+k}`` (G GPUs a node), its SSDs ``ssd{n*S+j}``;
  its switches, DRAM modules and links keep their names under ``n{n}.``
  (``n1.sw0``, ``n1.dram0``, ``n1.gpu0.pcie`` is the link of node 1's first GPU,
  ``gpu8``);
* NIC ``n{n}.nic{k}`` (GPUDirect RDMA: one per GPU, on the PCIe switch its GPU
  hangs off, as NCCL pairs a GPU with its nearest NIC) has a PCIe link
  ``n{n}.nic{k}.pcie`` to that switch (kind ``pcie``) and a port link
  ``n{n}.nic{k}.port`` to its node's leaf switch (kind ``rdma``, half the NIC's
  latency each);
* leaf ``leaf{l}`` takes ``nodes_per_leaf`` consecutive nodes; with more than
  one leaf each has an uplink ``leaf{l}.up`` to ``spine`` of the leaf's NIC
  rates over ``uplink_oversubscription`` (kind ``rdma``, ``switch_latency_us``);
* storage nodes (optional, ``fleet.storage``: a storage-server profile of
  ``hwprofiles/storage/``, how many, their NICs' rates) follow the compute
  nodes: storage node ``s``'s switches, DRAM modules and links are prefixed
  ``s{s}.`` (``s0.dram0``, ``s0.rc0``, ``s0.dram0.bus``), its SSDs numbered after
  every compute node's (``ssd{N*S + s*T + j}``, T SSDs a server: the names
  ``ssdK`` stay dense, as the rest of kvtier assumes), its NIC ``k``
  ``s{s}.nic{k}`` has a PCIe link to the switch the server file names for it
  and a port to a leaf, like a compute node's; no GPUs.  Leaves take
  ``nodes_per_leaf`` consecutive hosts, compute nodes first, then storage nodes,
  and an uplink carries its members' NIC rates over ``uplink_oversubscription``;
* the nodes' host CPUs are pooled as one resource of all their cores (a
  limitation: host-side I/O work is not placed per node), and the profile's
  software costs and efficiency factors are the node's, but for those the fleet
  file's ``efficiency:`` names (its network's ``rdma``).

Bad input is one line naming the file, line and key (:class:`ProfileError`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwprofiles.schema import (
    Assumption,
    CpuSpec,
    DramModule,
    EfficiencySpec,
    FleetSpec,
    GpuSpec,
    HardwareProfile,
    LinkSpec,
    StorageServer,
    Topology,
)


@dataclass(frozen=True)
class FleetFile:
    """What a fleet file holds (the loader checks it like a profile)."""

    name: str
    description: str
    fleet: FleetSpec
    # factors that differ from the node profile's (the network's ``rdma``, ...)
    efficiency: dict = dataclasses.field(default_factory=dict)
    assumptions: tuple[Assumption, ...] = ()


def _nic_switch(node: HardwareProfile, k: int) -> str | None:
    """The switch that GPU ``gpu{k}`` of ``node`` reaches over its PCIe link."""
    gpu = f"gpu{k}"
    for link in node.topology.links:
        if link.kind == "pcie" and gpu in link.between:
            other = link.between[1] if link.between[0] == gpu else link.between[0]
            if other in node.topology.switches:
                return other
    return None


def _nic_links(f: FleetSpec, host: int, k: int, switch: str) -> list[LinkSpec]:
    """NIC ``k`` of host ``host`` (a compute node, or a storage node after them):
    its PCIe link to ``switch`` (its GPU's, or the one the storage server names)
    and its port to its host's leaf (half the NIC's latency each way)."""
    nic = f.host_nic(host, k)
    spec = f.nic if host < f.nodes else f.storage.nic  # type: ignore[union-attr]
    leaf = f"leaf{host // f.network.nodes_per_leaf}"
    return [
        LinkSpec(f"{nic}.pcie", (nic, switch), spec.pcie_gbps, "pcie"),
        LinkSpec(f"{nic}.port", (nic, leaf), spec.gbps, "rdma", latency_us=spec.latency_us / 2),
    ]


def _network(f: FleetSpec, G: int) -> tuple[list[str], list[LinkSpec]]:
    """The leaves, the spine where there is more than one leaf, and each leaf's
    uplink: its NICs' rates over ``uplink_oversubscription``."""
    per = f.network.nodes_per_leaf
    leaves = math.ceil(f.hosts / per)
    switches, links = [f"leaf{i}" for i in range(leaves)], []
    if leaves > 1:
        switches.append("spine")
        for i in range(leaves):
            members = range(i * per, min((i + 1) * per, f.hosts))
            compute = sum(1 for h in members if h < f.nodes)
            nics = compute * G * f.nic.gbps
            if f.storage is not None:
                nics += (len(members) - compute) * f.storage.nics_per_node * f.storage.nic.gbps
            up = nics / f.network.uplink_oversubscription
            links.append(LinkSpec(f"leaf{i}.up", (f"leaf{i}", "spine"), up, "rdma",
                                  latency_us=f.network.switch_latency_us))  # fmt: skip
    return switches, links


_NIC_LINK = re.compile(r"([ns])(\d+)\.nic(\d+)\.(pcie|port)$")
_NETWORK_SWITCH = re.compile(r"leaf\d+$|spine$")


def relink(p: HardwareProfile) -> HardwareProfile:
    """The expanded fleet ``p`` with its NIC links, leaves, spine and uplinks
    rebuilt from ``p.fleet`` (after one of its numbers changed,
    :func:`hwprofiles.assume.with_value`), by the same rules :func:`expand` uses,
    so the result equals the expansion of a fleet file holding the new number.
    Every other link, the nodes' own, keeps its place."""
    f = p.fleet
    assert f is not None
    links: list[LinkSpec] = []
    for link in p.topology.links:
        m = _NIC_LINK.match(link.name)
        if link.name.startswith("leaf") and link.name.endswith(".up"):
            continue
        if m is None:
            links.append(link)
        elif m[4] == "pcie":  # one pair a NIC: rebuilt at its pcie link, its port follows
            host = int(m[2]) + (f.nodes if m[1] == "s" else 0)
            links += _nic_links(f, host, int(m[3]), link.between[1])
    net_switches, net_links = _network(f, f.gpus_per_node)
    switches = [s for s in p.topology.switches if not _NETWORK_SWITCH.match(s)]
    topology = Topology((*switches, *net_switches), (*links, *net_links))
    return dataclasses.replace(p, topology=topology)


STORAGE = "storage."  # an expanded fleet's key path into its storage-server file's numbers


def replicas(p: HardwareProfile, path: str) -> list[str]:
    """The key paths of expanded fleet ``p`` that one number of a file it was built
    from names: a node profile's (``ssds[0].read_latency_us``, ``dram[0].gbps``,
    ``topology.links[3].gbps``: node 0's entry, and every other node's copy of it) or,
    under :data:`STORAGE`, the storage server's (``storage.ssds[0].read_latency_us``:
    every storage node's copy).  A number shared by the whole fleet
    (``efficiency.*``, ``software.*``, ``fleet.*``) is its own one path; so is every
    path of a profile that is no fleet.  An index beyond the file's own entries is
    returned as it is (:func:`hwprofiles.assume.resolve` refuses what it cannot name)."""
    f = p.fleet
    storage = path.startswith(STORAGE)
    if f is None or (not storage and not path.startswith(("ssds[", "dram[", "topology.links["))):
        return [path]
    rest = path.removeprefix(STORAGE) if storage else path
    m = re.match(r"(ssds|dram|topology\.links)\[(\d+)\](.*)$", rest)
    if m is None or (storage and f.storage is None):
        return [path]
    field, i, tail = m[1], int(m[2]), m[3]
    if field == "ssds":
        per = _groups_per_host(p)
        if storage:
            first, hosts, n = f.nodes * per[0], f.storage_nodes, per[1]
        else:
            first, hosts, n = 0, f.nodes, per[0]
        if i >= n:
            return [path]
        return [f"ssds[{first + h * n + i}]{tail}" for h in range(hosts)]
    items = p.dram if field == "dram" else p.topology.links
    mark = "s" if storage else "n"
    own = [
        (k, x.name) for k, x in enumerate(items)
        if x.name.startswith(f"{mark}0.") and not _NIC_LINK.match(x.name)
    ]  # fmt: skip
    if i >= len(own):
        return [path]
    local = own[i][1].removeprefix(f"{mark}0.")
    hosts = f.storage_nodes if storage else f.nodes
    at = {x.name: k for k, x in enumerate(items)}
    return [f"{field}[{at[f'{mark}{h}.{local}']}]{tail}" for h in range(hosts)]


def _groups_per_host(p: HardwareProfile) -> tuple[int, int]:
    """(SSD groups a compute node holds, groups a storage node holds) of expanded fleet
    ``p``: the groups whose SSDs add up to node 0's, then to storage node 0's."""
    f = p.fleet
    assert f is not None
    out, start = [], 0
    for want in (f.ssds_per_node, f.storage.ssds_per_node if f.storage else 0):
        n, have = 0, 0
        while have < want:
            have += p.ssds[start + n].count
            n += 1
        out.append(n)
        start += n * f.nodes  # the storage nodes' groups follow every compute node's
    return out[0], out[1]


def _storage_nodes(
    f: FleetSpec, server: StorageServer, first_ssd: int
) -> tuple[list[str], list[LinkSpec], list[DramModule]]:
    """The switches, links (the server's and its NICs') and DRAM modules of
    ``f``'s storage nodes, each a copy of ``server`` renamed (module docstring)."""
    T = len(server.ssd_names)
    switches: list[str] = []
    links: list[LinkSpec] = []
    drams: list[DramModule] = []
    for s in range(f.storage_nodes):
        host, pre = f.nodes + s, f"s{s}."
        local = {f"ssd{j}": f"ssd{first_ssd + s * T + j}" for j in range(T)}
        local.update({x: pre + x for x in (*server.dram_names, *server.topology.switches)})
        switches += [pre + x for x in server.topology.switches]
        drams += [dataclasses.replace(m, name=pre + m.name) for m in server.dram]
        for link in server.topology.links:
            a, b = link.between
            links.append(dataclasses.replace(link, name=pre + link.name,
                                             between=(local[a], local[b])))  # fmt: skip
        for k, sw in enumerate(server.nics):
            switches.append(f.host_nic(host, k))
            links += _nic_links(f, host, k, local[sw])
    return switches, links, drams


def _check_storage(f: FleetSpec, where: Any) -> None:
    if f.storage is not None and f.storage.nodes < 1:
        raise where.error("fleet.storage.nodes", f"must be >= 1, got {f.storage.nodes}")


def expand(
    ff: FleetFile, node: HardwareProfile, where: Any, path: Path,
    server: StorageServer | None = None,
) -> HardwareProfile:  # fmt: skip
    """The fleet ``ff`` of nodes ``node`` (and storage nodes ``server``, where
    ``ff`` has a ``storage`` block) as one profile (module docstring)."""
    f = ff.fleet
    _check_storage(f, where)
    if node.fleet is not None:
        raise where.error("fleet.node_profile", f"'{f.node_profile}' is a fleet, not a node")
    if f.nodes < 1:
        raise where.error("fleet.nodes", f"must be >= 1, got {f.nodes}")
    if f.network.nodes_per_leaf < 1:
        raise where.error(
            "fleet.network.nodes_per_leaf", f"must be >= 1, got {f.network.nodes_per_leaf}"
        )
    if f.network.uplink_oversubscription < 1:
        raise where.error(
            "fleet.network.uplink_oversubscription",
            f"must be >= 1 (1 = non-blocking), got {f.network.uplink_oversubscription:g}",
        )
    known = {x.name for x in dataclasses.fields(EfficiencySpec)}
    for key, value in ff.efficiency.items():
        if key not in known:
            raise where.error(
                f"efficiency.{key}", f"unknown factor (one of: {', '.join(sorted(known))})"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise where.error(f"efficiency.{key}", f"must be in (0, 1], got {value!r}")
    G, S = node.gpu.count, len(node.ssd_names)
    f = dataclasses.replace(f, gpus_per_node=G, ssds_per_node=S)
    if f.storage is not None and server is not None:
        f = dataclasses.replace(
            f,
            storage=dataclasses.replace(
                f.storage, nics_per_node=len(server.nics), ssds_per_node=len(server.ssd_names)
            ),
        )
    sw_of = {}
    for k in range(G):
        sw = _nic_switch(node, k)
        if sw is None:
            raise where.error(
                "fleet.node_profile",
                f"gpu{k} of '{node.name}' has no PCIe link to a switch for its NIC",
            )
        sw_of[k] = sw
    switches: list[str] = []
    links: list[LinkSpec] = []
    drams: list[DramModule] = []
    for n in range(f.nodes):
        local = {f"gpu{k}": f"gpu{n * G + k}" for k in range(G)}
        local.update({f"ssd{j}": f"ssd{n * S + j}" for j in range(S)})
        local.update({x: f"n{n}.{x}" for x in (*node.dram_names, *node.topology.switches)})
        switches += [f"n{n}.{s}" for s in node.topology.switches]
        drams += [dataclasses.replace(m, name=f"n{n}.{m.name}") for m in node.dram]
        for link in node.topology.links:
            a, b = link.between
            links.append(dataclasses.replace(link, name=f"n{n}.{link.name}",
                                             between=(local[a], local[b])))  # fmt: skip
        for k in range(G):
            nic = f"n{n}.nic{k}"
            switches.append(nic)
            links += _nic_links(f, n, k, local[sw_of[k]])
    ssds = node.ssds * f.nodes
    if server is not None:
        s_switches, s_links, s_drams = _storage_nodes(f, server, f.nodes * S)
        switches, links, drams = switches + s_switches, links + s_links, drams + s_drams
        ssds += server.ssds * f.storage_nodes
    net_switches, net_links = _network(f, G)
    switches += net_switches
    links += net_links
    cpu: CpuSpec = dataclasses.replace(node.cpu, cores=node.cpu.cores * f.nodes)
    gpu: GpuSpec = dataclasses.replace(node.gpu, count=G * f.nodes)
    return HardwareProfile(
        name=ff.name,
        description=ff.description,
        gpu=gpu,
        cpu=cpu,
        dram=tuple(drams),
        ssds=ssds,
        software=node.software,
        topology=Topology(tuple(switches), tuple(links)),
        efficiency=dataclasses.replace(
            node.efficiency, **{k: float(v) for k, v in ff.efficiency.items()}
        ),
        fleet=f,
        assumptions=node.assumptions + ff.assumptions + _server_assumptions(server),
        source_file=str(path),
    )


def _server_assumptions(server: StorageServer | None) -> tuple[Assumption, ...]:
    """A storage server file's assumptions, in an expanded fleet: each under
    :data:`STORAGE` (``storage.ssds[0].read_latency_us``), varied on every storage
    node at once (:func:`replicas`)."""
    if server is None:
        return ()
    return tuple(dataclasses.replace(a, field=STORAGE + a.field) for a in server.assumptions)

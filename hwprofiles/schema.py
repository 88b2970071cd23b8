"""Frozen dataclasses describing a machine: the hardware-profile contract.

Field names carry their units (``read_gbps`` is 10^9 bytes/s, ``latency_us`` is
microseconds, ``capacity_gib`` is 2^30 bytes).  Profiles are pure data: no
method here models behaviour; the simulator turns a profile into resources.

Node names used by the topology and by transfer plans are fixed by the
profile: GPUs are ``gpu0..gpu{n-1}``, SSDs ``ssd0..ssd{n-1}`` (numbered across
SSD groups in file order), DRAM modules carry the name given in the file, and
switches / root complexes are listed under ``topology.switches``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuSpec:
    """One kind of GPU, ``count`` of them, named gpu0..gpu{count-1}."""

    model: str
    count: int
    hbm_capacity_gib: float
    hbm_gbps: float
    bf16_tflops: float


@dataclass(frozen=True)
class CpuSpec:
    """Host CPU: its cores, shared by the I/O software path and host compute.

    ``core_gflops``: one core's peak FP32 rate in 10^9 FLOP/s (vector FMA
    units x lanes x 2 x clock).  ``core_mem_gbps``: the DRAM read bandwidth
    one core sustains alone (bounded by its outstanding cache misses, far
    below the sockets' total).  A ``cpu`` compute op on ``n`` threads runs at
    most ``n x core_gflops`` and reads at most ``min(n x core_mem_gbps, DRAM
    total)`` (:meth:`sim.hw.machine.Machine.cpu_compute_seconds`).
    """

    model: str
    cores: int
    core_gflops: float
    core_mem_gbps: float


@dataclass(frozen=True)
class DramModule:
    """A host memory module / channel group attached to a root complex.

    ``gbps`` is the module's total bandwidth, shared by reads and writes.
    """

    name: str
    capacity_gib: float
    gbps: float


@dataclass(frozen=True)
class SsdGroup:
    """``count`` identical NVMe SSDs.

    ``*_latency_us`` is the device's unloaded 4 KiB access latency (QD1);
    ``max_queue_depth`` is the queue depth beyond which throughput no longer
    grows (the device's internal parallelism, from its datasheet QD figures).
    ``max_io_kib`` is the largest single I/O the host sends the device: the
    smaller of the NVMe MDTS (Maximum Data Transfer Size) and the kernel's
    ``max_sectors_kb`` cap.  A byte range longer than this is issued as
    ``ceil(length / max_io)`` I/Os (the plan's ``io_bytes``), so a contiguous
    cluster read costs that many I/Os, not one per entry.
    """

    model: str
    count: int
    capacity_gib: float
    read_gbps: float
    write_gbps: float
    read_iops: float
    write_iops: float
    read_latency_us: float
    write_latency_us: float
    max_queue_depth: int
    max_io_kib: int


@dataclass(frozen=True)
class SoftwareSpec:
    """CPU costs of the I/O software paths, per I/O and per system call.

    ``kernel_fs_per_io_us``: filesystem + block layer cost of one read/write
    through the kernel (pread/pwrite on a file).  ``io_uring_per_io_us``: the
    same I/O submitted through io_uring (block layer, no per-I/O syscall).
    ``passthrough_per_io_us``: user-space NVMe (SPDK-style) submission and
    completion.  ``syscall_us``: one system call (io_uring_enter or pread).
    ``gds_per_io_us``: cuFile per-I/O cost.  ``gpudirect``: whether SSD->GPU
    reads may bypass host memory (GPUDirect Storage).  ``io_uring_per_op_us``: what
    the issuing thread spends once per io_uring op, beside its I/Os and batches
    (optional, 0 in the shipped profiles, which cite no such figure; the real
    backend's model of its own replay loop sets it: :func:`real.validate.engine_costs`).
    ``cuda_copy_per_call_us``: what one CUDA host-to-device copy call (a
    ``cudaMemcpyAsync`` or a gather kernel's launch) costs before and beside its
    DMA, paid per call by plan copies with ``io_path: cuda_copy`` (optional, 0 in
    profiles that cite no figure; no other op uses it).
    ``io_submit_cores``: the threads, one core each, that submit and reap one SSD
    read or write op's I/Os; the executor caps the op's software-path CPU flow at
    this many cores (optional, 1: one io_uring ring per SSD driven by one thread,
    :mod:`sim.executor`, "Who issues I/O"; an assumption where a profile ranges it).
    """

    kernel_fs_per_io_us: float
    io_uring_per_io_us: float
    passthrough_per_io_us: float
    syscall_us: float
    gds_per_io_us: float
    gpudirect: bool
    io_uring_per_op_us: float = 0.0
    cuda_copy_per_call_us: float = 0.0
    io_submit_cores: int = 1


@dataclass(frozen=True)
class LinkSpec:
    """A link between two nodes.

    ``gbps`` is the capacity per direction for ``duplex: full`` links (PCIe,
    NVLink, a network port) and the shared capacity of both directions for
    ``duplex: half`` (a memory bus).  ``kind`` is one of :data:`LINK_KINDS`; it
    picks the link's achievable-efficiency factor in :class:`EfficiencySpec`.
    ``latency_us``: the time a copy's first byte takes to cross the link (a NIC
    port, a switch hop); a copy waits the sum over its route before its bytes
    flow (0 for the links inside a machine, whose latency no profile cites).
    """

    name: str
    between: tuple[str, str]
    gbps: float
    kind: str
    duplex: str = "full"
    latency_us: float = 0.0


@dataclass(frozen=True)
class Topology:
    switches: tuple[str, ...]
    links: tuple[LinkSpec, ...]


def _fraction(default: float) -> Any:
    """A field holding an achievable fraction of a peak: the loader checks (0, 1]."""
    return field(default=default, metadata={"fraction": True})


@dataclass(frozen=True)
class EfficiencySpec:
    """Achievable fraction of each datasheet peak, one factor per resource kind.

    The simulator multiplies every peak by its factor in one place
    (:class:`sim.hw.machine.Machine`), so every design on a profile sees the
    same achievable capacities.  ``pcie``, ``nvlink``, ``nvlink_c2c`` and
    ``membus`` apply to the links of that ``kind``; ``hbm`` to ``gpu.hbm_gbps`` (weights and KV
    streamed by kernels); ``tensor`` to ``gpu.bf16_tflops``; ``ssd`` to the SSD
    bandwidth and IOPS figures.  The defaults and their sources:

    * ``pcie`` 0.88: packet overhead at a 256 B Max Payload Size (the usual
      server setting) is 256 / (256 + 24) = 0.914, 24 B = 4 B framing token
      with sequence number + 16 B 4-DW TLP header (64-bit address) + 4 B LCRC;
      ACK and flow-control DLLPs take ~3% more (PCIe Base Spec 4.0 §2-3),
      leaving ~0.88.  Measured: H100 PCIe 5.0 x16 host->device 57 GB/s of 63
      (0.90, NVIDIA/nvbandwidth issue #6), device->host 52.8 (0.84, issue #24);
      RTX A6000 PCIe 4.0 x16 peer copy 26.3 of 31.5 (0.84, issue #50); a
      PM9A3 delivers its 6.9 GB/s through a PCIe 4.0 x4 link of 7.88 (0.876).
    * ``nvlink`` 0.85: assumption, same flit/packet overhead class as PCIe;
      NCCL busbw on NVLink4 without in-switch reduction is reported at
      ~360-390 GB/s of 450 per direction (0.80-0.87).
    * ``nvlink_c2c`` 0.77 (links of kind ``nvlink-c2c``): GH200 NVLink-C2C
      host->device copy-engine memcpy 346 GB/s of 450 per direction
      (NVIDIA/nvbandwidth issue #23).
    * ``membus`` 0.80: STREAM triad sustains ~75-85% of the DDR peak on
      recent Xeons (J. D. McCalpin, STREAM results, cs.virginia.edu/stream).
    * ``hbm`` 0.90: BabelStream / STREAM triad on A100 and H100 reaches ~90%
      of the HBM datasheet figure (UoB-HPC BabelStream results; e.g. ~3.0 of
      3.35 TB/s on H100 SXM).
    * ``tensor`` 0.75: assumption: large BF16 GEMMs in cuBLAS reach ~70-80%
      of the dense tensor peak on Ampere/Hopper; decode kernels are mostly
      HBM-bound, so this factor matters only where the roofline is compute-bound.
    * ``ssd`` 1.0: the datasheet sequential and random figures are already
      measured (at high queue depth), i.e. achievable, not signalling peaks.
    * ``rdma`` 0.99 (links of kind ``rdma``: a NIC port, a leaf uplink): the
      InfiniBand packet overhead of an RDMA write at the 4,096 B MTU is a
      26 B LRH + BTH + ICRC + VCRC per packet (8 + 12 + 4 + 2 B, InfiniBand
      Architecture Specification vol. 1, ch. 5-7), 4096 / 4122 = 0.994; the
      NDR "400 Gb/s" is already the data rate after encoding.  An upper bound:
      flow control and the 16 B RETH of each message's first packet take a
      little more (assumption; range in the fleet profiles).
    """

    pcie: float = _fraction(0.88)
    nvlink: float = _fraction(0.85)
    nvlink_c2c: float = _fraction(0.77)
    membus: float = _fraction(0.80)
    hbm: float = _fraction(0.90)
    tensor: float = _fraction(0.75)
    ssd: float = _fraction(1.0)
    rdma: float = _fraction(0.99)


# link kinds a profile may use: each has its factor in EfficiencySpec, the field
# named like the kind with '-' as '_' (see efficiency_of)
LINK_KINDS = ("pcie", "nvlink", "nvlink-c2c", "membus", "rdma")


def efficiency_of(eff: EfficiencySpec, kind: str) -> float:
    """The factor of link kind ``kind`` (one of :data:`LINK_KINDS`)."""
    return float(getattr(eff, kind.replace("-", "_")))


@dataclass(frozen=True)
class Assumption:
    """A profile number that is an assumption, with the range it could plausibly
    take: ``field`` is its key path in the profile (``efficiency.tensor``,
    ``cpu.core_mem_gbps``, ``ssds[0].read_latency_us``), whose value stays where it
    is written; ``low`` <= that value <= ``high``; ``why`` gives the reason for the
    range (a source where one exists).  ``kvtier sim --sensitivity`` reruns a
    scenario with the field at each end (:mod:`sim.sensitivity`)."""

    field: str
    low: float
    high: float
    why: str


@dataclass(frozen=True)
class NicSpec:
    """The RDMA NIC each GPU of a fleet node has (GPUDirect RDMA: its PCIe link
    hangs off the GPU's own PCIe switch).  ``gbps``: the port's data rate per
    direction; ``pcie_gbps``: its host link per direction; ``latency_us``: one
    NIC-to-NIC crossing through one leaf switch (half on each NIC's port link)."""

    model: str
    gbps: float
    pcie_gbps: float
    latency_us: float


@dataclass(frozen=True)
class NetworkSpec:
    """The fabric between a fleet's nodes: every NIC to its node's leaf switch
    (``nodes_per_leaf`` nodes a leaf); with more than one leaf, each leaf's uplink
    to one spine carries its NICs' total rate over ``uplink_oversubscription``
    (1 = non-blocking); ``switch_latency_us`` is added per uplink crossed."""

    nodes_per_leaf: int
    uplink_oversubscription: float = field(default=1.0, metadata={"positive": True})
    switch_latency_us: float = 0.0


@dataclass(frozen=True)
class StorageSpec:
    """``nodes`` storage servers of the storage-server profile ``node_profile``
    (``hwprofiles/storage/<name>.yaml``, :class:`StorageServer`) on the fleet's
    network, each NIC of the server a port of ``nic``'s rates.  The loader expands
    them after the compute nodes (:mod:`hwprofiles.fleet`): storage node ``s``'s
    switches, DRAM modules and links are prefixed ``s{s}.``, its NICs
    ``s{s}.nic{k}``, its SSDs numbered after the compute nodes' ones."""

    node_profile: str
    nodes: int
    nic: NicSpec
    nics_per_node: int = 0  # the server's NICs (set by the loader)
    ssds_per_node: int = 0  # the server's SSDs (set by the loader)


@dataclass(frozen=True)
class FleetSpec:
    """``nodes`` machines of the profile ``node_profile``, one network, and the
    optional ``storage`` servers on it.  The loader expands them into one profile
    (:mod:`hwprofiles.fleet`): node ``n``'s GPUs are ``gpu{n*G}..gpu{n*G+G-1}``
    (G = ``gpus_per_node``), its SSDs likewise (S = ``ssds_per_node``), its
    switches, DRAM modules and links prefixed ``n{n}.``.

    A *host* is a compute node or a storage node: hosts ``0..nodes-1`` are the
    compute nodes, host ``nodes + s`` is storage node ``s`` (:meth:`host_of`)."""

    node_profile: str
    nodes: int
    nic: NicSpec
    network: NetworkSpec
    storage: StorageSpec | None = None
    gpus_per_node: int = 0  # the node profile's GPUs (set by the loader)
    ssds_per_node: int = 0  # the node profile's SSDs (set by the loader)

    def node_of(self, gpu: str) -> int:
        """The node GPU ``gpuK`` sits in."""
        return int(gpu.removeprefix("gpu")) // self.gpus_per_node

    def nic_of(self, gpu: str) -> str:
        """The NIC GPU ``gpuK`` sends and receives through: its own (``n{n}.nic{k}``)."""
        k = int(gpu.removeprefix("gpu"))
        return f"n{k // self.gpus_per_node}.nic{k % self.gpus_per_node}"

    @property
    def storage_nodes(self) -> int:
        return self.storage.nodes if self.storage is not None else 0

    @property
    def hosts(self) -> int:
        """Compute nodes and storage nodes."""
        return self.nodes + self.storage_nodes

    def storage_hosts(self) -> list[int]:
        """The host numbers of the storage nodes (none without ``storage``)."""
        return list(range(self.nodes, self.hosts))

    def host_prefix(self, host: int) -> str:
        """The prefix of a host's switches, DRAM modules and links: ``n{n}.`` or ``s{s}.``."""
        return f"n{host}." if host < self.nodes else f"s{host - self.nodes}."

    def host_ssds(self, host: int) -> range:
        """The indices K of host ``host``'s SSDs ``ssdK``."""
        S = self.ssds_per_node
        if host < self.nodes:
            return range(host * S, (host + 1) * S)
        assert self.storage is not None
        T, first = self.storage.ssds_per_node, self.nodes * S
        return range(first + (host - self.nodes) * T, first + (host - self.nodes + 1) * T)

    def host_of(self, name: str) -> int | None:
        """The host a GPU (``gpuK``), SSD (``ssdK``) or DRAM module (``n1.dram0``,
        ``s0.dram0``) sits in; None for any other name (a switch, a NIC)."""
        if name.startswith("gpu"):
            return self.node_of(name)
        if name.startswith("ssd") and name[3:].isdigit():
            k, first = int(name[3:]), self.nodes * self.ssds_per_node
            if k < first:
                return k // self.ssds_per_node
            assert self.storage is not None
            return self.nodes + (k - first) // self.storage.ssds_per_node
        head, dot, _ = name.partition(".")
        if dot and head[:1] in "ns" and head[1:].isdigit() and ".nic" not in name:
            return int(head[1:]) + (self.nodes if head[0] == "s" else 0)
        return None

    def host_nic(self, host: int, k: int) -> str:
        """NIC ``k`` of a host: ``n{n}.nic{k}``, or a storage node's ``s{s}.nic{k mod M}``
        (its M NICs taking the compute nodes' rails in turn)."""
        if host < self.nodes:
            return f"n{host}.nic{k}"
        assert self.storage is not None
        return f"s{host - self.nodes}.nic{k % self.storage.nics_per_node}"


@dataclass(frozen=True)
class StorageServer:
    """A storage server of a fleet (``hwprofiles/storage/<name>.yaml``): DRAM
    modules and SSDs behind its own switches, no GPUs.  ``nics`` names, one entry a
    NIC, the switch that NIC's PCIe link hangs off (the NICs' rates are the fleet
    file's ``fleet.storage.nic``).  Its names are local (``dram0``, ``ssd0``,
    ``rc0``); :mod:`hwprofiles.fleet` renames them per storage node.  The server's
    CPU is not modelled (the fleet's host CPUs are the compute nodes'), nor its
    own software path: the fleet's software costs and efficiency factors apply."""

    name: str
    description: str
    dram: tuple[DramModule, ...]
    ssds: tuple[SsdGroup, ...]
    nics: tuple[str, ...]
    topology: Topology
    assumptions: tuple[Assumption, ...] = field(default=(), compare=False)
    source_file: str = field(default="", compare=False)

    gpu_names: tuple[str, ...] = field(default=(), init=False, compare=False)

    @property
    def ssd_names(self) -> tuple[str, ...]:
        return tuple(f"ssd{i}" for i in range(sum(g.count for g in self.ssds)))

    @property
    def dram_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.dram)

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.ssd_names + self.dram_names + self.topology.switches


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpu: GpuSpec
    cpu: CpuSpec
    dram: tuple[DramModule, ...]
    ssds: tuple[SsdGroup, ...]
    software: SoftwareSpec
    topology: Topology
    efficiency: EfficiencySpec = field(default_factory=EfficiencySpec)
    # a fleet of nodes on one network (None: one machine); set by hwprofiles.fleet
    fleet: FleetSpec | None = None
    # ranges of the numbers above that are assumptions: they change no simulated figure
    assumptions: tuple[Assumption, ...] = field(default=(), compare=False)
    source_file: str = field(default="", compare=False)

    # ---- names -------------------------------------------------------------
    @property
    def gpu_names(self) -> tuple[str, ...]:
        return tuple(f"gpu{i}" for i in range(self.gpu.count))

    @property
    def ssd_names(self) -> tuple[str, ...]:
        n = sum(g.count for g in self.ssds)
        return tuple(f"ssd{i}" for i in range(n))

    @property
    def dram_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.dram)

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.gpu_names + self.ssd_names + self.dram_names + self.topology.switches

    def ssd(self, name: str) -> SsdGroup:
        """The SSD group that device ``name`` (``ssdK``) belongs to."""
        idx = int(name.removeprefix("ssd"))
        for group in self.ssds:
            if idx < group.count:
                return group
            idx -= group.count
        raise KeyError(name)

    def dram_module(self, name: str) -> DramModule:
        for m in self.dram:
            if m.name == name:
                return m
        raise KeyError(name)

    def link(self, name: str) -> LinkSpec:
        for link in self.topology.links:
            if link.name == name:
                return link
        raise KeyError(name)

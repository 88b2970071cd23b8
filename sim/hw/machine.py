"""Turn a hardware profile into flow-network resources and routes.

Resources (all shared by max-min fairness in :class:`FlowNetwork`):

* every link: a full-duplex link is two resources, one per direction
  (``gpu0.pcie>`` is a->b as written in the profile, ``gpu0.pcie<`` is b->a),
  each of capacity ``gbps``; a half-duplex link (a memory bus) is one resource
  shared by both directions;
* every SSD: one time-shared resource of capacity 1.  A flow of I/O size
  ``s`` uses the fraction ``rate / min(bandwidth, IOPS * s)`` of it, so a
  device serving a mix of small and large, read and write I/Os can never
  exceed its bandwidth or its IOPS in any combination (reads and writes use
  their own figures);
* the host CPU (network ``cpu_net``): capacity ``cores`` core-seconds per
  second, for the software cost of I/O submission and completion and for
  ``cpu`` compute ops (a design scoring on the host), which therefore contend
  for the same cores;
* every GPU's compute engine (network ``gpu_net``): capacity 1 GPU-second
  per second, so concurrent kernels share the GPU.

A fleet profile (:mod:`hwprofiles.fleet`) is one machine to this module: its
nodes' PCIe and NVLink links and the network's NIC ports and switch uplinks are
resources of the same flow network.  A copy between GPUs of two nodes is routed
through each GPU's own NIC (:meth:`Machine.route`), and waits the ``latency_us``
of the links it crosses before its bytes flow (:meth:`Machine.route_latency_s`;
0 inside a machine).

The third SSD regime, the queue-depth bound ``qd * s / latency`` (Little's
law: ``qd`` I/Os in flight, each in flight for ``latency``), is per flow: it is
a property of how many I/Os *that* stream keeps in flight, so it becomes the
flow's own rate cap.  For one op of ``n`` I/Os the first wave of ``qd`` is the
access latency itself (the executor's fill phase), so only the ``n - qd``
I/Os after it are queue-bound (:meth:`SsdRates.op_cap`).

Achievable, not datasheet, capacities: this module is the one place where the
profile's :class:`~hwprofiles.schema.EfficiencySpec` factors are applied (a
link gets its ``kind``'s factor, GPU kernels the ``hbm`` and ``tensor``
factors, SSDs the ``ssd`` factor), so every design simulated on a profile
sees the same capacities.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import simpy

from hwprofiles import HardwareProfile, LinkSpec, SsdGroup
from hwprofiles.schema import efficiency_of
from kvtier.contracts.units import gbps, us
from sim.engine.flownet import FlowNetwork
from sim.hw.iometer import IoMeter
from sim.models.cost import LayerCost, roofline_seconds

# the page cache's unit: the x86-64 base page (PAGE_SIZE, arch/x86/include/asm/page_types.h)
PAGE_BYTES = 4096


class RouteError(ValueError):
    """No path between two nodes, or a node the profile does not have."""


@dataclass(frozen=True)
class SsdRates:
    """Per-flow figures of one SSD access pattern, in bytes/s and seconds."""

    device_rate: float  # min(bandwidth, IOPS * size): the device-wide bound
    queue_rate: float  # qd * size / latency: a steady stream's own bound
    latency_s: float
    queue_depth: int = 1  # I/Os in flight (clamped to the device's maximum)

    @property
    def solo_rate(self) -> float:
        return min(self.device_rate, self.queue_rate)

    def op_cap(self, n_ios: int) -> float:
        """Rate cap (bytes/s) of the data flow of one op of ``n_ios`` such I/Os
        that follows the op's access-latency phase.

        Closed-loop I/O keeping ``qd`` in flight completes ``qd`` I/Os per
        ``latency``.  The latency phase is the first wave's access time: all of
        the first ``min(n, qd)`` I/Os are in flight during it.  The remaining
        ``n - qd`` I/Os need ``(n - qd) x latency / qd`` more, so the flow of the
        op's ``n x size`` bytes is capped at ``n x size / ((n - qd) x latency /
        qd) = queue_rate x n / (n - qd)``; no cap (inf) when ``n <= qd``.  Alone
        on the device an op then takes ``latency + max(bytes / device_rate,
        (n - qd) x latency / qd) = max(latency + bytes / device_rate, n x
        latency / qd)`` for ``n >= qd`` (the fluid form of ``ceil(n / qd) x
        latency``), and ``latency + bytes / device_rate`` for ``n <= qd``.
        """
        extra = n_ios - self.queue_depth
        if extra <= 0 or self.latency_s <= 0:
            return math.inf
        return self.queue_rate * n_ios / extra


def ssd_rates(
    spec: SsdGroup, write: bool, io_bytes: float, queue_depth: int, efficiency: float = 1.0
) -> SsdRates:
    """The three regimes of an SSD for I/Os of ``io_bytes`` at ``queue_depth``.

    ``efficiency`` scales the device's bandwidth and IOPS figures (the
    profile's ``efficiency.ssd``); latency is a measured figure, not scaled.
    """
    bw = gbps(spec.write_gbps if write else spec.read_gbps) * efficiency
    iops = (spec.write_iops if write else spec.read_iops) * efficiency
    lat = us(spec.write_latency_us if write else spec.read_latency_us)
    qd = max(1, min(queue_depth, spec.max_queue_depth))
    device = min(bw, iops * io_bytes)
    queue = qd * io_bytes / lat if lat > 0 else math.inf
    return SsdRates(device_rate=device, queue_rate=queue, latency_s=lat, queue_depth=qd)


def link_capacity(profile: HardwareProfile, link: LinkSpec) -> float:
    """Achievable bytes/s of ``link`` (per direction when full duplex): the
    datasheet ``gbps`` times the profile's efficiency factor for its kind."""
    return gbps(link.gbps) * efficiency_of(profile.efficiency, link.kind)


class Machine:
    """The simulated resources of one profile, on one simpy environment.

    ``link_caps`` (link name -> bytes/s), ``hbm_bps`` and ``tensor_flops``
    are the achievable capacities every flow and kernel is charged against.
    """

    def __init__(self, profile: HardwareProfile, env: simpy.Environment | None = None):
        self.profile = profile
        self.env = env if env is not None else simpy.Environment()
        names: list[str] = []
        caps: list[float] = []
        self._link_res: dict[tuple[str, str], tuple[str, int]] = {}
        lat: list[float] = []  # seconds a copy waits to cross each link resource
        self._adj: dict[str, list] = {n: [] for n in profile.node_names}
        eff = profile.efficiency
        self.link_caps = {ln.name: link_capacity(profile, ln) for ln in profile.topology.links}
        self.hbm_bps = gbps(profile.gpu.hbm_gbps) * eff.hbm
        self.tensor_flops = profile.gpu.bf16_tflops * 1e12 * eff.tensor
        # the rates roofline_seconds divides by, as it works them out from TFLOPS and GB/s
        self._roof = ((self.tensor_flops / 1e12) * 1e12, (self.hbm_bps / 1e9) * 1e9)
        for link in profile.topology.links:
            a, b = link.between
            cap = self.link_caps[link.name]
            if link.duplex == "half":
                idx = len(names)
                names.append(link.name)
                caps.append(cap)
                lat.append(us(link.latency_us))
                self._link_res[(a, b)] = self._link_res[(b, a)] = (link.name, idx)
            else:
                for (x, y), arrow in (((a, b), ">"), ((b, a), "<")):
                    self._link_res[(x, y)] = (link.name, len(names))
                    names.append(link.name + arrow)
                    caps.append(cap)
                    lat.append(us(link.latency_us))
            self._adj[a].append((-cap, b))
            self._adj[b].append((-cap, a))
        adjacency = {n: [m for _, m in sorted(adj)] for n, adj in self._adj.items()}
        self._adj = adjacency  # type: ignore[assignment]
        self.ssd_res: dict[str, int] = {}
        for ssd in profile.ssd_names:
            self.ssd_res[ssd] = len(names)
            names.append(ssd)
            caps.append(1.0)
            lat.append(0.0)
        self.link_latency_s = lat
        self.net = FlowNetwork(self.env, names, caps)
        self.meters = {ssd: IoMeter() for ssd in profile.ssd_names}  # what each SSD moved
        # CPU and GPU work never shares a resource with data movement, so they
        # live in networks of their own (smaller re-ratings, same physics).
        self.cpu_res = 0
        self.cpu_net = FlowNetwork(self.env, ["cpu"], [float(profile.cpu.cores)])
        self.gpu_res = {gpu: i for i, gpu in enumerate(profile.gpu_names)}
        self.gpu_net = FlowNetwork(
            self.env, [f"{g}.compute" for g in profile.gpu_names], [1.0] * profile.gpu.count
        )
        self._routes: dict[tuple[str, str], tuple[int, ...]] = {}

    def resources(self) -> list[tuple[FlowNetwork, int, str]]:
        """Every (network, resource index, name), data network first."""
        return [
            (net, r, name)
            for net in (self.net, self.cpu_net, self.gpu_net)
            for r, name in enumerate(net.names)
        ]

    # ---- routing ------------------------------------------------------------
    def route(self, src: str, dst: str) -> tuple[int, ...]:
        """Directional link resources on the fewest-hop path src -> dst.

        Among paths of equal hop count the one through wider links is taken
        (neighbours are explored by descending bandwidth, then by name), so
        GPU peers talk over NVLink and a route is the same on every run.
        Paths never pass *through* a GPU, SSD or DRAM module (only switches).
        """
        key = (src, dst)
        if key in self._routes:
            return self._routes[key]
        nics = self._nics_between(src, dst)
        if nics is not None:
            a, b = nics
            self._routes[key] = self.route(src, a) + self.route(a, b) + self.route(b, dst)
            return self._routes[key]
        for node in (src, dst):
            if node not in self._adj:
                raise RouteError(f"unknown node '{node}' (profile {self.profile.name})")
        if src == dst:
            raise RouteError(f"route from '{src}' to itself")
        endpoints = set(self.profile.gpu_names + self.profile.ssd_names + self.profile.dram_names)
        prev: dict[str, str] = {src: ""}
        queue = deque([src])
        while queue:
            node = queue.popleft()
            if node == dst:
                break
            if node != src and node in endpoints:
                continue  # endpoints do not forward traffic
            for nxt in self._adj[node]:
                if nxt not in prev:
                    prev[nxt] = node
                    queue.append(nxt)
        if dst not in prev:
            raise RouteError(f"no path from '{src}' to '{dst}' in profile {self.profile.name}")
        hops: list[int] = []
        node = dst
        while node != src:
            hops.append(self._link_res[(prev[node], node)][1])
            node = prev[node]
        self._routes[key] = tuple(reversed(hops))
        return self._routes[key]

    def _nics_between(self, src: str, dst: str) -> tuple[str, str] | None:
        """The NICs a route between two hosts of a fleet crosses (None inside a
        host): a GPU sends and receives through its own NIC (GPUDirect RDMA);
        host memory or an SSD of the other host through that host's NIC of the
        same index (the GPU's rail; NIC 0 between two hosts; a storage node's NICs
        take the rails in turn, :meth:`~hwprofiles.schema.FleetSpec.host_nic`)."""
        fleet = self.profile.fleet
        if fleet is None or fleet.hosts < 2:
            return None
        a, b = self._node_index(src), self._node_index(dst)
        if a is None or b is None or a == b:
            return None
        gpu = src if src in self.gpu_res else dst if dst in self.gpu_res else None
        k = int(gpu.removeprefix("gpu")) % fleet.gpus_per_node if gpu is not None else 0
        nic = {n: fleet.host_nic(n, k) for n in (a, b)}
        if src in self.gpu_res:
            nic[a] = fleet.nic_of(src)
        if dst in self.gpu_res:
            nic[b] = fleet.nic_of(dst)
        return nic[a], nic[b]

    def _node_index(self, name: str) -> int | None:
        """The fleet host (a compute node, or a storage node after them) a GPU, SSD
        or DRAM module sits in (None: a switch or link end)."""
        fleet = self.profile.fleet
        assert fleet is not None
        if name in self.gpu_res or name in self.ssd_res or name in self.profile.dram_names:
            return fleet.host_of(name)
        return None

    def route_latency_s(self, src: str, dst: str) -> float:
        """Seconds a copy's first byte takes from ``src`` to ``dst``: the links'
        ``latency_us`` summed over the route (0 inside a machine: no profile cites
        a PCIe or NVLink latency; the NIC ports and switch uplinks of a fleet)."""
        return sum(self.link_latency_s[r] for r in self.route(src, dst))

    def route_names(self, src: str, dst: str) -> list[str]:
        return [self.net.names[r] for r in self.route(src, dst)]

    # ---- flows for I/O --------------------------------------------------------
    def ssd_access(
        self, ssd: str, write: bool, io_bytes: float, queue_depth: int
    ) -> tuple[tuple[int, float], SsdRates]:
        """(resource, coef) of an SSD access and its rates."""
        spec, eff = self.profile.ssd(ssd), self.profile.efficiency.ssd
        rates = ssd_rates(spec, write, io_bytes, queue_depth, eff)
        return (self.ssd_res[ssd], 1.0 / rates.device_rate), rates

    def cpu_seconds(self, io_path: str, n_ios: int, queue_depth: int, nbytes: float = 0.0) -> float:
        """CPU time to submit and complete ``n_ios`` I/Os of ``nbytes`` on ``io_path``.

        kernel_fs: buffered reads/writes through the page cache.  The kernel
        handles the data page by page (page-cache lookup, copy to or from the
        user buffer, filesystem mapping), so the filesystem cost
        ``kernel_fs_per_io_us`` is paid per 4 KiB page, ``max(n_ios,
        ceil(nbytes / 4096))`` pages, and one syscall per I/O; the device sees
        the I/Os themselves (readahead-sized for the serving designs,
        :mod:`sim.serving.designs`).  With 4 KiB I/Os (or ``nbytes`` left 0)
        pages = I/Os.  io_uring: block-layer cost per I/O, one io_uring_enter
        per batch of ``queue_depth``, and ``io_uring_per_op_us`` once;
        passthrough: user-space driver cost per I/O, no syscall; gds: cuFile
        cost on top of the kernel path per I/O;
        cuda_copy: a host-to-device copy of ``n_ios`` CUDA copy calls, each
        ``cuda_copy_per_call_us`` on the issuing thread (the executor also
        delays the DMA by one call: :func:`sim.executor.op_physics`);
        none: DMA copies and compute, no CPU.  The executor runs this on one
        core per op, which the drivers make one core (one ring) per SSD (see
        :mod:`sim.executor`, "Who issues I/O").
        """
        sw = self.profile.software
        if io_path == "none" or n_ios == 0:
            return 0.0
        if io_path == "kernel_fs":
            pages = max(n_ios, math.ceil(nbytes / PAGE_BYTES))
            return us(pages * sw.kernel_fs_per_io_us + n_ios * sw.syscall_us)
        if io_path == "io_uring":
            batches = math.ceil(n_ios / max(1, queue_depth))
            per_op = sw.io_uring_per_op_us
            return us(n_ios * sw.io_uring_per_io_us + batches * sw.syscall_us + per_op)
        if io_path == "passthrough":
            return us(n_ios * sw.passthrough_per_io_us)
        if io_path == "cuda_copy":
            return us(n_ios * sw.cuda_copy_per_call_us)
        if io_path == "gds":
            return us(n_ios * (sw.kernel_fs_per_io_us + sw.syscall_us + sw.gds_per_io_us))
        raise ValueError(f"unknown io_path '{io_path}'")

    def submit_cores(self, io_path: str) -> int:
        """Cores that drive one SSD op's I/Os on ``io_path``: the profile's
        ``software.io_submit_cores`` for the queue-driven paths (io_uring rings,
        passthrough queue pairs), whose I/Os any of the op's threads may submit and
        reap; 1 for the synchronous ones (kernel_fs, gds), where the calling thread
        pays each call, and for memmap faults, taken on the thread that touches the page."""
        if io_path in ("io_uring", "passthrough"):
            return self.profile.software.io_submit_cores
        return 1

    def cpu_compute_seconds(
        self, flops: float, dram_bytes: float, threads: int, core_gbps: float = 0.0
    ) -> float:
        """Wall time of a ``cpu`` compute op alone on ``threads`` cores.

        max(flops / (threads x core FLOP/s), bytes / min(threads x per-core
        memory bandwidth, DRAM total)): the cores' vector units or their
        outstanding cache misses bound it, and no thread count reads faster
        than the DRAM modules together (:class:`hwprofiles.CpuSpec`).  A kernel
        with a measured per-thread rate (``core_gbps`` > 0, the plan's column)
        moves at most that per thread, and never more than the profile's core.
        """
        c = self.profile.cpu
        n = min(threads, c.cores)
        dram = sum(gbps(m.gbps) for m in self.profile.dram)
        per = min(core_gbps, c.core_mem_gbps) if core_gbps > 0 else c.core_mem_gbps
        mem = min(n * gbps(per), dram)
        return max(flops / (n * c.core_gflops * 1e9), dram_bytes / mem)

    def gpu_seconds(self, gpu: str, flops: float, hbm_bytes: float) -> float:
        """Roofline time of a kernel on ``gpu``: max(compute, memory) bound, at
        the achievable tensor rate and HBM bandwidth (peaks x efficiency)."""
        if gpu not in self.gpu_res:
            raise RouteError(f"unknown GPU '{gpu}' (profile {self.profile.name})")
        flop_s, byte_s = self._roof
        if flop_s > 0 and byte_s > 0:  # roofline_seconds' arithmetic, without its record
            return max(flops / flop_s, hbm_bytes / byte_s)
        return roofline_seconds(  # raises: the rates are not positive
            LayerCost(flops, hbm_bytes), self.tensor_flops / 1e12, self.hbm_bps / 1e9
        )

"""Execute a transfer plan on a simulated machine and produce records.

Each op goes through: *ready* (all ``depends_on`` finished) -> *start* (not
before ``release_s``) -> parts -> *end* (all parts finished).  The parts are

* read/write on an SSD: a base-latency phase (the device's unloaded access
  latency, i.e. the pipeline fill before the first I/O completes) followed by
  a data flow over the SSD (time-shared, see :mod:`sim.hw.machine`) and every
  link of the route, capped by the op's own queue-depth bound (below);
* copy: a data flow over the links of the route; a copy issued as CUDA
  copy calls (``io_path: cuda_copy``, ``n_ios`` calls) starts its flow one
  call's cost (``cuda_copy_per_call_us``) late, the first call's submission
  before its DMA, while the issuing thread spends ``n_ios`` calls' cost
  beside it (the CPU flow below): alone it takes ``max(c + B / rate, n x c)``;
* compute on a GPU: a flow of roofline GPU-seconds on its compute engine;
* compute on ``cpu``: a flow of ``threads x`` its solo time core-seconds on
  the host cores (``Machine.cpu_compute_seconds``), capped at ``threads``
  cores, so it shares the cores with the I/O paths' CPU flows by max-min;
* and, concurrently with the data part, a CPU flow of the software path's
  cost (``sim.hw.machine.Machine.cpu_seconds``) on the host cores, one core at
  most per op (``software.io_submit_cores`` per SSD op, below).

Who issues I/O.  Seed 000 (§7, "Asynchronous I/O") says only that a C++
backend issues concurrent non-blocking reads through io_uring into pinned
host memory; it gives no count of rings or threads.  The model: one io_uring
ring per SSD, driven by one thread on one core (interrupt-driven, the
profile's ``io_uring_per_io_us``).  The Swarm driver issues one read op per
SSD per (step, layer) and chains each to the previous group's reads, so one
core per op is one core per SSD: 1.5 us per I/O caps a ring at 667K I/Os/s,
4 KiB reads at 2.73 GB/s per SSD; large coalesced I/Os (the plan's
``io_bytes``) make that ceiling irrelevant.  Polled or multi-ring setups are
a lower ``io_uring_per_io_us`` (the 0.39 us polled floor cited in the profiles).
The one core per op is the profile's ``software.io_submit_cores`` (1 unless a
profile says otherwise) on the queue-driven paths (io_uring, passthrough;
:meth:`sim.hw.machine.Machine.submit_cores`): an SSD op's CPU flow runs on at
most that many cores, so an op of ``n`` I/Os at ``c`` core-seconds each takes at
least ``n c / k`` on ``k`` cores.  The synchronous paths (kernel_fs, gds) and a
CUDA copy's calls stay on their one calling thread.

Queue depth.  An op of ``n`` I/Os keeps ``qd = min(queue_depth, n)`` in
flight; closed-loop, that completes ``qd`` I/Os per access latency ``L``
(Little's law), ``ceil(n / qd) x L`` in all when the device is not the
bound.  The latency phase *is* the first wave: its ``qd`` I/Os are in flight
together and finish after one ``L``.  So the queue bound covers only the
``n - qd`` I/Os after it: the data flow of ``B`` bytes takes at least ``(n -
qd) x L / qd`` (cap ``B / that``, none when ``n <= qd``;
:meth:`sim.hw.machine.SsdRates.op_cap`), alongside the device-wide bounds
(bandwidth, IOPS) and the links, which the flow network applies.  Alone on
an idle machine an op thus takes ``L + max(B / device_rate, (n - qd) x L /
qd)``, i.e. ``L + B / device_rate`` when ``n <= qd`` and ``max(L + B /
device_rate, n x L / qd)`` otherwise (the fluid form of ``ceil(n / qd) x L``,
exact when ``qd`` divides ``n``).  The data transfer of the first wave is
not overlapped with its latency (the fluid model moves bytes only after the
fill), which is what charges ``B / device_rate`` on top of ``L``.  Nothing
here depends on the design that issued the op: only ``n``, ``B``, ``qd`` and
the device figures.

I/O size.  A read/write is rated by its mean I/O size ``bytes / n_ios``
(its ranges cut at ``io_bytes`` give I/Os of several sizes).  Each bound of
the SSD model is linear in bytes or count (bandwidth B/bw, IOPS n/iops,
queue (n - qd) x latency / qd), so the mean gives each exactly and the op's device
time is max(B/bw, n/iops); rating every I/O on its own would give the sum of
max(s/bw, 1/iops) over I/Os, the same when all I/Os lie on one side of
bw/iops and larger when an op mixes IOPS- and bandwidth-bound sizes
(tests/sim/test_coalesce.py).

The op ends when its last part does, so a CPU-bound software path stretches
an op exactly as much as the CPU work exceeds the device work.

Records are measured, not copied from the plan: an SSD's bytes and I/Os are
counted when each op's data flow completes (:class:`sim.hw.iometer.IoMeter`),
a link's bytes are its flow network's integrated work, and every device's
``busy_s`` is the time it had work in flight (definitions in
:mod:`kvtier.contracts.records`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from kvtier.contracts.plan import CPU, depends_csr, validate_plan
from kvtier.contracts.records import Records, op_records
from sim.engine.flownet import Flow, FlowNetwork
from sim.hw.iometer import IoMeter
from sim.hw.machine import Machine
from sim.measures import capacity_stats, device_records

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class ExecStats:
    ops: int
    flows: int
    reratings: int
    makespan_s: float


@dataclass(frozen=True, slots=True)
class OpPhysics:
    """The parts of one op: a data (or compute) flow and a concurrent CPU flow.

    ``path`` crosses resources of ``net``; ``amount`` is bytes (GPU-seconds
    for GPU compute, core-seconds for ``cpu`` compute); ``cap`` is the flow's
    own rate bound (the SSD queue-depth bound of the I/Os after the first
    wave, :meth:`sim.hw.machine.SsdRates.op_cap`; the threads of a ``cpu`` op);
    ``latency_s`` delays the data flow (an SSD's unloaded access latency);
    ``cpu_s`` is the software path's CPU time (0: no CPU flow); ``ssd`` names
    the SSD a read/write moves ``n_ios`` I/Os on (``""`` otherwise), ``write``
    its direction: the SSD's meter counts them when the data flow completes.
    """

    net: FlowNetwork
    path: tuple
    amount: float
    cap: float
    latency_s: float
    cpu_s: float
    ssd: str = ""
    write: bool = False
    n_ios: int = 0
    meter: IoMeter | None = None  # ``ssd``'s meter on the machine (None: no SSD)
    sig: int = -1  # ``path`` and ``cap`` interned on ``net`` (:meth:`FlowNetwork.intern`)
    cpu_sig: int = -1  # the CPU flow's path and cap interned on the machine's cpu_net

    def __post_init__(self) -> None:
        if self.sig < 0:
            object.__setattr__(self, "sig", self.net.intern(self.path, self.cap))


def op_physics(
    m: Machine,
    kind: str,
    src: str,
    dst: str,
    nbytes: float,
    n_ios: int,
    queue_depth: int,
    io_path: str,
    flops: float,
    hbm_bytes: float,
    threads: int = 0,
    gpu_s: float = 0.0,
    core_gbps: float = 0.0,
) -> OpPhysics:
    """How one plan op becomes flows on ``m`` (see the module docstring); a GPU
    compute op takes ``gpu_s`` seconds where a measured source timed it, else
    the roofline of its ``flops`` and ``hbm_bytes``."""
    if kind == "compute" and dst == CPU:
        n = min(threads, m.profile.cpu.cores)
        core_s = n * m.cpu_compute_seconds(flops, hbm_bytes, n, core_gbps)
        return OpPhysics(m.cpu_net, ((m.cpu_res, 1.0),), core_s, float(n), 0.0, 0.0)
    if kind == "compute":
        secs = gpu_s if gpu_s > 0 else m.gpu_seconds(dst, flops, hbm_bytes)
        return OpPhysics(m.gpu_net, ((m.gpu_res[dst], 1.0),), secs, math.inf, 0.0, 0.0)
    path = [(r, 1.0) for r in m.route(src, dst)]
    cap, latency, ssd = math.inf, 0.0, ""
    if kind in ("read", "write"):
        ssd = src if kind == "read" else dst
        spec = m.profile.ssd(ssd)
        qd = min(queue_depth or spec.max_queue_depth, n_ios)
        access, rates = m.ssd_access(ssd, kind == "write", nbytes / n_ios, qd)
        path.insert(0 if kind == "read" else len(path), access)
        cap, latency = rates.op_cap(n_ios), rates.latency_s
    elif kind == "copy" and io_path == "cuda_copy" and n_ios > 0:
        latency = m.cpu_seconds(io_path, 1, 1)  # the first call, before its DMA
    if kind == "copy":  # the route's own latency (network hops of a fleet; else 0)
        latency += m.route_latency_s(src, dst)
    cpu_s = m.cpu_seconds(io_path, n_ios, queue_depth or n_ios, nbytes)
    cores = float(m.submit_cores(io_path)) if ssd else 1.0
    cpu_sig = m.cpu_net.intern(((m.cpu_res, 1.0),), cores)
    return OpPhysics(
        m.net,
        tuple(path),
        float(nbytes),
        cap,
        latency,
        cpu_s,
        ssd,
        kind == "write",
        n_ios,
        m.meters[ssd] if ssd else None,
        cpu_sig=cpu_sig,
    )


def launch(m: Machine, phys: OpPhysics, done: Callable[[], None]) -> int:
    """Start an op's parts now; ``done()`` is called once per part as it ends.

    Returns the number of parts (1, or 2 with a CPU flow); the op ends when
    ``done`` has been called that many times.
    """
    env, net = m.env, phys.net
    if phys.cpu_s > 0:
        m.cpu_net.start_sig(phys.cpu_sig, phys.cpu_s, lambda _f: done())
    meter = phys.meter
    if meter is not None:
        meter.begin(env.now)

    def data_done(_f: object) -> None:
        if meter is not None:
            meter.end(env.now, phys.write, phys.amount, phys.n_ios)
        done()

    net.start_sig_after(phys.latency_s, phys.sig, phys.amount, data_done)
    return 1 + (phys.cpu_s > 0)


# the plan columns that determine an op's physics (op_physics's arguments)
_SHAPE = ("kind", "src", "dst", "bytes", "n_ios", "queue_depth", "io_path", "flops", "hbm_bytes",
          "gpu_s", "core_gbps")  # fmt: skip


def op_shapes(plan: pa.Table, m: Machine) -> tuple[list[OpPhysics], np.ndarray, np.ndarray]:
    """Every op's :class:`OpPhysics`, CPU seconds (a ``cpu`` compute op's
    core-seconds, else its software path's) and flows (2 with a CPU flow, else
    1), with one :func:`op_physics` call per distinct shape: ops are grouped by
    their columns (strings dictionary-encoded; a NaN is a value like any other,
    never a dropped group) in pandas, not in a Python loop."""
    n = plan.num_rows
    if n == 0:
        return [], np.zeros(0), np.zeros(0, dtype=np.int64)
    import pyarrow.compute as pc  # noqa: PLC0415  (here: the serving engine runs without it)

    cols = {}
    for c in (*_SHAPE, "threads"):
        col = plan.column(c)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pc.dictionary_encode(col).combine_chunks().indices
        cols[c] = col.to_numpy()
    import pandas as pd  # noqa: PLC0415  (here: the serving engine runs without it)

    gid = pd.DataFrame(cols).groupby(list(cols), sort=False, dropna=False).ngroup().to_numpy()
    _, first = np.unique(gid, return_index=True)
    rows = plan.select([*_SHAPE, "threads"]).take(pa.array(first)).to_pydict()
    shapes = np.empty(len(first), dtype=object)
    cpu = np.empty(len(first), dtype=np.float64)
    nflows = np.empty(len(first), dtype=np.int64)
    for g in range(len(first)):
        kind, src, dst, nbytes, n_ios, qd, io_path, flops, hbm, gpu_s, rate = (
            rows[c][g] for c in _SHAPE
        )
        ph = op_physics(
            m, kind, src, dst, nbytes, n_ios, qd, io_path, flops, hbm, rows["threads"][g], gpu_s,
            rate,
        )  # fmt: skip
        shapes[g] = ph
        cpu[g] = ph.amount if ph.net is m.cpu_net else ph.cpu_s
        nflows[g] = 1 + (ph.cpu_s > 0)
    return shapes[gid].tolist(), cpu[gid], nflows[gid]


class PlanExecutor:
    """Runs one plan on one :class:`Machine`; use :func:`simulate` for the usual case.

    Ops of one shape (kind, route, bytes, I/Os, queue depth, software path,
    compute figures) share one :class:`OpPhysics`, found for every op at once
    by grouping the plan's columns; each flow carries its op's index as its
    token, so completions need no closure per op."""

    def __init__(self, plan: pa.Table, machine: Machine, progress: ProgressFn | None = None):
        self.machine = machine
        self.env = machine.env
        self.net = machine.net
        p = machine.profile
        validate_plan(plan, p.node_names, p.ssd_names, p.gpu_names)
        self.plan = plan
        n = plan.num_rows
        self.n = n
        self.phys, self.cpu_s, self._nflows = op_shapes(plan, machine)
        release = plan.column("release_s").to_numpy()
        # a list only when some op has a release time (else every op is due when ready)
        self.release = release.tolist() if n and release.max() > 0 else None
        offsets, values = depends_csr(plan)
        self.pending = np.diff(offsets).tolist()
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        order = np.argsort(values, kind="stable")
        self.dep_of = owner[order].tolist()  # dependents, grouped by the op they wait for
        self.dep_ptr = np.searchsorted(values[order], np.arange(n + 1)).tolist()
        self.ready_s = [math.nan] * n
        self.start_s = [math.nan] * n
        self.end_s = [math.nan] * n
        self._parts = [0] * n
        self._done = 0
        self._progress = progress
        self._tick = max(1, n // 200)
        self._on_done = self._part_done  # bound once, not per flow
        self._cpu_net = machine.cpu_net

    @property
    def flows(self) -> int:
        """Flows started so far: every started op's data flow and its CPU flow if any."""
        started = ~np.isnan(np.asarray(self.start_s, dtype=np.float64))
        return int(self._nflows[started].sum())

    # ---- lifecycle ------------------------------------------------------------
    def run(self) -> Records:
        for i in range(self.n):
            if self.pending[i] == 0:
                self._ready(i)
        self.env.run()
        if self._done != self.n:  # pragma: no cover - deps only point backwards
            raise RuntimeError(f"plan stalled: {self.n - self._done} ops never ran")
        return self.records()

    def _ready(self, i: int) -> None:
        now = self.env.now
        self.ready_s[i] = now
        wait = self.release[i] - now if self.release is not None else 0.0
        if wait > 0:
            self.env.timeout(wait).callbacks.append(lambda _e, i=i: self._start(i))
        else:
            self._start(i)

    def _start(self, i: int) -> None:
        """Start op ``i``'s parts, as :func:`launch` does: the data flow's token is
        ``i``, the CPU flow's ``~i`` (negative), so one callback serves both."""
        now = self.env.now
        self.start_s[i] = now
        ph = self.phys[i]
        if ph.cpu_s > 0:
            self._cpu_net.start_sig(ph.cpu_sig, ph.cpu_s, self._on_done, ~i)
            self._parts[i] = 2
        else:
            self._parts[i] = 1
        if ph.meter is not None:
            ph.meter.begin(now)
        ph.net.start_sig_after(ph.latency_s, ph.sig, ph.amount, self._on_done, i)

    def _part_done(self, flow: Flow) -> None:
        """A flow of an op ended (an SSD op's data flow: its meter counts the bytes
        and I/Os); the op ends with its last flow and readies its dependents."""
        i = flow.token
        if i < 0:
            i = ~i
        else:
            ph = self.phys[i]
            if ph.meter is not None:
                ph.meter.end(flow.end_s, ph.write, ph.amount, ph.n_ios)
        parts = self._parts
        parts[i] -= 1
        if parts[i]:
            return
        now = self.end_s[i] = flow.end_s
        self._done += 1
        if self._progress is not None and (self._done % self._tick == 0 or self._done == self.n):
            self._progress(self._done, self.n)
        pending, release = self.pending, self.release
        for j in self.dep_of[self.dep_ptr[i] : self.dep_ptr[i + 1]]:
            left = pending[j] - 1
            pending[j] = left
            if not left:
                if release is not None and release[j] > now:
                    self._ready(j)
                else:  # _ready without the call: starts now
                    self.ready_s[j] = now
                    self._start(j)

    # ---- results -------------------------------------------------------------------
    def records(self) -> Records:
        makespan = max(self.end_s) if self.n else 0.0
        ops = op_records(self.plan, self.ready_s, self.start_s, self.end_s, self.cpu_s, "sim")
        devices = device_records(self.plan, self.machine, makespan)
        m = self.machine
        reratings = m.net.reratings + m.cpu_net.reratings + m.gpu_net.reratings
        stats = ExecStats(self.n, self.flows, reratings, makespan)
        return Records(
            ops=ops, devices=devices, stats={**stats.__dict__, **capacity_stats(m, makespan)}
        )


def simulate(
    plan: pa.Table, profile: HardwareProfile, progress: ProgressFn | None = None
) -> Records:
    """Execute ``plan`` on a fresh simulated ``profile`` machine."""
    return PlanExecutor(plan, Machine(profile), progress).run()

"""Submit plan ops one at a time to a running simulation (closed loop).

A serving engine cannot precompute its plan: when a request is admitted
depends on when earlier loads finished.  :class:`OnlineOps` gives the engine
the same transfer machinery as :class:`sim.executor.PlanExecutor` (the very
same :func:`sim.executor.op_physics`, its parts started as
:func:`sim.executor.launch` starts them, on the machine's flow networks) one
op at a time: :meth:`OnlineOps.submit` starts an op now and returns a simpy
event that fires when it ends (the only event per op);
:meth:`OnlineOps.issue` is its lean form for the transfer mover (totals
computed by the caller, an optional callback), :meth:`OnlineOps.compute`
the engine's per-iteration GPU op without ``submit``'s keyword handling.  An op in flight is one
record (:class:`_InFlight`): its flows carry it as their token, to two
callbacks bound once, and with a callback, or as :meth:`OnlineOps.compute`'s
event, it is itself scheduled as the op's end event, so such an op allocates
no closure and no simpy event.  A transfer's physics is kept per shape; a GPU
compute op's is one record a GPU (:class:`_Compute`: the GPU's interned
signature), its seconds (a new roofline time per iteration) passed to its
flow, not a fresh :class:`~sim.executor.OpPhysics`.  A GPU compute op's flow
is started alone (:meth:`sim.engine.flownet.FlowNetwork.start_alone`): where
no other flow runs on its GPU (a serving engine's iteration, the usual case)
its end time is known at once and its end is one simpy event, with no
re-rating of the GPUs' network; another op joining its GPU makes it an
active flow of the network like any other.

Every submitted op is also written down as a plan row (``release_s`` = the
time it was issued, ``depends_on`` = the ops whose completion the engine
waited for before issuing it), so the run can be replayed open loop: the
plan executor, or the real backend, started on :meth:`OnlineOps.plan` issues
every op at the same instant the engine did (tests check the simulator
reproduces the same end times).  A read/write given ``extents`` (one
(offset, length) byte range on its SSD each, cut into I/Os of ``io_bytes``)
is written down with them, so the replay touches the byte ranges the
design's layout chose; its bytes and I/O count, and so its physics, are the
extents' total and I/O count (:func:`kvtier.contracts.plan.extent_totals`).  The rows
are kept compactly (:class:`sim.serving.planstore.PlanStore`: typed columns,
extents as runs) and become a plan again on :meth:`OnlineOps.plan`; a run
made with ``keep_plan=False`` keeps only what its op records need.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import simpy

from kvtier.contracts.arrays import arrow_array
from kvtier.contracts.plan import extent_totals
from kvtier.contracts.plan_schema import OP_IDENTITY
from kvtier.contracts.records import OP_RECORD_SCHEMA, Records, op_records
from sim.engine.flownet import Flow, FlowNetwork
from sim.executor import OpPhysics, device_records, op_physics
from sim.hw.machine import Machine
from sim.serving.planstore import PlanStore


class _InFlight:
    """One issued op until it ends: its id, physics and parts still running
    (``left``: the data flow and, with a software path, the CPU flow; both
    carry this record as their token).  When the last part ends, ``event``
    (:meth:`OnlineOps.submit`'s simpy event) succeeds, or the record itself is
    scheduled as the event (``callbacks``, ``_ok``, ``_value``: all simpy's
    ``step`` and a waiting process's resumption read of an event, the value
    the op id): for :meth:`OnlineOps.issue` with a callback, its callback
    calls ``on_done(op)``; for :meth:`OnlineOps.compute`, the process waiting
    on it has put its resumption in ``callbacks``."""

    __slots__ = ("callbacks", "op", "phys", "on_done", "left", "event", "_value")
    _ok = True

    def __init__(self, op: int, phys: OpPhysics | _Compute, on_done: Callable[[int], Any] | None):
        self.op = op
        self.phys = phys
        self.on_done = on_done
        self.left = 1
        self.event: simpy.Event | None = None


class _Compute:
    """A GPU's compute ops' physics: what :meth:`OnlineOps.issue` and its flows'
    ends read of the :class:`OpPhysics` that :func:`op_physics` gives one (one
    flow on the GPU's resource of ``gpu_net``, as ``sig``; no latency, no CPU
    flow, no SSD), but the flow's GPU-seconds, the op's own."""

    __slots__ = ("net", "sig")
    latency_s = cpu_s = 0.0
    meter = None

    def __init__(self, net: FlowNetwork, sig: int):
        self.net = net
        self.sig = sig


def _call_on_done(ended: _InFlight) -> None:
    ended.on_done(ended.op)  # type: ignore[misc]


_CALL_ON_DONE = (_call_on_done,)  # simpy's step only iterates an event's callbacks


class OnlineOps:
    """Ops issued while the simulation runs, and their records."""

    def __init__(self, machine: Machine, keep_plan: bool = True):
        self.machine = machine
        self.env = machine.env
        self.store = PlanStore(keep_plan)
        self.start_s = array("d")
        self.end_s = array("d")
        self.cpu_s = array("d")
        self.flows = 0
        self._cache: dict[tuple, OpPhysics] = {}
        self._gpus: dict[str, _Compute] = {}  # a GPU's compute ops' physics on gpu_net
        self._cpu_net = machine.cpu_net
        self._gpu_net = machine.gpu_net
        self._data_cb = self._data_done  # bound once, not per op
        self._cpu_cb = self._cpu_done

    def __len__(self) -> int:
        return len(self.start_s)

    def submit(
        self,
        kind: str,
        src: str,
        dst: str,
        *,
        nbytes: int = 0,
        n_ios: int = 0,
        queue_depth: int = 0,
        io_path: str = "none",
        flops: float = 0.0,
        hbm_bytes: float = 0.0,
        depends_on: Iterable[int] = (),
        extents: np.ndarray | None = None,
        io_bytes: int = 0,
        step: int = 0,
        layer: int = -1,
        tag: str = "",
    ) -> tuple[int, simpy.Event]:
        """Start an op now; returns (op id, event that fires with it when it ends).

        ``extents``: a read/write's (n, 2) byte ranges (offset, length), cut
        into I/Os of ``io_bytes`` (0 = one I/O per range); they set ``nbytes``
        and ``n_ios``.  ``step``, ``layer``, ``tag`` are the plan's free columns.
        """
        if extents is not None and len(extents):
            extents = np.asarray(extents, dtype=np.int64).reshape(-1, 2)
            nbytes, n_ios = extent_totals(extents, io_bytes)
        else:
            extents = None
        ended = self.issue(
            kind, src, dst, int(nbytes), int(n_ios), sorted(set(depends_on)), None,
            queue_depth=queue_depth, io_path=io_path, flops=flops, hbm_bytes=hbm_bytes,
            extents=extents, io_bytes=io_bytes, step=step, layer=layer, tag=tag,
        )  # fmt: skip
        ended.event = self.env.event()
        return ended.op, ended.event

    def compute(
        self,
        gpu: str,
        flops: float,
        hbm_bytes: float,
        depends_on: Iterable[int],
        step: int,
        layer: int,
        tag: str,
        gpu_s: float = 0.0,
    ) -> tuple[int, Any]:
        """:meth:`submit` of a GPU compute op (``submit("compute", "", gpu,
        flops=..., hbm_bytes=..., ...)``) without its keyword and extent
        handling: the engine's per-iteration op.  ``gpu_s``: its seconds as a
        measured source timed them (0: the roofline of ``flops`` and
        ``hbm_bytes``; the plan's column of that name).  Its end event is the
        op's record (:class:`_InFlight`), which a simpy process can wait on
        (``yield``; it fires with the op id at the instant and queue position
        ``submit``'s event would have), not a :class:`simpy.Event`."""
        deps = list(depends_on)
        if len(deps) > 1:  # one or none: distinct and sorted already
            deps = sorted(set(deps))
        ended = self.issue(
            "compute", "", gpu, 0, 0, deps, None, flops=flops, hbm_bytes=hbm_bytes, gpu_s=gpu_s,
            step=step, layer=layer, tag=tag,
        )  # fmt: skip
        ended.callbacks = []  # the waiting process's resumption goes here
        return ended.op, ended

    def issue(
        self,
        kind: str,
        src: str,
        dst: str,
        nbytes: int,
        n_ios: int,
        deps: list[int],
        on_done: Callable[[int], Any] | None,
        *,
        queue_depth: int = 0,
        io_path: str = "none",
        flops: float = 0.0,
        hbm_bytes: float = 0.0,
        gpu_s: float = 0.0,
        extents: np.ndarray | None = None,
        io_bytes: int = 0,
        step: int = 0,
        layer: int = -1,
        tag: str = "",
        runs: np.ndarray | None = None,
    ) -> _InFlight:
        """Start an op now and return its record in flight, which calls
        ``on_done(op)`` when it ends (no simpy event is made); without
        ``on_done``, the caller makes the record's end event (:meth:`submit`:
        a simpy event as ``event``; :meth:`compute`: the record itself).
        ``nbytes``/``n_ios`` must be the extents' totals when ``extents`` are
        given (the caller computed them once), or of ``runs``, the extents as
        (offset, length, count, stride) runs (:meth:`PlanStore.add`); ``deps``
        are distinct op ids, written down in the order given."""
        now = self.env.now
        op = len(self.start_s)
        if kind == "compute":
            n_ios = 0
        # flops, hbm_bytes, gpu_s become floats in the plan store's typed columns
        offset = 0 if extents is None else int(extents[0, 0])
        if runs is not None:
            offset = int(runs[0, 0])
        row = (kind, src, dst, nbytes, n_ios, queue_depth, io_path, offset,
               io_bytes, flops, hbm_bytes, gpu_s, now, step, layer, tag)  # fmt: skip
        self.store.add(row, deps, extents, runs)  # in planstore.COLUMNS order
        phys: OpPhysics | _Compute | None
        alone = False  # a GPU compute op: started alone where nothing else runs on its GPU
        if kind == "compute":
            phys = self._gpus.get(dst)
            if phys is None:
                got = op_physics(
                    self.machine, kind, "", dst, 0, 0, 0, "none", flops, hbm_bytes, gpu_s=gpu_s
                )
                if got.net is self._gpu_net:
                    phys = self._gpus[dst] = _Compute(self._gpu_net, got.sig)
            if phys is None:  # a host compute op: shares the cores with the CPU flows
                phys, amount = got, got.amount
            else:  # op_physics's GPU compute, without its record or interning
                amount = gpu_s if gpu_s > 0 else self.machine.gpu_seconds(dst, flops, hbm_bytes)
                alone = True
        else:  # a transfer's physics depends on its shape only: one OpPhysics per shape
            key = (kind, src, dst, nbytes, n_ios, queue_depth, io_path)
            phys = self._cache.get(key)
            if phys is None:
                phys = self._cache[key] = op_physics(
                    self.machine, kind, src, dst, nbytes, n_ios, queue_depth, io_path, 0.0, 0.0
                )
            amount = phys.amount
        ended = _InFlight(op, phys, on_done)
        self.start_s.append(now)
        self.end_s.append(math.nan)
        self.cpu_s.append(phys.cpu_s)
        # launch(), inline: the CPU flow, the SSD's meter, the data flow; both
        # flows carry the op's record as their token
        if phys.cpu_s > 0:
            self._cpu_net.start_sig(phys.cpu_sig, phys.cpu_s, self._cpu_cb, ended)
            ended.left = 2
        if phys.meter is not None:
            phys.meter.begin(now)
        if alone:  # its flow's end known now where it runs alone (FlowNetwork.start_alone)
            phys.net.start_alone(phys.sig, amount, self._data_cb, ended)
        elif phys.latency_s > 0:
            phys.net.start_sig_after(phys.latency_s, phys.sig, amount, self._data_cb, ended)
        else:  # start_sig_after's own shortcut, one call less
            phys.net.start_sig(phys.sig, amount, self._data_cb, ended)
        self.flows += ended.left
        return ended

    def cpu_work(self, core_s: float, threads: int) -> simpy.Event:
        """``core_s`` core-seconds of host CPU work on at most ``threads`` of the
        profile's cores (a design's per-object bookkeeping,
        :mod:`sim.serving.policy.objcost`): one flow on the host cores, shared by
        max-min with every op's software-path CPU flow and other CPU work, so a
        contended host stretches it; the event fires when it ends.  Not a plan op
        (the plan's columns carry no thread count); ``flows`` counts it."""
        done = self.env.event()
        cores = float(min(threads, self.machine.profile.cpu.cores))
        sig = self._cpu_net.intern(((self.machine.cpu_res, 1.0),), cores)
        self._cpu_net.start_sig(sig, core_s, lambda _flow: done.succeed(), None)
        self.flows += 1
        return done

    def _data_done(self, flow: Flow) -> None:
        """An op's data flow ended (an SSD op's meter counts its bytes and I/Os)."""
        ended = flow.token
        phys = ended.phys
        if phys.meter is not None:
            phys.meter.end(flow.end_s, phys.write, phys.amount, phys.n_ios)
        ended.left -= 1
        if not ended.left:
            self._end(ended, flow.end_s, phys.net.ending_alone is flow)

    def _cpu_done(self, flow: Flow) -> None:
        """An op's CPU flow ended."""
        ended = flow.token
        ended.left -= 1
        if not ended.left:
            self._end(ended, flow.end_s, False)

    def _end(self, ended: _InFlight, now: float, last: bool) -> None:
        """The op's last part ended: its end time, then its event (a plain
        simpy event, or the record itself scheduled as one, to call ``on_done``
        or to resume the process waiting on it: the same place in simpy's queue
        as ``Event.succeed``).  ``last``: this is the last thing the event being
        stepped does (a flow ending alone: ``FlowNetwork.ending_alone``); then,
        with no other event due at this instant, the record would be the very
        next event simpy steps, and it is stepped here as simpy's ``step``
        would (its callbacks, once): the same order, one event less."""
        self.end_s[ended.op] = now
        if ended.event is not None:
            ended.event.succeed(ended.op)
        else:  # the record is the event: a callback's, or a waiting process's (compute)
            if ended.on_done is not None:
                ended.callbacks = _CALL_ON_DONE
            ended._value = ended.op
            if last and self.env.peek() > now:
                callbacks, ended.callbacks = ended.callbacks, None
                for callback in callbacks:
                    callback(ended)
            else:
                self.env.schedule(ended)  # type: ignore[arg-type]

    # ---- results ---------------------------------------------------------------
    def plan(self) -> pa.Table:
        """The ops issued so far, as one plan table (it holds every extent:
        :meth:`plan_chunks` for a large run)."""
        return self.store.table()

    def plan_chunks(self) -> Iterator[pa.Table]:
        """The ops issued so far, as consecutive plan tables of bounded size."""
        return self.store.chunks()

    def records(self, stats: dict[str, Any] | None = None) -> Records:
        """Records of every op issued so far (all must have ended)."""
        store = self.store
        cols = {"op_id": np.arange(len(self), dtype=np.int64)}
        cols.update({c: store.column(c) for c in OP_IDENTITY if c in store.num})
        arrays = {c: arrow_array(v, OP_RECORD_SCHEMA.field(c).type) for c, v in cols.items()}
        arrays.update({c: store.strings(c) for c in OP_IDENTITY if c not in store.num})
        ident = pa.table({c: arrays[c] for c in ("op_id", *OP_IDENTITY)})
        makespan = max(self.end_s) if self.end_s else 0.0
        ops = op_records(ident, self.start_s, self.start_s, self.end_s, self.cpu_s, "sim")
        devices = device_records(None, self.machine, makespan)
        m = self.machine
        base = {
            "ops": len(self),
            "flows": self.flows,
            "reratings": m.net.reratings + m.cpu_net.reratings + m.gpu_net.reratings,
            "makespan_s": makespan,
        }
        return Records(ops=ops, devices=devices, stats={**base, **(stats or {})})

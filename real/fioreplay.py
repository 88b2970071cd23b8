"""fio as the replayer's I/O engine: the plan's exact I/Os, every read verified by fio.

What fio replays.  The plan's *waves* (:func:`real._fiolog.fio_waves`: the
ops of one ``step``, each depending on the whole step before), one fio run
each, one after another; a plan without steps is one wave.  In a run, one job
per SSD node: a fio iolog v2 (``read_iolog``) holding exactly the (offset,
length) of every I/O the wave issues on that node
(:func:`real.datafile.io_layout`: the regular pattern or the op's extents,
never merged or split), in the order kvtier's own replayer issues them (the
node's ops take turns one I/O at a time), kept as deep as the Python engine
keeps them (the device's slots, at most the sum of its ops' ``queue_depth``;
``replay_no_stall=1``, ``ioengine=io_uring``, O_DIRECT; ``force_async=1`` on
tmpfs and loop devices, as :func:`real.engine.on_tmpfs` does for the Python
engine).

How reads are verified.  kvtier's own block format (:mod:`real._blocks`) is
not one fio can check, so for the run each target holds fio's: the node's
bytes are written by fio with ``verify=crc32c`` and ``verify_interval=4096``,
which puts a header in every 4 KiB block with the block's own offset, a
random seed and the crc32c of the rest.  A read-only fio job with the same
``verify`` checks every block it reads: a flipped bit fails the crc, a block
read from (or written to) the wrong place fails the offset check, and fio stops
with ``EILSEQ``.  After the run the targets get kvtier's format back, so the
Python engine can replay them next.

fio 3.33 neither counts nor verifies the last ``iodepth - 1`` completions of an
iolog (measured: a bad block among the last 31 reads at iodepth 32 passed);
each log therefore ends with ``2 x iodepth`` *pad* reads (writes for a write
job) of one extra 4 KiB block past the node's extent (or, on a device that
ends there, the first block the wave does not touch:
:func:`real._fiolog.pad_offsets`), and fio's per-I/O completion log
(``write_lat_log``, ``log_offset=1``) must hold every plan I/O, which is
checked: the sorted (offset, length) list fio completed equals the plan's,
pads aside.  That is also the proof that fio issued exactly the plan's I/Os.

What fio can express: waves of reads and writes -- ``release_s`` 0, each node
only read or only written within a wave, no target paced in user space, no
GPUDirect path.  Kernel-throttled targets (the loop devices of
:mod:`real.emulate`) are fine: fio is this process's child and so in the same
blkio group, held to the same limits as the Python engine.  fio has no barrier
between I/Os of a log (``sync`` and ``wait`` entries do not drain the queue,
measured) and a ``stonewall``/``wait_for`` between jobs cost 200-300 ms each
here, hence one run per wave: the runs' start-up is outside every measured
time (:func:`fio_expressible` says why a plan does not fit).  A throttled
node's lead-in pads (:func:`real._fiolog.lead_in`) are dropped where a probe
finds fio's own ceiling well below the limit (:mod:`real._fioprobe`): the
throttle would never hold an I/O there, so its credit changes nothing.

What the records hold.  The same columns as the Python engine's.  Waves run
back to back on the records' clock (fio's start-up, lead-ins and closing pads
are not on it): the ops of wave ``i`` are ready and start when their node's
lead-in was done, shifted so that the wave's first node starts when wave
``i - 1``'s last op ended (wave 0 at 0); an op's ``end_s`` is the completion
of its last I/O in fio's log, which has **1 ms resolution** (fio 3.33 logs
times in ms); I/Os with the same (offset, length) are paired with the log's
in completion order.  Devices: bytes and I/Os of the plan (all verified),
``busy_s`` the sum over waves of the node's first start to last end.
``cpu_s``:
each run's fio process user + system CPU (:func:`real._fiolog.children_cpu_s`,
io-wq workers included, as for the Python engine), shared over the wave's ops
by I/O count.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.contracts.records import DEVICE_RECORD_SCHEMA, Records, op_records
from real._blocks import BLOCK, BlockFormat
from real._fiolog import (
    PADS_PER_SLOT,
    VERIFY,
    children_cpu_s,
    completions,
    fill_fio,
    fio_waves,
    lead_in,
    pad_offsets,
    turn_order,
    write_iolog,
)
from real._fiolog import match_completions as _match
from real._fioprobe import drop_idle_leads
from real.datafile import IOLayout, _fill, _open_direct, io_layout
from real.engine import on_tmpfs
from real.errors import RealError
from real.fio import fio_binary, job_args, run_fio
from real.targets import Target

__all__ = ["FioReplayer", "fio_expressible", "fio_partial_check", "pad_offsets", "turn_order"]


def fio_expressible(plan: pa.Table, targets: Mapping[str, Target], gds: bool = False) -> str:
    """Why the fio engine cannot replay ``plan`` on ``targets``; '' when it can."""
    if fio_binary() is None:
        return "fio is not installed"
    if gds:
        return "the plan reads through GPUDirect Storage"
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    if not np.isin(kind, ["read", "write"]).all():
        return "the plan has copy/compute ops (fio replays I/O only)"
    if (plan.column("release_s").to_numpy() > 0).any():
        return "ops have release times"
    waves = fio_waves(plan)
    if isinstance(waves, str):
        return waves
    dev = np.where(kind == "read", plan.column("src").to_pylist(), plan.column("dst").to_pylist())
    for node in set(dev.tolist()):
        t = targets.get(node)
        if t is not None and t.pacing:
            return f"{node} is paced in user space (fio would not hold its limits)"
    for ops in waves:
        for node in set(dev[ops].tolist()):
            if len(set(kind[ops][dev[ops] == node].tolist())) > 1:
                return f"{node} is both read and written in one step (a read-only job verifies)"
        pads = wave_geometry(plan.take(ops), targets)[3]
        if isinstance(pads, str):
            return pads
    return ""


def wave_geometry(sub: pa.Table, targets: Mapping[str, Target]) -> tuple:
    """(layout, write per op, lead-in per node, pad offsets or why none) of one wave."""
    lay = io_layout(sub)
    write = np.asarray(sub.column("kind").to_pylist(), dtype=object) == "write"
    big = lay.largest_io()
    lead = {
        n: lead_in(targets[n], bool(write[lay.node == k].any()), int(big[k]))
        if n in targets
        else (0, 0)
        for k, n in enumerate(lay.nodes)
    }
    pads = pad_offsets(lay, targets, {n: max(BLOCK, b) for n, (_, b) in lead.items()})
    return lay, write, lead, pads


def fio_partial_check(plan: pa.Table) -> str:
    """Why fio's check of ``plan``'s reads is partial ('' when every I/O is 4 KiB).

    fio 3.33 checks every block's header (offset, magic) but, in reads longer than
    4 KiB, the crc32c of the last block only (measured: a flipped bit in any other
    block of an 8-128 KiB read passed), so ``auto`` gives fio 4 KiB I/Os only."""
    if (io_layout(plan).length == BLOCK).all():
        return ""
    return "I/Os longer than 4 KiB (fio 3.33 checks the crc32c of their last block only)"


@dataclass
class Wave:
    """One fio run: the plan rows ``ops``, their I/O ``layout`` (node indices of the
    wave's own), each node's pad offset and in-flight I/Os."""

    ops: np.ndarray
    layout: IOLayout
    write: np.ndarray  # per op of the wave
    pads: dict[str, int]
    qd: dict[str, int]
    lead: dict[str, tuple[int, int]]  # (count, bytes) of each node's lead-in pads


class FioReplayer:
    """Replays one fio-expressible plan once with fio (see the module docstring)."""

    def __init__(
        self, plan: pa.Table, targets: Mapping[str, Target], *, seed: int = 0, qd: int = 32
    ) -> None:
        why = fio_expressible(plan, targets)
        if why:
            raise RealError(f"the fio engine cannot replay this plan: {why}")
        self.plan, self.targets, self.seed = plan, targets, seed
        self.layout = io_layout(plan)
        missing = [n for n in self.layout.nodes if n not in targets]
        if missing:
            raise RealError(f"no target for {', '.join(missing)}: the plan reads or writes it")
        waves = fio_waves(plan)
        assert not isinstance(waves, str)  # fio_expressible said so
        self.waves = [self._wave(ops, qd) for ops in waves]
        self.fio_ceiling: dict[str, float] = {}  # fio's I/Os per second where probed
        runs = f", {len(self.waves)} runs (one per step)" if len(self.waves) > 1 else ""
        self.engine_note = f"fio io_uring iolog replay{runs}, reads verified by fio (crc32c)"

    def _wave(self, ops: np.ndarray, qd: int) -> Wave:
        """The wave of plan rows ``ops``.  A node's in-flight I/Os: its device slots
        (``Target.queue_depth``, else the larger of ``qd`` and its ops'), at most the
        sum of its ops' own ``queue_depth`` (0 = the slots), as the Python engine caps
        each op -- exact when the node has one op in the wave or all drain together."""
        sub = self.plan.take(ops)
        lay, write, lead, pads = wave_geometry(sub, self.targets)
        if isinstance(pads, str):
            raise RealError(f"the fio engine cannot replay this plan: {pads}")
        op_qd = sub.column("queue_depth").to_numpy()
        depth = {}
        for k, n in enumerate(lay.nodes):
            mine = op_qd[lay.node == k]
            slots = max(1, self.targets[n].queue_depth or max(qd, int(mine.max())))
            depth[n] = min(slots, int(np.where(mine > 0, np.minimum(mine, slots), slots).sum()))
        return Wave(ops, lay, write, pads, depth, lead)

    def run(self) -> Records:
        work = Path(tempfile.mkdtemp(prefix="kvtier-fio-"))
        need = self.layout.extents()
        try:
            for node in self.layout.nodes:
                pad_end = max(
                    w.pads.get(node, 0) + max(BLOCK, w.lead.get(node, (0, 0))[1])
                    for w in self.waves
                )
                fill_fio(self.targets[node], max(need[node], pad_end), work)
            self._drop_idle_leads(work)
            return self._run_waves(work)
        finally:
            self._restore(need)
            shutil.rmtree(work, ignore_errors=True)

    def _drop_idle_leads(self, work: Path) -> None:
        """Drop the lead-in of nodes the throttle would never hold
        (:func:`real._fioprobe.drop_idle_leads`); ``self.fio_ceiling``: the rates measured."""
        async_of = {n: _async(self.targets[n]) for n in self.layout.nodes}
        self.fio_ceiling = drop_idle_leads(
            self.waves, self.layout.nodes, self.targets, work, async_of
        )

    def _run_waves(self, work: Path) -> Records:
        """Each wave one fio run.  The records' clock runs the waves back to back, as
        the Python engine does: wave ``i`` starts when wave ``i - 1``'s last op ended,
        and a wave lasts from its first node's end of lead-in to its last completion
        (fio's start-up, lead-ins and closing pads are not on it)."""
        n = self.plan.num_rows
        start, end, cpu_op = np.zeros(n), np.zeros(n), np.zeros(n)
        busy = dict.fromkeys(self.layout.nodes, 0.0)
        t0 = cpu = fio_cpu = 0.0
        for i, w in enumerate(self.waves):
            wdir = work / f"wave{i}"
            wdir.mkdir()
            before = children_cpu_s()
            doc = run_fio(self._args(w, wdir), wdir / "replay.json", cwd=wdir)
            spent = children_cpu_s() - before
            jobs = {j["jobname"]: j for j in doc.get("jobs", [])}
            _job_errors(jobs)
            w_end, w_start = np.zeros(len(w.ops)), np.zeros(len(w.ops))
            for k, node in enumerate(w.layout.nodes):
                log = wdir / f"{node}_clat.log"
                done, began = completions(log, w.pads[node], w.lead[node][0])
                _match(w.layout, k, done, w_end, node)
                w_start[w.layout.node == k] = began
                j = jobs[node]
                fio_cpu += (j["usr_cpu"] + j["sys_cpu"]) / 1e5 * j["job_runtime"]
            origin = w_start.min()
            w_start, w_end = w_start - origin, np.maximum(w_end - origin, w_start - origin)
            for k, node in enumerate(w.layout.nodes):
                mine = w.layout.node == k
                busy[node] += float(w_end[mine].max() - w_start[mine].min())
            n_ios = np.diff(w.layout.first)
            start[w.ops], end[w.ops] = t0 + w_start, t0 + w_end
            cpu_op[w.ops] = spent * n_ios / max(1, n_ios.sum())
            t0 += float(w_end.max())
            cpu += spent
        ops = op_records(
            self.plan, start.tolist(), start.tolist(), end.tolist(), cpu_op.tolist(), "real"
        )
        return Records(
            ops=ops, devices=self._devices(busy, t0), stats=self._stats(t0, cpu, fio_cpu)
        )

    def _devices(self, busy: dict[str, float], makespan: float) -> pa.Table:
        lay, kind = self.layout, np.asarray(self.plan.column("kind").to_pylist(), dtype=object)
        op_of_io = np.repeat(np.arange(self.plan.num_rows), np.diff(lay.first))
        wrote = kind[op_of_io] == "write"
        rows: dict[str, list] = {f.name: [] for f in DEVICE_RECORD_SCHEMA}
        for k, node in enumerate(lay.nodes):
            mine = lay.io_node == k
            for col, val in (
                ("device", node),
                ("type", "ssd"),
                ("bytes_read", int(lay.length[mine & ~wrote].sum())),
                ("bytes_written", int(lay.length[mine & wrote].sum())),
                ("n_ios", int(mine.sum())),
                ("busy_s", busy[node]),
                ("util_mean", busy[node] / makespan if makespan > 0 else 0.0),
            ):
                rows[col].append(val)
        return pa.Table.from_pydict(rows, DEVICE_RECORD_SCHEMA)

    def _stats(self, makespan: float, cpu: float, fio_cpu: float) -> dict:
        return {
            "backend": "real",
            "ops": self.plan.num_rows,
            "ios": int(len(self.layout.offset)),
            "makespan_s": makespan,
            "cpu_s": cpu,
            "engine": "fio",
            "engine_note": self.engine_note,
            "verified": True,
            "queue_depth": {n: max(w.qd.get(n, 0) for w in self.waves) for n in self.layout.nodes},
            "paced": [],
            "time_resolution_s": 1e-3,
            "fio_runs": len(self.waves),
            "cpu_s_method": "user + system CPU of the fio process and its threads (io-wq "
            "workers included, as for the Python engine), shared over ops by I/O count",
            "fio_reported_cpu_s": fio_cpu,
            "fio_ceiling_iops": self.fio_ceiling,
            "lead_in_pads": {
                n: max(w.lead.get(n, (0, 0))[0] for w in self.waves) for n in self.layout.nodes
            },
            "notes": [why] if (why := fio_partial_check(self.plan)) else [],
        }

    def _args(self, w: Wave, work: Path) -> list[str]:
        lay, jobs = w.layout, []
        for k, node in enumerate(lay.nodes):
            t, qd = self.targets[node], w.qd[node]
            order = turn_order(lay, k)
            # closing pads: 2 x qd, and on a throttled device one more slice of them,
            # as long as the lead-in's: io-wq workers may hand I/Os to the throttle out
            # of order, and a plan I/O queued behind pads must still not be in the tail
            (lead, lead_bytes), pads = w.lead[node], PADS_PER_SLOT * qd
            at = np.full(2 * lead + pads, w.pads[node], np.int64)
            off = np.concatenate([at[:lead], lay.offset[order], at[lead:]])
            size = np.full(2 * lead + pads, max(BLOCK, lead_bytes), np.int64)
            length = np.concatenate([size[:lead], lay.length[order], size[lead:]])
            is_write = bool(w.write[lay.node == k].any())
            write_iolog(work / f"{node}.iolog", t.path, is_write, off, length)
            job = {"name": node, "read_iolog": work / f"{node}.iolog", "iodepth": qd}
            job |= {"write_lat_log": work / node, "do_verify": 0}
            if _async(t):
                job["force_async"] = 1
            jobs.append(job)
        glob = {"ioengine": "io_uring", "direct": 1, "replay_no_stall": 1, "thread": 1}
        glob |= {"disable_lat": 1, "disable_slat": 1}  # only the clat log is read
        glob |= {"log_offset": 1, "per_job_logs": 0, **VERIFY}
        return job_args(glob, jobs)

    def _restore(self, need: dict[str, int]) -> None:
        """Give every target kvtier's block format back (what the Python engine checks)."""
        for node in self.layout.nodes:
            t = self.targets[node]
            fd = _open_direct(node, Path(t.path), os.O_RDWR)
            try:
                _fill(fd, t, BlockFormat(node, self.seed), need[node])
            finally:
                os.close(fd)


def _job_errors(jobs: dict[str, dict]) -> None:
    """A :class:`RealError` when fio's JSON records a job error though fio exited 0
    (seen once under load: a bad block's read missing from the completion log)."""
    bad = {n: int(j["error"]) for n, j in jobs.items() if j.get("error")}
    if bad:
        what = ", ".join(
            f"{n}: errno {e} ({'a verify failure' if e == errno.EILSEQ else os.strerror(e)})"
            for n, e in bad.items()
        )
        raise RealError(f"fio job failed ({what})")


def _async(t: Target) -> bool:
    if t.kind == "loop":
        return True
    try:
        fd = os.open(t.path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return on_tmpfs(fd)
    finally:
        os.close(fd)

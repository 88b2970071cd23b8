"""fio as the replayer's I/O engine: the plan's exact I/Os, every read verified by fio.

What fio replays.  One fio run with one job per SSD node: a fio iolog v2
(``read_iolog``) holding exactly the (offset, length) of every I/O the plan
issues on that node (:func:`real.datafile.io_layout`: the regular pattern or
the op's extents, never merged or split), in the order kvtier's own replayer
issues them (the node's ops take turns one I/O at a time), kept ``qd`` deep
(``replay_no_stall=1``, ``ioengine=io_uring``, O_DIRECT; ``force_async=1`` on
tmpfs, as :func:`real.engine.on_tmpfs` does for the Python engine).

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
job) of one extra 4 KiB block past the node's extent, and fio's per-I/O
completion log (``write_lat_log``, ``log_offset=1``) must hold every plan I/O,
which is checked: the sorted (offset, length) list fio completed equals the
plan's, pads aside.  That is also the proof that fio issued exactly the plan's
I/Os.

What fio can express: one *wave* -- every op a read or write with no
``depends_on`` and ``release_s`` 0, each node only read or only written, no
target paced in user space, no GPUDirect path.  Kernel-throttled targets (the
loop devices of :mod:`real.emulate`) are fine: fio is this process's child and
so in the same blkio group, held to the same limits as the Python engine.
fio has no barrier between I/Os of a log (``sync`` and ``wait`` entries do
not drain the queue, measured) and a ``stonewall``/``wait_for`` between jobs
cost 200-300 ms each here, so plans with steps stay on the Python engine
(:func:`fio_expressible` says why).

What the records hold.  The same columns as the Python engine's.  Every op
is ready and starts at 0; its ``end_s`` is the completion of its last I/O in
fio's log, which has **1 ms resolution** (fio 3.33 logs times in ms); I/Os with
the same (offset, length) are paired with the log's in completion order.
Devices: bytes and I/Os of the plan (all verified), ``busy_s`` the job's
runtime (ms, fio's ``job_runtime``; it includes the pads, 2 x qd I/Os).
``cpu_s``: the fio process's user + system CPU over the run (:func:`children_cpu_s`,
io-wq workers included), shared over ops by I/O count.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from kvtier.records import DEVICE_RECORD_SCHEMA, Records, op_records
from real._blocks import BLOCK, BlockFormat
from real.datafile import IOLayout, _fill, _open_direct, io_layout
from real.engine import on_tmpfs
from real.errors import RealError
from real.fio import fio_binary, job_args, run_fio
from real.targets import Target

PADS_PER_SLOT = 2
FILL_BS = 1 << 20
VERIFY = {"verify": "crc32c", "verify_interval": BLOCK, "verify_state_save": 0}


def fio_expressible(plan: pa.Table, targets: Mapping[str, Target], gds: bool = False) -> str:
    """Why the fio engine cannot replay ``plan`` on ``targets``; '' when it can."""
    if fio_binary() is None:
        return "fio is not installed"
    if gds:
        return "the plan reads through GPUDirect Storage"
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    if not np.isin(kind, ["read", "write"]).all():
        return "the plan has copy/compute ops (fio replays I/O only)"
    if any(len(d) for d in plan.column("depends_on").to_pylist()):
        return "ops depend on other ops (fio keeps no barrier between I/Os)"
    if (plan.column("release_s").to_numpy() > 0).any():
        return "ops have release times"
    dev = np.where(kind == "read", plan.column("src").to_pylist(), plan.column("dst").to_pylist())
    for node in set(dev.tolist()):
        if len(set(kind[dev == node].tolist())) > 1:
            return f"{node} is both read and written (a read-only fio job is what verifies)"
        t = targets.get(node)
        if t is not None and t.pacing:
            return f"{node} is paced in user space (fio would not hold its limits)"
    pads = pad_offsets(io_layout(plan), targets)
    return pads if isinstance(pads, str) else ""


def pad_offsets(layout: IOLayout, targets: Mapping[str, Target]) -> dict[str, int] | str:
    """Per node, the 4 KiB block fio's pad I/Os use: the one just past the plan's extent,
    or, where the target ends there, the first block no plan I/O touches; a string
    says which node has none."""
    need, pads = layout.extents(), {}
    for k, node in enumerate(layout.nodes):
        t = targets.get(node)
        if t is None or need[node] + BLOCK <= t.size:
            pads[node] = need[node]
            continue
        mine = layout.io_node == k
        edges = np.zeros(need[node] // BLOCK + 1, np.int64)
        np.add.at(edges, layout.offset[mine] // BLOCK, 1)
        np.add.at(edges, (layout.offset[mine] + layout.length[mine]) // BLOCK, -1)
        free = np.flatnonzero(np.cumsum(edges)[:-1] == 0)
        if not len(free):
            return f"{node}: the plan reads or writes every block (fio needs one spare)"
        pads[node] = int(free[0]) * BLOCK
    return pads


def fio_partial_check(plan: pa.Table) -> str:
    """Why fio's check of ``plan``'s reads is partial ('' when every I/O is 4 KiB).

    fio 3.33 checks every block's header (offset, magic) but, in reads longer than
    4 KiB, the crc32c of the last block only (measured: a flipped bit in any other
    block of an 8-128 KiB read passed), so ``auto`` gives fio 4 KiB I/Os only."""
    if (io_layout(plan).length == BLOCK).all():
        return ""
    return "I/Os longer than 4 KiB (fio 3.33 checks the crc32c of their last block only)"


def turn_order(layout: IOLayout, k: int) -> np.ndarray:
    """Indices of node ``k``'s I/Os in the Python engine's order: its ops (all
    started at once) take turns, one I/O each, in op order."""
    ops = np.nonzero(layout.node == k)[0]
    counts = layout.first[ops + 1] - layout.first[ops]
    idx = np.concatenate([np.arange(layout.first[j], layout.first[j + 1]) for j in ops])
    turn = idx - np.repeat(layout.first[ops], counts)
    op = np.repeat(ops, counts)
    return idx[np.lexsort((op, turn))]


def write_iolog(path: Path, file: str, write: bool, off: np.ndarray, length: np.ndarray) -> None:
    """A fio v2 iolog: ``file`` opened, then one line per (offset, length)."""
    act = "write" if write else "read"
    pairs = zip(off.tolist(), length.tolist(), strict=True)
    body = "\n".join(f"{file} {act} {o} {n}" for o, n in pairs)
    path.write_text(f"fio version 2 iolog\n{file} add\n{file} open\n{body}\n")


def fill_fio(target: Target, size: int, work: Path) -> None:
    """Write ``size`` bytes (a multiple of 4 KiB) of ``target`` with fio verify headers."""
    bs = min(FILL_BS, size & -size)
    args = [
        f"--name=fill_{target.node}",
        f"--filename={target.path}",
        "--rw=write",
        f"--bs={bs}",
        f"--size={size}",
        "--direct=1",
        "--ioengine=psync",
        "--do_verify=0",
        *(f"--{k}={v}" for k, v in VERIFY.items()),
    ]
    run_fio(args, work / f"fill_{target.node}.json", cwd=work)


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
        pads = pad_offsets(self.layout, targets)
        if isinstance(pads, str):
            raise RealError(f"the fio engine cannot replay this plan: {pads}")
        self.pads = pads
        missing = [n for n in self.layout.nodes if n not in targets]
        if missing:
            raise RealError(f"no target for {', '.join(missing)}: the plan reads or writes it")
        op_qd = plan.column("queue_depth").to_numpy()
        self.qd = {
            n: max(1, targets[n].queue_depth or max(qd, int(op_qd[self.layout.node == k].max())))
            for k, n in enumerate(self.layout.nodes)
        }
        self.engine_note = "fio " + "io_uring iolog replay, reads verified by fio (crc32c)"

    def run(self) -> Records:
        work = Path(tempfile.mkdtemp(prefix="kvtier-fio-"))
        need = self.layout.extents()
        try:
            for node in self.layout.nodes:
                fill_fio(self.targets[node], max(need[node], self.pads[node] + BLOCK), work)
            before = children_cpu_s()
            doc = run_fio(self._args(work), work / "replay.json", cwd=work)
            return self._records(doc, work, children_cpu_s() - before)
        finally:
            self._restore(need)
            shutil.rmtree(work, ignore_errors=True)

    def _args(self, work: Path) -> list[str]:
        lay, jobs = self.layout, []
        write = np.asarray(self.plan.column("kind").to_pylist(), dtype=object) == "write"
        for k, node in enumerate(lay.nodes):
            t, qd = self.targets[node], self.qd[node]
            order = turn_order(lay, k)
            pads = PADS_PER_SLOT * qd
            off = np.concatenate([lay.offset[order], np.full(pads, self.pads[node], np.int64)])
            length = np.concatenate([lay.length[order], np.full(pads, BLOCK, np.int64)])
            is_write = bool(write[lay.node == k].any())
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

    def _records(self, doc: dict, work: Path, cpu: float) -> Records:
        lay, n = self.layout, self.plan.num_rows
        end = np.zeros(n)
        rows: dict[str, list] = {f.name: [] for f in DEVICE_RECORD_SCHEMA}
        jobs = {j["jobname"]: j for j in doc.get("jobs", [])}
        makespan = fio_cpu = 0.0
        for k, node in enumerate(lay.nodes):
            job = jobs[node]
            done = _completions(work / f"{node}_clat.log", self.pads[node])
            _match(lay, k, done, end, node)
            busy = job["job_runtime"] / 1e3
            makespan = max(makespan, busy)
            fio_cpu += (job["usr_cpu"] + job["sys_cpu"]) / 100 * busy
            nbytes = int(lay.length[lay.io_node == k].sum())
            wrote = bool(done["ddir"].iloc[0] == 1) if len(done) else False
            for col, val in (
                ("device", node),
                ("type", "ssd"),
                ("bytes_read", 0 if wrote else nbytes),
                ("bytes_written", nbytes if wrote else 0),
                ("n_ios", int((lay.io_node == k).sum())),
                ("busy_s", busy),
            ):
                rows[col].append(val)
        rows["util_mean"] = [b / makespan if makespan > 0 else 0.0 for b in rows["busy_s"]]
        n_ios = np.diff(lay.first)
        cpu_s = (cpu * n_ios / max(1, n_ios.sum())).tolist()
        zero = [0.0] * n
        ops = op_records(self.plan, zero, zero, end.tolist(), cpu_s, "real")
        stats = {
            "backend": "real",
            "ops": n,
            "ios": int(n_ios.sum()),
            "makespan_s": makespan,
            "cpu_s": cpu,
            "engine": "fio",
            "engine_note": self.engine_note,
            "verified": True,
            "queue_depth": self.qd,
            "paced": [],
            "time_resolution_s": 1e-3,
            "cpu_s_method": "user + system CPU of the fio process and its threads (io-wq "
            "workers included, as for the Python engine), shared over ops by I/O count",
            "fio_reported_cpu_s": fio_cpu,
            "notes": [why] if (why := fio_partial_check(self.plan)) else [],
        }
        return Records(
            ops=ops, devices=pa.Table.from_pydict(rows, DEVICE_RECORD_SCHEMA), stats=stats
        )

    def _restore(self, need: dict[str, int]) -> None:
        """Give every target kvtier's block format back (what the Python engine checks)."""
        for node in self.layout.nodes:
            t = self.targets[node]
            fd = _open_direct(node, Path(t.path), os.O_RDWR)
            try:
                _fill(fd, t, BlockFormat(node, self.seed), need[node])
            finally:
                os.close(fd)


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's reaped children so far.

    Around one :func:`run_fio` this is fio's whole CPU: its io-wq workers are
    threads of fio's process and count here, while fio's own ``usr_cpu`` /
    ``sys_cpu`` leave them out (measured on tmpfs with ``force_async``: 1.4 us
    per 4 KiB read reported against 3.7 us here)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


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


def _completions(path: Path, pad_off: int) -> pd.DataFrame:
    """fio's per-I/O completion log of one job, pads left out: time_s, offset, length."""
    cols = ["ms", "clat_ns", "ddir", "length", "offset", "prio"]
    df = pd.read_csv(path, header=None, names=cols, usecols=range(5), skipinitialspace=True)
    df = df[df["offset"] != pad_off]
    return df.assign(time_s=df["ms"] / 1e3)


def _match(lay: IOLayout, k: int, done: pd.DataFrame, end: np.ndarray, node: str) -> None:
    """Check fio completed exactly node ``k``'s plan I/Os; set each op's end (max over
    its I/Os) in ``end``."""
    mine = np.nonzero(lay.io_node == k)[0]
    p_off, p_len = lay.offset[mine], lay.length[mine]
    f_off, f_len = done["offset"].to_numpy(np.int64), done["length"].to_numpy(np.int64)
    p_ord = np.lexsort((mine, p_len, p_off))
    f_ord = np.lexsort((done["time_s"].to_numpy(), f_len, f_off))
    if len(f_off) != len(p_off) or not (
        np.array_equal(p_off[p_ord], f_off[f_ord]) and np.array_equal(p_len[p_ord], f_len[f_ord])
    ):
        raise RealError(
            f"{node}: fio completed {len(f_off)} I/Os, not the plan's {len(p_off)} "
            "(offsets and lengths differ)"
        )
    op_of_io = np.repeat(np.arange(len(lay.node)), np.diff(lay.first))
    np.maximum.at(end, op_of_io[mine[p_ord]], done["time_s"].to_numpy()[f_ord])

"""Export a transfer plan as fio iologs and replay it with fio: an independent cross-check.

One fio iolog v3 per SSD (``<node>.iolog``), each naming only that device's
path, and one fio job per log (``read_iolog=``), so fio drives the devices
in parallel as kvtier's replayer does.  fio's ``replay_redirect`` is not
used: it sends every log's I/O to one device.

The v3 format (fio HOWTO, "Trace file format v3"): the first line is
``fio version 3 iolog``; then ``<timestamp_us> <file> add|open|close`` and
``<timestamp_us> <file> read|write <offset> <length>``, timestamps in
microseconds from the start of the run.  Each plan op becomes its ``n_ios``
I/O lines (:func:`kvtier.contracts.plan.io_extents`: the regular pattern or the op's
extents, exactly the ranges kvtier's replayer issues) stamped with
the op's start: ``start_s`` from a records table (simulated or real) when
one is given, else the op's ``release_s``.  Lines are ordered by time, then
op, then I/O.

Replay mode: ``replay_no_stall=1`` by default -- fio ignores the timestamps
and issues each device's I/Os in order as fast as ``iodepth`` allows.  That
is the throughput cross-check: the same bytes, offsets, sizes and per-device
split as the plan, at the devices' own pace, which is what kvtier's replay of
a plan of large reads should approach (ratio >= 0.9).  With ``no_stall=False``
fio honours the timestamps (a timing replay, throughput set by the plan).
fio knows nothing of ``depends_on``: within a device it keeps log order,
across devices nothing, so it bounds kvtier's throughput from above.

Throttled targets: fio runs inside the emulated set's cgroup (``cgroup=``);
paced targets get the same limits as fio ``rate``/``rate_iops`` options.
fio reports runtimes in milliseconds: compare plans that run for 0.5 s or
more.  fio 3.33 leaves an iolog replay's last ``iodepth - 1`` completions
out of its byte counts, so the bytes reported are the plan's (fio's issued
I/O count is checked against the plan).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import io_extents
from real import fio
from real.errors import RealError
from real.ownership import check_write
from real.targets import Target

HEADER = "fio version 3 iolog"
SECTOR = 512  # O_DIRECT alignment fio needs for offsets and lengths


def op_start_times(plan: pa.Table, records: pa.Table | None = None) -> np.ndarray:
    """Start time (s) of every plan op: ``records.start_s`` by ``op_id``, else ``release_s``."""
    start = plan.column("release_s").to_numpy().astype(float).copy()
    if records is not None:
        ids = records.column("op_id").to_numpy()
        times = records.column("start_s").to_numpy().astype(float)
        ok = (ids >= 0) & (ids < len(start)) & np.isfinite(times)
        start[ids[ok]] = times[ok]
    return start


def iolog_lines(plan: pa.Table, target: Target, start_s: np.ndarray) -> list[str]:
    """The iolog v3 lines of ``target``'s node (empty when the plan never touches it)."""
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    src = np.asarray(plan.column("src").to_pylist(), dtype=object)
    dst = np.asarray(plan.column("dst").to_pylist(), dtype=object)
    mine = ((kind == "read") & (src == target.node)) | ((kind == "write") & (dst == target.node))
    ops = np.nonzero(mine)[0]
    if not len(ops):
        return []
    ios = io_extents(plan, ops)  # the plan's exact I/Os: regular pattern or extents
    n_ios = np.diff(ios.ptr)
    bad = np.nonzero((ios.offset % SECTOR) | (ios.length % SECTOR))[0]
    if len(bad):
        raise RealError(
            f"op {ios.op[bad[0]]}: I/O at offset {ios.offset[bad[0]]} of {ios.length[bad[0]]} "
            f"bytes is not a multiple of {SECTOR} (O_DIRECT)"
        )
    end = ios.offset + ios.length
    bad = np.nonzero(end > target.size)[0]
    if len(bad):
        b = bad[0]
        raise RealError(
            f"op {ios.op[b]}: ends at byte {end[b]}, beyond {target.path} ({target.size})"
        )
    stamp = np.repeat(np.maximum(0, np.round(start_s[ops] * 1e6)).astype(np.int64), n_ios)
    k = np.arange(len(ios.op)) - np.repeat(ios.ptr[:-1], n_ios)
    order = np.lexsort((k, ios.op, stamp))
    ts = stamp[order].tolist()
    act = kind[ios.op[order]].tolist()
    off = ios.offset[order].tolist()
    size = ios.length[order].tolist()
    path = target.path
    lines = [HEADER, f"0 {path} add", f"0 {path} open"]
    lines += [f"{t} {path} {a} {o} {n}" for t, a, o, n in zip(ts, act, off, size, strict=True)]
    lines.append(f"{ts[-1]} {path} close")
    return lines


def export_iologs(
    plan: pa.Table,
    targets: Sequence[Target],
    out_dir: str | Path,
    records: pa.Table | None = None,
) -> dict[str, Path]:
    """Write ``<node>.iolog`` for every target the plan touches; return node -> path."""
    _check_nodes(plan, targets)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = op_start_times(plan, records)
    logs = {}
    for t in targets:
        lines = iolog_lines(plan, t, start)
        if lines:
            logs[t.node] = out / f"{t.node}.iolog"
            logs[t.node].write_text("\n".join(lines) + "\n")
    return logs


def _check_nodes(plan: pa.Table, targets: Sequence[Target]) -> None:
    kinds = plan.column("kind").to_pylist()
    used = {s for k, s in zip(kinds, plan.column("src").to_pylist(), strict=True) if k == "read"}
    used |= {d for k, d in zip(kinds, plan.column("dst").to_pylist(), strict=True) if k == "write"}
    missing = sorted(used - {t.node for t in targets})
    if missing:
        given = ", ".join(t.node for t in targets) or "none"
        raise RealError(
            f"--target: no target for plan SSD node(s) {', '.join(missing)} (given: {given})"
        )


def job_file(
    logs: Mapping[str, Path],
    targets: Sequence[Target],
    plan: pa.Table,
    *,
    no_stall: bool = True,
    iodepth: int | None = None,
) -> str:
    """A fio job file: one job per log; ``iodepth`` per device: the argument, else the
    target's queue depth, else the deepest op of that device in the plan, else 32."""
    lines = ["[global]", "ioengine=io_uring", "direct=1", f"replay_no_stall={int(no_stall)}"]
    by_node = {t.node: t for t in targets}
    for node, log in logs.items():
        t = by_node[node]
        depth = iodepth or t.queue_depth or _plan_depth(plan, node) or 32
        lines += ["", f"[{node}]", f"read_iolog={Path(log).resolve()}", f"iodepth={depth}"]
        if t.pacing and not t.limits.unlimited:
            lines += [f"rate={_paced_rate(t, plan)}"]
        elif not t.limits.unlimited:
            # kernel-throttled: an inline submission would block in the throttle and
            # stall the job's queue; IOSQE_ASYNC on every I/O, as kvtier's replayer does
            lines += ["force_async=1"]
    return "\n".join(lines) + "\n"


def _paced_rate(t: Target, plan: pa.Table) -> str:
    """fio's ``rate=read,write`` (bytes/s) for a paced target: fio takes ``rate``
    or ``rate_iops``, not both, so each direction gets the tighter of its
    byte limit and its IOPS limit times the plan's mean I/O size there."""
    lim, tot = t.limits, device_totals(plan, t.node)
    rates = []
    for bps, iops, nbytes, ios in (
        (lim.read_bps, lim.read_iops, tot["read"], tot["read_ios"]),
        (lim.write_bps, lim.write_iops, tot["write"], tot["write_ios"]),
    ):
        cands = [b for b in (bps, iops * nbytes // ios if iops and ios else 0) if b > 0]
        rates.append(str(int(min(cands))) if cands else "")
    return ",".join(rates)


def _plan_depth(plan: pa.Table, node: str) -> int:
    kind = plan.column("kind").to_pylist()
    src, dst = plan.column("src").to_pylist(), plan.column("dst").to_pylist()
    qd = plan.column("queue_depth").to_pylist()
    mine = [
        q
        for k, s, d, q in zip(kind, src, dst, qd, strict=True)
        if (k == "read" and s == node) or (k == "write" and d == node)
    ]
    return max(mine, default=0)


def fio_replay_throughput(
    plan: pa.Table,
    targets: Sequence[Target],
    out_dir: str | Path,
    *,
    records: pa.Table | None = None,
    no_stall: bool = True,
    iodepth: int | None = None,
    cgroup: str | Path | None = None,
    allow_write: bool = False,
) -> dict[str, Any]:
    """Export, run fio on the logs, and report what fio moved and how fast.

    Returns ``bytes``, ``read_bytes``, ``write_bytes``, ``elapsed_s`` (the
    longest job), ``throughput_bps`` (bytes / elapsed_s), ``per_device``
    (node -> bytes, elapsed_s, throughput_bps) and the paths of the job
    file, logs and fio JSON.  Writes pass :func:`real.ownership.check_write`:
    targets kvtier did not create only with ``allow_write``, and never one
    holding a filesystem or partition table.
    """
    out = Path(out_dir)
    logs = export_iologs(plan, targets, out, records)
    if not logs:
        raise RealError("the plan has no reads or writes on the given targets")
    writers = _written_nodes(plan)
    for t in targets:
        if t.node in writers:
            check_write(t.node, t.path, t.created, allow_write, "--allow-write")
    job = out / "replay.fio"
    job.write_text(job_file(logs, targets, plan, no_stall=no_stall, iodepth=iodepth))
    doc = fio.run_fio([str(job)], out / "replay.json", cgroup=cgroup)
    return summarize_replay(doc, plan) | {
        "job_file": str(job),
        "iologs": {n: str(p) for n, p in logs.items()},
        "fio_json": str(out / "replay.json"),
        "no_stall": no_stall,
    }


def _written_nodes(plan: pa.Table) -> set[str]:
    kinds = plan.column("kind").to_pylist()
    return {d for k, d in zip(kinds, plan.column("dst").to_pylist(), strict=True) if k == "write"}


def device_totals(plan: pa.Table, node: str) -> dict[str, int]:
    """Bytes read and written and I/Os (all, reads, writes) of ``node`` in ``plan``."""
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    src = np.asarray(plan.column("src").to_pylist(), dtype=object)
    dst = np.asarray(plan.column("dst").to_pylist(), dtype=object)
    nbytes, n_ios = plan.column("bytes").to_numpy(), plan.column("n_ios").to_numpy()
    reads = (kind == "read") & (src == node)
    writes = (kind == "write") & (dst == node)
    return {
        "read": int(nbytes[reads].sum()),
        "write": int(nbytes[writes].sum()),
        "ios": int(n_ios[reads | writes].sum()),
        "read_ios": int(n_ios[reads].sum()),
        "write_ios": int(n_ios[writes].sum()),
    }


def summarize_replay(doc: Mapping[str, Any], plan: pa.Table) -> dict[str, Any]:
    """Bytes and throughput of a fio iolog replay (jobs named by node, run concurrently).

    The bytes are the plan's: fio 3.33 leaves the last ``iodepth - 1``
    completions of an iolog replay out of ``io_bytes`` (its ``total_ios``
    counts them all, and is checked against the plan), so ``io_bytes`` would
    under-report; the time is fio's ``job_runtime`` (ms), which ends with the
    last counted completion, so ``bytes / elapsed`` over-states the rate by
    about ``iodepth / I/Os``; ``measured_bps`` (fio's counted bytes over the
    same time) does not.
    """
    per_device = {}
    total = {"read": 0, "write": 0}
    for job in doc.get("jobs", []):
        node = job["jobname"]
        if job.get("error"):
            raise RealError(f"fio job {node} failed: error {job['error']}")
        want = device_totals(plan, node)
        issued = int(job["read"]["total_ios"]) + int(job["write"]["total_ios"])
        if issued != want["ios"]:
            raise RealError(f"fio issued {issued} I/Os on {node}, the plan has {want['ios']}")
        total["read"] += want["read"]
        total["write"] += want["write"]
        nbytes = want["read"] + want["write"]
        elapsed = job["job_runtime"] / 1e3
        per_device[node] = {
            "bytes": nbytes,
            "fio_io_bytes": int(job["read"]["io_bytes"]) + int(job["write"]["io_bytes"]),
            "elapsed_s": elapsed,
            "throughput_bps": nbytes / elapsed if elapsed else float("nan"),
        }
    elapsed = max((d["elapsed_s"] for d in per_device.values()), default=0.0)
    nbytes = total["read"] + total["write"]
    counted = sum(d["fio_io_bytes"] for d in per_device.values())
    return {
        "bytes": nbytes,
        # what fio counted over the time it counted it: the rate without the tail bias
        "fio_io_bytes": counted,
        "measured_bps": counted / elapsed if elapsed else float("nan"),
        "read_bytes": total["read"],
        "write_bytes": total["write"],
        "elapsed_s": elapsed,
        "throughput_bps": nbytes / elapsed if elapsed else float("nan"),
        "per_device": per_device,
    }

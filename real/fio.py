"""fio as kvtier's measuring instrument: run it, keep its JSON, read it back.

kvtier never measures a device with its own loop: calibration
(:mod:`real.calibrate`), the emulator's capacity check (:mod:`real.emulate`)
and the iolog cross-check (:mod:`real.iolog`) all run fio with
``--output-format=json --output=FILE`` and keep ``FILE`` as evidence.  This
module is the only place that spawns fio and parses its JSON.

* :func:`run_fio` runs one fio command line (options before the first
  ``--name`` are global) or job file, optionally inside a blkio cgroup (the
  child joins it before ``exec``, so an emulated device's throttle applies to
  fio exactly as to the replayer), and returns the parsed JSON.
* :func:`summarize` turns one fio JSON document into a :class:`FioRun`: the
  job options that define a measurement point (rw, block size, queue depth,
  files) and, per direction, the rates summed over the jobs that ran
  together (one job per device).

fio's JSON fields used: per job ``job options`` (and the document's
``global options``), and per direction ``io_bytes``, ``bw_bytes``, ``iops``,
``runtime`` (ms), ``total_ios`` and ``clat_ns.mean`` / ``lat_ns.mean``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from real._signals import SIGNALS, phase
from real.cleanup import REGISTRY, kill_group, start_time
from real.errors import RealError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def fio_binary() -> str | None:
    """Path of the fio executable, or None when it is not installed."""
    return shutil.which("fio")


def _package_manager() -> list[str] | None:
    """The distribution's non-interactive install command for one package, if any."""
    if shutil.which("apt-get"):
        return ["apt-get", "install", "-y", "-q", "fio"]
    if shutil.which("dnf"):
        return ["dnf", "install", "-y", "-q", "fio"]
    if shutil.which("yum"):
        return ["yum", "install", "-y", "-q", "fio"]
    return None


def missing_message() -> str:
    """One line: fio is missing, the package and the command that installs it."""
    cmd = _package_manager()
    tool = {"apt-get": "apt"}.get(cmd[0], cmd[0]) if cmd else None
    how = f"{tool} install fio" if tool else "apt install fio / dnf install fio"
    return f"fio is not installed: install the fio package ({how}), or pass --no-fio"


def require_fio() -> str:
    path = fio_binary()
    if path is None:
        raise RealError(missing_message())
    return path


def ensure_fio(install: bool) -> str:
    """fio's path; when missing and ``install`` (root, non-interactive), install it first.

    Otherwise a :class:`RealError` names the package and the command to install it.
    """
    path = fio_binary()
    if path is not None:
        return path
    cmd = _package_manager()
    if not install or cmd is None or os.geteuid() != 0:
        raise RealError(missing_message())
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or fio_binary() is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RealError(f"`{' '.join(cmd)}` failed ({last}); install fio, or pass --no-fio")
    return require_fio()


def parse_size(text: str | int) -> int:
    """fio-style size: ``4096``, ``4k``, ``1M``, ``2MiB`` (binary multiples, as fio's default)."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def job_args(global_opts: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> list[str]:
    """fio command-line options: globals first, then ``--name=`` and options per job."""
    args = [f"--{k}={v}" for k, v in global_opts.items()]
    for job in jobs:
        args.append(f"--name={job['name']}")
        args += [f"--{k}={v}" for k, v in job.items() if k != "name"]
    return args


def point_options(
    rw: str, bs: int, iodepth: int, size: int, runtime: str, ramp: str = "0"
) -> dict[str, Any]:
    """Global options of one measurement point: io_uring, O_DIRECT, time-based, random
    offsets drawn afresh (``norandommap``, ``randrepeat=0``) over the first ``size`` bytes."""
    return {
        "rw": rw,
        "bs": bs,
        "iodepth": iodepth,
        "ioengine": "io_uring",
        "direct": 1,
        "size": size,
        "runtime": runtime,
        "ramp_time": ramp,
        "time_based": 1,
        "norandommap": 1,
        "randrepeat": 0,
    }


def run_fio(
    args: Sequence[str],
    output: str | Path,
    *,
    cgroup: str | Path | None = None,
    timeout_s: float = 600.0,
    cwd: str | Path | None = None,
) -> dict[str, Any]:
    """Run ``fio ARGS --output-format=json --output=OUTPUT`` and return the parsed JSON.

    ``cgroup``: a cgroup v1 directory the fio process joins before it starts.
    A failing fio raises :class:`RealError` with its last line of stderr.
    """
    fio = require_fio()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    cmd = [fio, *args, "--output-format=json", f"--output={output}"]
    procs = Path(cgroup) / "cgroup.procs" if cgroup is not None else None

    def join_cgroup() -> None:  # runs in the child between fork and exec
        if procs is not None:
            procs.write_text(str(os.getpid()))

    rc, text = _run_group(cmd, timeout_s, cwd, join_cgroup if procs is not None else None)
    if rc is None:
        raise RealError(f"fio ran longer than {timeout_s:.0f} s: {' '.join(cmd)}")
    if rc != 0:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {rc}"
        why = next(
            (ln for ln in lines if "verify" in ln and "failed" in ln or ln.startswith("verify:")),
            why,
        )
        raise RealError(f"fio failed ({why}); command: {' '.join(cmd)}")
    return load_fio_json(output)


def _run_group(cmd: list[str], timeout_s: float, cwd, preexec) -> tuple[int | None, str]:
    """Run ``cmd`` as the leader of its own process group (fio forks one process per
    job), registered in :data:`real.cleanup.REGISTRY`; the whole group is killed
    when the run leaves early (timeout, signal, error).  ``(status, output)``;
    status None on timeout."""

    def child() -> None:  # between fork and exec: signals as usual, then the cgroup
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        if preexec is not None:
            preexec()

    # no signal between the start and the registration: fio would be left running
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            preexec_fn=child,
            start_new_session=True,
        )
        leader = start_time(proc.pid)
        rid = REGISTRY.add("proc", pgid=proc.pid, start=leader, what="fio")
    except subprocess.SubprocessError as exc:  # preexec failure: cgroup not joinable
        raise RealError(f"cannot start fio ({exc}): {' '.join(cmd)}") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    try:
        phase("fio")
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        return None, ""
    finally:
        kill_group(proc.pid, leader)  # fio's job processes, whatever happened
        proc.wait()
        REGISTRY.drop(rid)


def load_fio_json(path: str | Path) -> dict[str, Any]:
    """Parse a fio JSON output file (fio may put warning lines before the JSON)."""
    text = Path(path).read_text()
    start = text.find("{")
    if start < 0:
        raise RealError(f"{path}: no fio JSON in the file")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise RealError(f"{path}: not fio JSON: {exc}") from None


@dataclass(frozen=True)
class DirStats:
    """One direction (read or write) of a fio run, summed over its jobs.

    ``bw_bps`` and ``iops`` add up the jobs' rates (jobs run concurrently);
    latencies are means over all I/Os of all jobs, in microseconds.
    """

    io_bytes: int = 0
    total_ios: int = 0
    bw_bps: float = 0.0
    iops: float = 0.0
    runtime_s: float = 0.0
    clat_mean_us: float = 0.0
    lat_mean_us: float = 0.0


@dataclass(frozen=True)
class FioRun:
    """One fio invocation: the point it measured and what it saw.

    ``rw`` is fio's ``rw`` option (``randread``, ``write`` ...; empty for an
    iolog replay), ``bs`` bytes, ``iodepth`` per job, ``filenames`` one per
    job, ``source`` the JSON file's name (provenance of fitted numbers).
    """

    source: str
    rw: str
    bs: int
    iodepth: int
    filenames: tuple[str, ...]
    read: DirStats
    write: DirStats

    @property
    def is_read(self) -> bool:
        return "read" in self.rw

    @property
    def stats(self) -> DirStats:
        """The direction the point measures."""
        return self.read if self.is_read else self.write


def _dir_stats(jobs: Sequence[Mapping[str, Any]], ddir: str) -> DirStats:
    parts = [j[ddir] for j in jobs if j.get(ddir, {}).get("total_ios", 0) > 0]
    if not parts:
        return DirStats()
    ios = sum(int(p["total_ios"]) for p in parts)
    return DirStats(
        io_bytes=sum(int(p["io_bytes"]) for p in parts),
        total_ios=ios,
        bw_bps=float(sum(p["bw_bytes"] for p in parts)),
        iops=float(sum(p["iops"] for p in parts)),
        runtime_s=max(p["runtime"] for p in parts) / 1e3,
        clat_mean_us=sum(p["clat_ns"]["mean"] * p["total_ios"] for p in parts) / ios / 1e3,
        lat_mean_us=sum(p["lat_ns"]["mean"] * p["total_ios"] for p in parts) / ios / 1e3,
    )


def summarize(doc: Mapping[str, Any], source: str = "") -> FioRun:
    """Summarise a fio JSON document (all its jobs are one measurement point)."""
    jobs = doc.get("jobs") or []
    if not jobs:
        raise RealError(f"{source or 'fio output'}: no jobs in the fio JSON")
    glob = doc.get("global options", {})
    opts = [{**glob, **j.get("job options", {})} for j in jobs]
    errors = [j for j in jobs if j.get("error")]
    if errors:
        raise RealError(
            f"{source}: fio job {errors[0]['jobname']} failed: error {errors[0]['error']}"
        )
    first = opts[0]
    return FioRun(
        source=source,
        rw=str(first.get("rw", first.get("readwrite", ""))),
        bs=parse_size(first.get("bs", first.get("blocksize", 0))),
        iodepth=int(first.get("iodepth", 1)),
        filenames=tuple(str(o.get("filename", "")) for o in opts),
        read=_dir_stats(jobs, "read"),
        write=_dir_stats(jobs, "write"),
    )


def per_job(doc: Mapping[str, Any], source: str = "") -> list[FioRun]:
    """One :class:`FioRun` per job of ``doc`` (each device's own rates)."""
    glob = doc.get("global options", {})
    return [summarize({"global options": glob, "jobs": [j]}, source) for j in doc.get("jobs", [])]

"""``kvtier real calibrate``: measure this machine's SSDs with fio and write a profile.

A sweep runs fio (io_uring, O_DIRECT, random offsets, time-based) over block
sizes x queue depths, reads and writes, on each device alone and on all
devices at once (a shared upstream bottleneck shows only then).  Every point
is one fio invocation whose JSON stays in ``OUT/fio/`` (``ssd0-randread-4k-
qd1.json``, ``all-randwrite-2m-qd64.json``) -- the evidence each fitted
number cites.  :mod:`real.calibrate_fit` fits the numbers; this module
writes them into a profile (``hwprofiles/local.yaml`` by default): the SSD
groups and their links are measured, the CPU core count is this machine's,
and GPUs, DRAM and software costs come from a base profile, as the header
says.

Sweeps (:data:`QUICK` for ``make calibrate``, :data:`FULL` for ``--full``):
QUICK covers 4 KiB / 64 KiB / 512 KiB x QD 1 / 8 / 32 on the first device,
and two corners -- 4 KiB at QD 32 (IOPS), 512 KiB at QD 8 (bandwidth) -- on
the others and all at once, 1 s per point (about a minute for four
devices); FULL covers 4 KiB..2 MiB x QD 1..64 on every device and all at
once, 3 s per point.

Two cautions on short points.  A time-based fio run counts the I/Os still
in flight when it stops, so a point whose queue holds ``QD x bs`` bytes
worth a sizeable part of the runtime at the device's rate reads low; QUICK
keeps that queue at 4 MiB for the bandwidth point.  And on emulated
devices the loop driver may split an I/O above 512 KiB (128 segments of
4 KiB pages unless the buffer is physically contiguous; always above its
1280 KiB ``max_sectors_kb``), and the blkio throttle then passes such I/Os
at about half the bandwidth limit (seen on Linux 6.18), so QUICK stops at
512 KiB; FULL's 1 and 2 MiB points show the effect.

Targets: files kvtier creates in directories the user names (``--dir``,
one per device, removed afterwards), or emulated devices (``--emulate
PROFILE``, :mod:`real.emulate`), whose fio jobs run inside their throttle
group -- or, when pacing, carry the same limits as fio ``rate`` options.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hwprofiles.loader import PROFILE_DIR, ProfileError, load_profile
from hwprofiles.schema import HardwareProfile
from real import fio
from real.calibrate_fit import (
    DeviceFit,
    UpstreamFit,
    calibrated_profile,
    fit_device,
    fit_upstream,
)
from real.errors import RealError
from real.profile_yaml import write_profile
from real.targets import Target

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Sweep:
    """Which points to measure; ``full_on_all``: the whole grid on every device
    and all at once (else on the first device only, corners elsewhere)."""

    block_sizes: tuple[int, ...]
    depths: tuple[int, ...]
    runtime_s: float
    size: int
    full_on_all: bool


QUICK = Sweep((4 * KIB, 64 * KIB, 512 * KIB), (1, 8, 32), 1.0, 256 * MIB, False)
FULL = Sweep(
    (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 2 * MIB),
    (1, 2, 4, 8, 16, 32, 64),
    3.0,
    1 << 30,
    True,
)
_POINT_FILE = re.compile(r"(ssd\d+|all)-rand(read|write)-\d+[km]-qd\d+\.json")
RWS = ("randread", "randwrite")


@dataclass(frozen=True)
class Point:
    devices: tuple[int, ...]
    rw: str
    bs: int
    iodepth: int

    def filename(self, n: int) -> str:
        who = f"ssd{self.devices[0]}" if len(self.devices) == 1 else "all"
        size = f"{self.bs // MIB}m" if self.bs % MIB == 0 else f"{self.bs // KIB}k"
        return f"{who}-{self.rw}-{size}-qd{self.iodepth}.json"


def sweep_points(n: int, sweep: Sweep) -> list[Point]:
    """Every point of ``sweep`` on ``n`` devices, in the order they run."""
    grid = [(rw, bs, qd) for rw in RWS for bs in sweep.block_sizes for qd in sweep.depths]
    mid = sweep.depths[len(sweep.depths) // 2]
    corners = [
        (rw, bs, qd)
        for rw in RWS
        for bs, qd in ((sweep.block_sizes[0], max(sweep.depths)), (sweep.block_sizes[-1], mid))
    ]
    points = [Point((0,), *p) for p in grid]
    for i in range(1, n):
        points += [Point((i,), *p) for p in (grid if sweep.full_on_all else corners)]
    if n > 1:
        points += [Point(tuple(range(n)), *p) for p in (grid if sweep.full_on_all else corners)]
    return points


def run_sweep(
    targets: Sequence[Target], sweep: Sweep, evidence: Path, cgroup: str | Path | None = None
) -> tuple[list[list[fio.FioRun]], list[fio.FioRun]]:
    """Run every point; return the runs of each device alone and of all at once."""
    for t in targets:
        if not t.created:
            raise RealError(
                f"{t.path}: calibration writes to its targets; kvtier did not create it"
            )
    for old in evidence.glob("*.json") if evidence.is_dir() else ():
        if _POINT_FILE.fullmatch(old.name):  # a previous sweep's point: not this one's evidence
            old.unlink()
    alone: list[list[fio.FioRun]] = [[] for _ in targets]
    together: list[fio.FioRun] = []
    size = min([sweep.size, *(t.size for t in targets)])
    runtime = f"{int(sweep.runtime_s * 1000)}ms"
    for point in sweep_points(len(targets), sweep):
        opts = fio.point_options(point.rw, point.bs, point.iodepth, size, runtime)
        jobs = [_job(targets[i]) for i in point.devices]
        name = point.filename(len(targets))
        doc = fio.run_fio(fio.job_args(opts, jobs), evidence / name, cgroup=cgroup)
        run = fio.summarize(doc, name)
        (alone[point.devices[0]] if len(point.devices) == 1 else together).append(run)
    return alone, together


def _job(t: Target) -> dict[str, object]:
    job: dict[str, object] = {"name": t.node, "filename": t.path}
    if t.pacing and not t.limits.unlimited:  # fio holds the limits the replayer would
        lim = t.limits
        job["rate"] = f"{lim.read_bps},{lim.write_bps}"
        job["rate_iops"] = f"{lim.read_iops},{lim.write_iops}"
    return job


def fit_all(
    alone: Sequence[Sequence[fio.FioRun]], together: Sequence[fio.FioRun]
) -> tuple[list[DeviceFit], UpstreamFit | None]:
    """Fit every device (the first fully swept one lends latency and depth to the rest)."""
    first = fit_device(alone[0])
    fits = [first] + [fit_device(runs, fallback=first) for runs in alone[1:]]
    return fits, fit_upstream(fits, together)


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` measured and wrote."""

    fits: tuple[DeviceFit, ...]
    upstream: UpstreamFit | None
    profile: HardwareProfile
    profile_path: Path
    evidence: Path


def calibrate(
    targets: Sequence[Target],
    out: str | Path,
    *,
    sweep: Sweep = QUICK,
    base: str | Path | HardwareProfile = "h20-8ssd",
    profile_path: str | Path | None = None,
    cgroup: str | Path | None = None,
    capacity_gib: Sequence[float] | None = None,
) -> Calibration:
    """Sweep ``targets`` with fio, fit, write the profile (default ``hwprofiles/local.yaml``;
    its name is the file's stem) and ``OUT/calibration.json``; fio JSON goes to ``OUT/fio``."""
    out = Path(out)
    base_profile = base if isinstance(base, HardwareProfile) else _load(base)
    path = Path(profile_path) if profile_path else PROFILE_DIR / "local.yaml"
    evidence = out / "fio"
    alone, together = run_sweep(targets, sweep, evidence, cgroup)
    fits, upstream = fit_all(alone, together)
    caps = capacity_gib or [t.size / 2**30 for t in targets]
    profile, comments = calibrated_profile(fits, upstream, base_profile, path.stem, caps)
    base_file = Path(base_profile.source_file).name or f"{base_profile.name}.yaml"
    header = [
        f"Measured by `kvtier real calibrate` on {dt.date.today().isoformat()} "
        f"({'full' if sweep.full_on_all else 'quick'} sweep, {_fio_version()}, io_uring, "
        "O_DIRECT):",
        f"{len(targets)} devices: " + ", ".join(f"{t.node}={t.path}" for t in targets) + ".",
        f"Evidence: fio JSON in {evidence} (file named beside each number).",
        f"GPUs, DRAM, software costs and the other links are those of {base_file}",
        "(its seed and citations apply: see that file); CPU cores are this machine's.",
    ]
    loaded = write_profile(profile, path, header, comments, f"as in {base_file}")
    summary = {
        "profile": str(path),
        "targets": [dataclasses.asdict(t) for t in targets],
        "devices": [dataclasses.asdict(f) for f in fits],
        "upstream": dataclasses.asdict(upstream) if upstream else None,
        "sweep": dataclasses.asdict(sweep),
    }
    (out / "calibration.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return Calibration(tuple(fits), upstream, loaded, path, evidence)


def _load(name: str | Path) -> HardwareProfile:
    try:
        return load_profile(name)
    except ProfileError as exc:
        raise RealError(str(exc)) from None


def _fio_version() -> str:
    done = subprocess.run([fio.require_fio(), "--version"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


@contextlib.contextmanager
def dir_targets(dirs: Sequence[str | Path], size: int) -> Iterator[list[Target]]:
    """One file per directory (``kvtier-calib-<pid>-ssdK.dat``, laid out by fio), removed after."""
    targets = []
    for i, d in enumerate(dirs):
        d = Path(d)
        if not d.is_dir():
            raise RealError(f"{d}: not a directory")
        path = d / f"kvtier-calib-{os.getpid()}-ssd{i}.dat"
        if path.exists():
            raise RealError(f"{path} exists: kvtier will not write over a file it did not create")
        targets.append(Target(node=f"ssd{i}", path=str(path), size=size, kind="file"))
    try:
        yield targets
    finally:
        for t in targets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(t.path)


def fs_gib(path: str) -> float:
    """Size in GiB of the filesystem holding ``path`` (a calibrated device's capacity)."""
    st = os.statvfs(Path(path).parent)
    return st.f_blocks * st.f_frsize / 2**30

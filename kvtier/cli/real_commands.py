"""The flags and printing of ``kvtier real emulate``, ``calibrate``, ``iolog`` and
``cleanup``; what they run is in :mod:`real.emulate`, :mod:`real.calibrate`,
:mod:`real.iolog` and :mod:`real.cleanup` (``replay`` and ``validate``, which need the
simulator too: :mod:`kvtier.cli.replay`, :mod:`kvtier.cli.validate`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

import real.blkio  # noqa: F401  (registers how cleanup removes a loop device entry)
from hwprofiles import load_profile
from kvtier.contracts.plan import read_plan
from kvtier.contracts.validate import check_plan_rows, int_arg
from real import fio
from real.calibrate import FULL, QUICK, Calibration, calibrate, dir_targets, fs_gib
from real.capacity import check_limits
from real.cleanup import describe, reclaim, runs
from real.emulate import MODES, EmulatedSet, emulate
from real.errors import RealError
from real.iolog import export_iologs, fio_replay_throughput
from real.targets import Target


# ---- emulate -----------------------------------------------------------------------------
def size_arg(text: str) -> int:
    """An argparse type: a whole number of bytes >= 1, fio-style (``64M``, ``1GiB``:
    :func:`real.fio.parse_size`)."""
    try:
        size = fio.parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size (bytes, or 4k, 1M, 2GiB): {text!r}") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be a size >= 1 byte, got {text!r}")
    return size


def add_emulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("emulate", help="build throttled emulated SSDs of a profile and check them")
    p.add_argument("--profile", required=True, help="hardware profile name or YAML path")
    p.add_argument("--n", type=int, default=None, help="number of SSDs (default: all)")
    p.add_argument("--where", default="/dev/shm", help="directory for the backing files")
    p.add_argument("--size", type=size_arg, default="1GiB", help="bytes per device (default 1GiB)")
    p.add_argument("--scale", type=float, default=None, help="scale factor (default: measure)")
    p.add_argument("--mode", choices=MODES, default="auto")
    p.add_argument("--out", required=True, help="directory for the scaled profile and fio JSON")
    p.add_argument("--no-check", action="store_true", help="skip the fio check of the limits")
    p.add_argument("--force", action="store_true", help="overwrite results already in --out")
    p.set_defaults(handler=cmd_emulate)


def cmd_emulate(args: argparse.Namespace) -> int:
    from kvtier.contracts.outdir import claim

    with claim(args.out, force=args.force, label="emulate") as out:
        return _emulate(args, out)


def _emulate(args: argparse.Namespace, out: Path) -> int:
    """Build the emulated set of ``args`` (profile and evidence into ``out``) and check it."""
    with emulate(
        args.profile,
        args.n,
        where=args.where,
        size=fio.parse_size(args.size),
        scale=args.scale,
        mode=args.mode,
        out=out,
    ) as es:
        print_set(es)
        if args.no_check:
            pass
        elif es.mode != "throttle":
            print("check skipped: pacing mode (the replayer holds the limits, not the kernel)")
        else:
            for check in check_limits(es.targets, es.cgroup, out / "check"):
                print(check.line())
    print(f"scaled profile: {es.profile_path} (devices removed)")
    return 0


def print_set(es: EmulatedSet) -> None:
    print(es.note)
    print(
        f"{'node':6} {'path':28} {'kind':5} {'read MB/s':>10} {'write MB/s':>10} "
        f"{'read IOPS':>10} {'write IOPS':>10}"
    )
    for t in es.targets:
        lim = t.limits
        print(
            f"{t.node:6} {t.path:28} {t.kind:5} {lim.read_bps / 1e6:10.1f} "
            f"{lim.write_bps / 1e6:10.1f} {lim.read_iops:10d} {lim.write_iops:10d}"
        )
    if es.cgroup:
        print(f"cgroup: {es.cgroup}")
    print(f"scaled profile: {es.profile_path}")


# ---- calibrate ---------------------------------------------------------------------------
def add_calibrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure SSDs with fio sweeps and write a profile")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--dir", action="append", help="a directory on one device (repeat per device)"
    )
    where.add_argument("--emulate", metavar="PROFILE", help="calibrate emulated SSDs of PROFILE")
    p.add_argument("--n", type=int, default=None, help="emulated devices (default: all)")
    p.add_argument("--where", default="/dev/shm", help="backing directory of emulated devices")
    p.add_argument("--scale", type=float, default=None, help="emulation scale (default: measure)")
    p.add_argument(
        "--size", type=size_arg, default=None, help="bytes per device (default: the sweep's)"
    )
    p.add_argument("--full", action="store_true", help="the full sweep (default: quick)")
    p.add_argument(
        "--base",
        default=None,
        help="profile lending GPUs/DRAM/software (default: h20-8ssd, or the emulated one)",
    )
    p.add_argument(
        "--profile", default=None, help="profile YAML to write (default hwprofiles/local.yaml)"
    )
    p.add_argument(
        "--out", default="results/calibrate", help="directory for fio JSON and the summary"
    )
    p.add_argument("--force", action="store_true", help="overwrite results already in --out")
    p.set_defaults(handler=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvtier.contracts.outdir import claim
    from kvtier.contracts.validate import check_out_file

    if args.profile:  # the profile is written after the sweep: refuse a bad path before it
        check_out_file(args.profile, "--profile")
    if args.base:  # lent GPUs/DRAM/software after the sweep: a bad name fails first
        load_profile(args.base)
    with claim(args.out, force=args.force, label="calibrate"):  # before any fio run
        return _calibrate(args)


def _calibrate(args: argparse.Namespace) -> int:
    """The calibration of ``args`` into the claimed ``args.out`` (signals: see
    :mod:`real._signals`, which ``kvtier real`` runs every command under)."""
    sweep = FULL if args.full else QUICK
    size = fio.parse_size(args.size) if args.size else sweep.size
    if args.emulate:
        with emulate(
            args.emulate, args.n, where=args.where, size=size, scale=args.scale, out=args.out
        ) as es:
            print_set(es)
            base = args.base or es.profile
            cal = calibrate(
                es.targets,
                args.out,
                sweep=sweep,
                base=base,
                profile_path=args.profile,
                cgroup=es.cgroup,
            )
    else:
        with dir_targets(args.dir, size) as targets:
            caps = [fs_gib(t.path) for t in targets]
            cal = calibrate(
                targets,
                args.out,
                sweep=sweep,
                base=args.base or "h20-8ssd",
                profile_path=args.profile,
                capacity_gib=caps,
            )
    print_calibration(cal)
    return 0


def print_calibration(cal: Calibration) -> None:
    table = Table(title="fitted SSD parameters (fio)")
    for col in ("node", "read GB/s", "write GB/s", "read IOPS", "write IOPS", "read lat us"):
        table.add_column(col, justify="left" if col == "node" else "right")
    table.add_column("write lat us", justify="right")
    table.add_column("QD sat", justify="right")
    for i, f in enumerate(cal.fits):
        table.add_row(
            f"ssd{i}",
            f"{f.read_gbps:.4g}",
            f"{f.write_gbps:.4g}",
            f"{f.read_iops:.0f}",
            f"{f.write_iops:.0f}",
            f"{f.read_latency_us:.1f}",
            f"{f.write_latency_us:.1f}",
            str(f.max_queue_depth),
        )
    console = Console()
    console.print(table)
    up = cal.upstream
    if up is not None:
        verdict = "shared upstream link recorded" if up.limited else "no shared bottleneck"
        console.print(
            f"all at once: read {up.read_gbps:.4g} GB/s (alone, summed {up.alone_read_gbps:.4g}), "
            f"write {up.write_gbps:.4g} GB/s (alone, summed {up.alone_write_gbps:.4g}): {verdict}"
        )
    console.print(f"profile: {cal.profile_path}; evidence: {cal.evidence}")


# ---- iolog -------------------------------------------------------------------------------
def add_iolog(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "iolog", help="export a plan as fio iologs (one per SSD); --run replays them"
    )
    p.add_argument("--plan", required=True, help="transfer plan (Parquet)")
    p.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="NODE=PATH",
        help="an existing file or block device for a plan SSD (repeat per SSD)",
    )
    p.add_argument("--records", help="op records (ops.parquet or its directory) for the times")
    p.add_argument("--out", required=True, help="directory for the logs, job file and fio JSON")
    p.add_argument("--run", action="store_true", help="replay the logs with fio")
    p.add_argument("--stall", action="store_true", help="honour the timestamps (default: no stall)")
    p.add_argument("--iodepth", type=int_arg(1), default=None, help="fio iodepth per device")
    p.add_argument("--allow-write", action="store_true", help="let fio write the given targets")
    p.set_defaults(handler=cmd_iolog)


def cli_targets(specs: Sequence[str]) -> list[Target]:
    """``NODE=PATH`` pairs as targets the user owns (``created=False``)."""
    targets = []
    for spec in specs:
        node, sep, path = spec.partition("=")
        if not sep or not node or not path:
            raise RealError(f"--target wants NODE=PATH, got {spec!r}")
        if os.path.isdir(path):
            raise RealError(f"--target {spec}: {path} is a directory, not a file or block device")
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise RealError(f"--target {spec}: {path}: {exc.strerror}") from None
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
        finally:
            os.close(fd)
        targets.append(Target(node=node, path=path, size=size, kind="file", created=False))
    return targets


def _read_records(path: Path) -> pa.Table:
    """``--records``: an ops.parquet (or its directory) with ``op_id`` and ``start_s``."""
    path = path / "ops.parquet" if path.is_dir() else path
    try:
        records = pq.read_table(path, columns=["op_id", "start_s"])
    except (OSError, pa.ArrowException, KeyError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise RealError(f"--records {path}: not an op-records Parquet file ({reason})") from None
    return records


def cmd_iolog(args: argparse.Namespace) -> int:
    plan = read_plan(args.plan)
    check_plan_rows(plan.num_rows, args.plan)  # before fio is started or a log written
    targets = cli_targets(args.target)
    records = None
    if args.records:
        records = _read_records(Path(args.records))
    if not args.run:
        logs = export_iologs(plan, targets, args.out, records)
        for node, log in logs.items():
            print(f"{node}: {log}")
        return 0
    got = fio_replay_throughput(
        plan,
        targets,
        args.out,
        records=records,
        no_stall=not args.stall,
        iodepth=args.iodepth,
        allow_write=args.allow_write,
    )
    for node, d in got["per_device"].items():
        rate = d["throughput_bps"] / 1e6
        print(f"{node}: {d['bytes']} bytes in {d['elapsed_s']:.3f} s, {rate:.1f} MB/s")
    print(
        f"fio replay: {got['bytes']} bytes in {got['elapsed_s']:.3f} s = "
        f"{got['throughput_bps'] / 1e6:.1f} MB/s ({'no stall' if got['no_stall'] else 'timed'}); "
        f"JSON {got['fio_json']}"
    )
    return 0


# ---- cleanup -----------------------------------------------------------------------------
def add_cleanup(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cleanup", help="remove loop devices, cgroups, files a crashed run left")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--dry-run", action="store_true", help="only list (the default)")
    act.add_argument("--yes", action="store_true", help="remove what dead runs left")
    p.add_argument("--runtime-dir", default=None, help="state files (default: kvtier's own)")
    p.set_defaults(handler=cmd_cleanup)


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Remove what crashed runs left behind.

    A run killed by SIGKILL (or a power cut) cannot clean up; its state file
    (:mod:`real.cleanup`) still lists its loop devices, cgroups, files and fio
    process groups.  This command lists, for every state file whose process is
    gone, exactly those resources -- a dry run by default (``--dry-run`` says so
    explicitly) -- and removes them with ``--yes``, each only if it still is what
    was recorded (same inode, same loop backing file, same process-group leader).
    Runs still alive are listed as such and left alone."""
    where = Path(args.runtime_dir) if args.runtime_dir else None
    if where is not None and not where.is_dir():
        raise RealError(f"--runtime-dir {where}: not a directory")
    found = runs(where)
    if not found:
        print("nothing to clean up: no kvtier run state found")
        return 0
    for run in found:
        if run.live:
            print(f"pid {run.pid}: still running; left alone ({len(run.resources)} resources)")
            continue
        if not args.yes:
            print(f"pid {run.pid}: gone; would remove:")
            for entry in reversed(run.resources):
                print(f"  {describe(entry)}")
            continue
        print(f"pid {run.pid}: gone; removing:")
        for entry, done in reclaim(run):
            print(f"  {describe(entry)}: {'removed' if done else 'already gone or not ours'}")
    if not args.yes and any(not r.live for r in found):
        print("dry run: pass --yes to remove")
    return 0

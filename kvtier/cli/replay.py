"""``kvtier real replay``: run a transfer plan on real disks and record what happened.

The replay itself is :func:`real.replay.replay`; this command adds what needs
the simulator (:func:`kvtier.compare.durations.modelled_durations`): copy and
compute ops are waited out for the time the simulator gives them on the
profile (``--hw``, or the ``profile.yaml`` that ``kvtier sim`` wrote beside
the plan), since this machine has no GPU to run them; with no profile they
take 0 s and the run says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hwprofiles import HardwareProfile, load_profile
from kvtier.compare.durations import modelled_durations
from kvtier.contracts.console import make_console
from kvtier.contracts.plan import read_plan
from kvtier.contracts.provenance import file_digest
from kvtier.contracts.records import Records
from kvtier.contracts.units import fmt_bytes
from kvtier.contracts.validate import check_plan_rows, float_arg, int_arg
from real.datafile import prepare_targets
from real.engine import REPLAY_ENGINES
from real.errors import RealError
from real.replay import replay, sigterm_as_interrupt, validate_for_replay, write_results
from real.scheduler import DEFAULT_QD
from real.targets import Limits


# ---- command line ------------------------------------------------------------------------
def add_replay(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "replay",
        help="replay a transfer plan on real disks (io_uring, O_DIRECT, verified reads)",
        description="Replay a transfer plan on real disks and write records like `kvtier sim`.",
    )
    p.add_argument("--plan", required=True, help="transfer plan (Parquet)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--target",
        action="append",
        metavar="DIR_OR_PATH",
        help="one per SSD node of the plan, in order (ssd0, ssd1, ...): a directory or file path",
    )
    where.add_argument("--targets-dir", metavar="DIR", help="one sub-directory per SSD node")
    p.add_argument("--out", required=True, help="output directory for records and run.json")
    p.add_argument("--force", action="store_true", help="overwrite results already in --out")
    p.add_argument(
        "--engine",
        choices=REPLAY_ENGINES,
        default="auto",
        help="I/O engine: auto (fio for a one-wave plan when installed, else python), fio, "
        "python (uring/liburing/threads pick its ring)",
    )
    p.add_argument("--qd", type=int_arg(1), default=DEFAULT_QD, help="in-flight I/Os per device")
    p.add_argument("--hw", help="profile for the modelled copy/compute times")
    p.add_argument("--seed", type=int_arg(0), default=0, help="seed of the data written")
    p.add_argument("--keep-files", action="store_true", help="keep the data files afterwards")
    p.add_argument(
        "--i-own-this-device",
        action="store_true",
        help="allow writing existing files or block devices (never ones holding a filesystem)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip checking the data read")
    p.add_argument("--gds", choices=("auto", "host", "require"), default="auto")
    for rate in ("read-mbps", "write-mbps", "read-iops", "write-iops"):
        p.add_argument(
            f"--pace-{rate}", type=float_arg(), default=0.0, help="user-space pacing (0: none)"
        )
    p.set_defaults(handler=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from kvtier.contracts.outdir import claim

    with claim(
        args.out, force=args.force, label=f"replay of {args.plan}"
    ):  # an unusable --out fails before the run
        return _replay(args)


def _replay(args: argparse.Namespace) -> int:
    console = make_console()
    if args.qd <= 0:
        raise RealError(f"--qd must be > 0, got {args.qd}")
    plan = read_plan(args.plan)
    check_plan_rows(plan.num_rows, args.plan)  # before any target is prepared or fio runs
    profile = _profile(args.hw, Path(args.plan))
    validate_for_replay(plan, profile)
    nonio = None
    if profile is not None:
        console.print(f"copy/compute ops wait out their modelled time on [cyan]{profile.name}[/]")
        nonio = modelled_durations(plan, profile)
    limits = Limits(
        read_bps=int(args.pace_read_mbps * 1e6),
        write_bps=int(args.pace_write_mbps * 1e6),
        read_iops=int(args.pace_read_iops),
        write_iops=int(args.pace_write_iops),
    )
    with sigterm_as_interrupt():
        files = prepare_targets(
            plan,
            args.targets_dir or args.target,
            seed=args.seed,
            allow_write_existing=args.i_own_this_device,
            limits=limits,
            pacing=not limits.unlimited,
            log=console.print,
        )
        try:
            records = _replay_with_progress(console, plan, files, nonio, args)
        finally:
            if args.keep_files:
                console.print("kept: " + ", ".join(t.path for t in files.targets.values()))
                files.keep()
            else:
                files.cleanup()
    write_results(
        records,
        args.out,
        plan_file=str(args.plan),
        plan_sha256=file_digest(args.plan),
        profile=profile.source_file if profile else None,
        seed=args.seed,
        targets={n: t.__dict__ | {"limits": t.limits.__dict__} for n, t in files.targets.items()},
    )
    for note in records.stats["notes"]:
        console.print(f"note: {note}")
    console.print(device_table(records))
    console.print(f"records: {args.out}/ (ops, devices, steps Parquet; run.json)")
    return 0


def _replay_with_progress(console, plan, files, nonio, args) -> Records:
    columns = (BarColumn(), MofNCompleteColumn(), TextColumn("ops"), TimeElapsedColumn())
    with Progress(TextColumn("replay"), *columns, console=console) as bar:
        task = bar.add_task("replay", total=plan.num_rows)
        return replay(
            plan,
            files,
            engine=args.engine,
            qd=args.qd,
            nonio_s=nonio,
            verify=not args.no_verify,
            gds=args.gds,
            log=console.print,
            progress=lambda done, _total: bar.update(task, completed=done),
        )


def _profile(name: str | None, plan_path: Path) -> HardwareProfile | None:
    if name:
        return load_profile(name)
    for parent in list(plan_path.resolve().parents)[:3]:
        if (parent / "profile.yaml").is_file():
            return load_profile(parent / "profile.yaml")
    return None


def device_table(records: Records) -> Table:
    makespan = records.makespan_s
    table = Table(title=f"Replay: {records.stats['ops']} ops in {makespan:.3f} s")
    for col in ("device", "read", "written", "I/Os", "busy s", "MB/s busy", "util mean"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for row in records.devices.to_pylist():
        moved = row["bytes_read"] + row["bytes_written"]
        rate = moved / row["busy_s"] / 1e6 if row["busy_s"] > 0 else 0.0
        table.add_row(
            row["device"],
            fmt_bytes(row["bytes_read"]),
            fmt_bytes(row["bytes_written"]),
            f"{row['n_ios']:,}",
            f"{row['busy_s']:.3f}",
            f"{rate:,.0f}",
            f"{100 * row['util_mean']:.0f}%",
        )
    return table

"""``kvtier real replay``: run a transfer plan on real disks and record what happened.

The pieces, each usable on its own (``kvtier real validate`` calls them)::

    files = prepare_targets(plan, "/mnt/kv", seed=0)      # real.datafile
    try:
        nonio = modelled_durations(plan, profile)         # copy/compute seconds (simulator)
        records = replay(plan, files, nonio_s=nonio)      # real.scheduler + real.engine
        write_results(records, out_dir, plan_file=...)    # same Parquet files as the simulator
    finally:
        files.cleanup()

Records have the simulator's schema (:mod:`sim.records`) with
``backend='real'``: per op ``ready_s``/``start_s``/``end_s`` and ``cpu_s``
(the replay loop's process CPU time shared over I/O ops by I/O count), per SSD
node bytes read and written, I/Os, busy time and queue occupancy; ``run.json``
holds the provenance (git SHA, machine, packages), the targets, the engine
and why it was chosen.  Copy and compute ops are waited out for the time the
simulator gives them on the profile (``--hw``, or the ``profile.yaml`` that
``kvtier sim`` wrote beside the plan), since this machine has no GPU to run
them; with no profile they take 0 s and the run says so.

Files the replay created are removed when it ends -- also on Ctrl-C or
SIGTERM, which are turned into ``KeyboardInterrupt`` for the duration --
unless ``--keep-files``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hwprofiles import HardwareProfile, load_profile
from real.datafile import DataFiles, prepare_targets
from real.engine import ENGINES
from real.errors import RealError
from real.scheduler import DEFAULT_QD, Replayer
from real.targets import Limits, Target
from sim.cli.console import make_console
from sim.core.units import fmt_bytes
from sim.executor import simulate
from sim.plan import read_plan, validate_plan
from sim.provenance import file_digest, provenance
from sim.records import Records

__all__ = [
    "DataFiles",
    "modelled_durations",
    "prepare_targets",
    "replay",
    "validate_for_replay",
    "write_results",
]


def replay(
    plan: pa.Table,
    targets: DataFiles | Mapping[str, Target],
    *,
    seed: int | None = None,
    engine: str = "auto",
    qd: int = DEFAULT_QD,
    nonio_s: Mapping[int, float] | Sequence[float] | None = None,
    verify: bool = True,
    gds: str = "auto",
    allow_write_existing: bool = False,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> Records:
    """Execute ``plan`` on ``targets`` (filled by :func:`prepare_targets`) and record it.

    ``seed``: of the data set (default: the :class:`DataFiles`' own, else 0).
    ``engine``: ``auto`` | ``uring`` | ``threads``.  ``qd``: in-flight I/Os per
    device where the target sets none.  ``nonio_s``: seconds to wait out per
    copy/compute op (op id -> seconds, or one value per op).  ``gds``: ``auto``
    (GPUDirect where kvikio and a GPU work, else host memory with a note),
    ``host`` or ``require``.  ``allow_write_existing``: let plan writes reach targets
    kvtier did not create (a :class:`DataFiles` carries the choice made when preparing).
    ``log`` hears, before the run, which engine runs it and why.
    """
    if isinstance(targets, DataFiles):
        seed = targets.seed if seed is None else seed
        allow_write_existing = allow_write_existing or targets.allow_write_existing
        targets = targets.targets
    runner = Replayer(
        plan,
        targets,
        seed=seed or 0,
        engine=engine,
        qd=qd,
        nonio_s=nonio_s,
        verify=verify,
        gds=gds,
        allow_write_existing=allow_write_existing,
        progress=progress,
    )
    if log:
        log(f"engine: {runner.engine_note}")
    return runner.run()


def validate_for_replay(plan: pa.Table, profile: HardwareProfile | None = None) -> None:
    """:func:`sim.plan.validate_plan` against ``profile``, or against the plan's own nodes."""
    if profile is not None:
        validate_plan(plan, profile.node_names, profile.ssd_names, profile.gpu_names)
        return
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    src = np.asarray(plan.column("src").to_pylist(), dtype=object)
    dst = np.asarray(plan.column("dst").to_pylist(), dtype=object)
    ssds = set(src[kind == "read"]) | set(dst[kind == "write"])
    gpus = set(dst[kind == "compute"])
    nodes = (set(src) | set(dst)) - {""}
    validate_plan(plan, nodes, ssds, gpus)


def modelled_durations(plan: pa.Table, profile: HardwareProfile) -> np.ndarray:
    """Seconds the simulator gives each copy/compute op on ``profile`` (0 for I/O ops)."""
    ops = simulate(plan, profile).ops
    secs = ops.column("end_s").to_numpy() - ops.column("start_s").to_numpy()
    io = np.isin(np.asarray(ops.column("kind").to_pylist(), dtype=object), ["read", "write"])
    return np.where(io, 0.0, secs)


def write_results(records: Records, out_dir: str | Path, **extra: Any) -> None:
    """Write the records (ops, devices, steps Parquet) and ``run.json`` into ``out_dir``."""
    out = Path(out_dir)
    records.write(out)
    meta = provenance(backend="real", stats=records.stats, **extra)
    (out / "run.json").write_text(json.dumps(meta, indent=2, default=str))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (so ``finally`` cleans up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ---- command line ------------------------------------------------------------------------
def add_cli(group: argparse._SubParsersAction) -> None:
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
    p.add_argument("--engine", choices=ENGINES, default="auto", help="I/O engine (default auto)")
    p.add_argument("--qd", type=int, default=DEFAULT_QD, help="in-flight I/Os per device")
    p.add_argument("--hw", help="profile for the modelled copy/compute times")
    p.add_argument("--seed", type=int, default=0, help="seed of the data written")
    p.add_argument("--keep-files", action="store_true", help="keep the data files afterwards")
    p.add_argument(
        "--i-own-this-device",
        action="store_true",
        help="allow writing existing files or block devices (never ones holding a filesystem)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip checking the data read")
    p.add_argument("--gds", choices=("auto", "host", "require"), default="auto")
    for rate in ("read-mbps", "write-mbps", "read-iops", "write-iops"):
        p.add_argument(f"--pace-{rate}", type=float, default=0.0, help="user-space pacing limit")
    p.set_defaults(handler=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    console = make_console()
    if args.qd <= 0:
        raise RealError(f"--qd must be > 0, got {args.qd}")
    plan = read_plan(args.plan)
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

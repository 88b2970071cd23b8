"""Run a transfer plan on real disks and record what happened.

The pieces, each usable on its own (``kvtier real validate`` calls them)::

    files = prepare_targets(plan, "/mnt/kv", seed=0)      # real.datafile
    try:
        nonio = durations                                 # copy/compute seconds, e.g. simulated
        records = replay(plan, files, nonio_s=nonio)      # real.scheduler + real.engine
        write_results(records, out_dir, plan_file=...)    # same Parquet files as the simulator
    finally:
        files.cleanup()

Records have the simulator's schema (:mod:`kvtier.contracts.records`) with
``backend='real'``: per op ``ready_s``/``start_s``/``end_s`` and ``cpu_s``
(the replay loop's process CPU time shared over I/O ops by I/O count), per SSD
node bytes read and written, I/Os, busy time and queue occupancy; ``run.json``
holds the provenance (git SHA, machine, packages), the targets, the engine
and why it was chosen.  Copy and compute ops are waited out for the time the
caller gives them (``nonio_s``); ``kvtier real replay`` passes the simulator's
times on the profile (:func:`kvtier.compare.durations.modelled_durations`), since
this machine has no GPU to run them.  :mod:`real` never imports the simulator.

Files the replay created are removed when it ends -- also on Ctrl-C,
SIGTERM or SIGHUP (:mod:`real._signals`; :func:`sigterm_as_interrupt` for
library callers) -- unless ``--keep-files``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from kvtier.contracts.plan import validate_plan
from kvtier.contracts.provenance import provenance
from kvtier.contracts.records import Records
from real._signals import guarding
from real.datafile import DataFiles, prepare_targets
from real.errors import RealError
from real.fioreplay import FioReplayer, fio_expressible, fio_partial_check
from real.scheduler import DEFAULT_QD, Replayer
from real.targets import Target

__all__ = [
    "DataFiles",
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
    engine: str = "python",
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
    ``engine``: ``python`` (the default: the Python replayer, its best ring) |
    ``auto`` (fio where it can replay the plan, :func:`pick_fio`, else ``python``;
    the CLI's default) | ``fio`` | ``uring`` | ``liburing`` |
    ``threads``; the choice and why is ``stats['engine_note']`` (``run.json``).
    ``qd``: in-flight I/Os per device where the target sets none.  ``nonio_s``:
    seconds to wait out per copy/compute op (op id -> seconds, or one value per
    op).  ``gds``: ``auto`` (GPUDirect where kvikio and a GPU work, else host memory with a note),
    ``host`` or ``require``.  ``allow_write_existing``: let plan writes reach targets
    kvtier did not create (a :class:`DataFiles` carries the choice made when preparing).
    ``log`` hears, before the run, which engine runs it and why.
    """
    if isinstance(targets, DataFiles):
        seed = targets.seed if seed is None else seed
        allow_write_existing = allow_write_existing or targets.allow_write_existing
        targets = targets.targets
    use_fio, why = pick_fio(plan, targets, engine, verify, gds)
    if use_fio:
        fio_runner = FioReplayer(plan, targets, seed=seed or 0, qd=qd)
        if log:
            log(f"engine: {fio_runner.engine_note}")
        return fio_runner.run()
    runner = Replayer(
        plan,
        targets,
        seed=seed or 0,
        engine="auto" if engine == "python" else engine,
        qd=qd,
        nonio_s=nonio_s,
        verify=verify,
        gds=gds,
        allow_write_existing=allow_write_existing,
        progress=progress,
    )
    if why:
        runner.engine_note += f" (not fio: {why})"
    if log:
        log(f"engine: {runner.engine_note}")
    return runner.run()


def pick_fio(
    plan: pa.Table, targets: Mapping[str, Target], engine: str, verify: bool, gds: str
) -> tuple[bool, str]:
    """(use the fio engine, why not when ``auto`` passes it over).

    ``fio`` must be able to replay the plan (else a :class:`RealError` says why);
    ``auto`` takes it when fio is installed, the plan is waves of I/O (steps, each
    depending on the whole step before: :func:`real.fioreplay.fio_expressible`)
    of 4 KiB only and verification is on; any other
    engine name is the Python replayer's."""
    if engine not in ("fio", "auto"):
        return False, ""
    wants_gds = gds != "host" and "gds" in plan.column("io_path").to_pylist()
    why = fio_expressible(plan, targets, wants_gds) or ("" if verify else "verification is off")
    if engine == "auto" and not why and fio_partial_check(plan):
        why = fio_partial_check(plan)
    if engine == "fio" and why:
        raise RealError(f"--engine fio cannot replay this plan: {why}")
    return not why, why


def validate_for_replay(plan: pa.Table, profile: HardwareProfile | None = None) -> None:
    """:func:`kvtier.contracts.plan.validate_plan` against ``profile``, or
    against the plan's own nodes."""
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


def write_results(records: Records, out_dir: str | Path, **extra: Any) -> None:
    """Write the records (ops, devices, steps Parquet) and ``run.json`` into ``out_dir``."""
    out = Path(out_dir)
    records.write(out)
    meta = provenance(backend="real", stats=records.stats, **extra)
    (out / "run.json").write_text(json.dumps(meta, indent=2, default=str))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (so ``finally`` cleans up).

    Under :func:`real._signals.guarded` (every ``kvtier real`` command) its handler,
    which covers SIGTERM already, stays in place."""
    if threading.current_thread() is not threading.main_thread() or guarding():
        yield
        return

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)

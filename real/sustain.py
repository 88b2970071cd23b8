"""What the replayer itself can sustain, and an emulation scale that stays below it.

The IOPS regime of ``kvtier real validate`` compares the simulator with a
replay on emulated devices throttled to a scaled profile
(:mod:`real.emulate`).  The comparison measures the *devices* only while the
throttle is the binding limit.  Today the scale keeps the devices below what
the backing store sustains (fio, :func:`real.capacity.scale_for`); but the
replayer is one Python thread issuing, reaping and verifying every I/O, and at
4 KiB it tops out below the store: when the devices' aggregate IOPS exceed it,
the replay runs at the replayer's rate, the simulator (which models the
devices) predicts the devices' rate, and the error measured is the replayer's
overhead, not the model's.

:func:`sustainable_iops` measures the replayer's own ceiling on this machine
(a verified random-read replay at the queue depth validation uses), and
:func:`replayer_scale` lowers the emulation scale so the devices' aggregate
IOPS stay below :data:`LOOP_HEADROOM` times it, as ``scale_for`` keeps them
``headroom`` below the backing store.  Bandwidth is left alone: large I/Os cost the
replayer per I/O, not per byte (a 1 MiB read is one SQE and one vectorised
check), so the store's bandwidth, not the replayer, bounds that regime.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import PlanBuilder
from real._blocks import BLOCK
from real.capacity import Rates, scale_for
from real.datafile import fill_targets, prepare_targets
from real.errors import RealError
from real.replay import replay
from real.targets import Target

FILE_BYTES = 64 << 20  # the measured file: large enough that reads are random, small to fill
ROUND_IOS = 20_000  # I/Os per replay; replays repeat until ``seconds`` have passed
# The share of its measured ceiling the replayer is asked for (the devices' aggregate
# 4 KiB IOPS over it).  Assumption, plausible range 0.4-0.8: the replay loop is one
# thread, and the model charges its per-I/O cost on one core, so at a share h the
# loop is busy h of its core in the IOPS steps and binds them once it gets less than h
# of that core.  One other runnable process on the loop's core halves its share (CFS),
# so 0.5 keeps the throttle binding through that; 0.8 (until 2026-12-02) left 25%,
# and the IOPS regime's median step error swung 5.5-27.3% between consecutive runs on
# a quiet 2-core machine, the simulator always faster.
LOOP_HEADROOM = 0.5


def random_read_plan(
    ios: int, io_bytes: int, size: int, qd: int, seed: int = 0, n_dev: int = 1
) -> pa.Table:
    """One read op per device ``ssd0..ssd{n_dev - 1}``, all at once, of ``ios / n_dev``
    random ``io_bytes`` extents each (aligned to ``io_bytes``), the first always the
    last of ``size``: every seed's plan spans the same ``size`` on every device, so the
    files made for the first fit the next."""
    rng = np.random.default_rng(seed)
    b = PlanBuilder()
    for k in range(n_dev):
        m = ios // n_dev
        starts = rng.integers(0, size // io_bytes, m, dtype=np.int64) * io_bytes
        starts[0] = size - io_bytes
        ext = np.stack([starts, np.full(m, io_bytes, np.int64)], axis=1)
        b.read(f"ssd{k}", "dram0", extents=ext, queue_depth=qd, io_path="io_uring")
    return b.table()


def sustainable_iops(
    path_dir: str | Path,
    qd: int,
    io_bytes: int = BLOCK,
    seconds: float = 1.0,
    n_dev: int = 1,
    targets: Mapping[str, Target] | None = None,
) -> float:
    """Verified random-read IOPS the replayer sustains at ``qd`` per device, reading
    ``n_dev`` devices at once as the validation's IOPS steps do (one replay loop
    serves them all).

    ``targets``: the devices themselves (``ssd0..``; the emulation's loop devices
    before their limits are set), filled by kvtier for the measurement: a loop
    device's I/O goes through its kernel worker and io-wq, which a plain file does
    not, and on a 2-core machine that work shares the cores with the replay loop.
    Without ``targets``, files created and filled by kvtier (its self-checking
    blocks) in a fresh sub-directory of ``path_dir``, removed afterwards.  Replays
    of ``ROUND_IOS`` I/Os repeat until ``seconds`` of replay have passed; the
    result is their I/Os over their summed makespans.
    """
    if qd < 1 or io_bytes < BLOCK or io_bytes % BLOCK or not seconds > 0:
        raise RealError(
            f"sustainable_iops: qd must be >= 1, io_bytes a multiple of {BLOCK}, seconds > 0 "
            f"(got qd={qd}, io_bytes={io_bytes}, seconds={seconds})"
        )
    size = max(FILE_BYTES, 4 * io_bytes)
    plan = random_read_plan(ROUND_IOS, io_bytes, size, qd, n_dev=n_dev)
    if targets is not None:
        fill_targets(targets, plan)
        return _replay_rate(plan, targets, (io_bytes, size, qd, n_dev), seconds)
    with tempfile.TemporaryDirectory(dir=path_dir, prefix="kvtier-sustain-") as tmp:
        files = prepare_targets(plan, tmp)
        try:
            return _replay_rate(plan, files.targets, (io_bytes, size, qd, n_dev), seconds)
        finally:
            files.cleanup()


def _replay_rate(plan: pa.Table, targets, shape: tuple, seconds: float) -> float:
    """I/Os over summed makespans of replays of ``plan`` and its next seeds (``shape``:
    :func:`random_read_plan`'s io_bytes, size, qd, n_dev) until ``seconds`` passed."""
    io_bytes, size, qd, n_dev = shape
    ios, span, seed = 0, 0.0, 0
    end = time.monotonic() + seconds
    while span == 0.0 or time.monotonic() < end:
        rec = replay(plan, targets, engine="uring", qd=qd, verify=True)
        ios += rec.stats["ios"]
        span += rec.stats["makespan_s"]
        seed += 1
        plan = random_read_plan(ROUND_IOS, io_bytes, size, qd, seed, n_dev)
    return ios / span


def replayer_scale(
    source,
    n: int,
    sustainable: Rates,
    replayer_iops: float,
    headroom: float = 0.8,
    loop_headroom: float = LOOP_HEADROOM,
) -> float:
    """The emulation scale: :func:`real.capacity.scale_for`'s (``headroom`` below the
    backing store), lowered so that the ``n`` devices' aggregate read and write IOPS
    stay below ``loop_headroom * replayer_iops`` (:data:`LOOP_HEADROOM`).

    ``source`` is the hardware profile (its ``ssd(name)`` groups give each
    device's ``read_iops``/``write_iops``), ``sustainable`` the backing store's
    measured rates, ``replayer_iops`` what :func:`sustainable_iops` measured.
    Writes are held to the same ceiling as reads (a write is one SQE like a read;
    rendering its blocks costs about what verifying a read does).
    """
    if not replayer_iops > 0:
        raise RealError(f"replayer_iops must be positive, got {replayer_iops}")
    scale = scale_for(source, n, sustainable, headroom)
    groups = [source.ssd(f"ssd{i}") for i in range(n)]
    for demand in (sum(g.read_iops for g in groups), sum(g.write_iops for g in groups)):
        if demand > 0:
            scale = min(scale, loop_headroom * replayer_iops / demand)
    return scale


def emulation_scale(
    source,
    n: int,
    sustainable: Rates,
    headroom: float,
    workdir: Path,
    meter: str,
    targets: Mapping[str, Target] | None = None,
) -> tuple[float, float | None]:
    """The scale :func:`real.emulate.emulate` uses when none is given, and the
    replayer ceiling it was held to (None when ``meter`` already measured with the
    replayer, whose rates include its own ceiling).

    With fio as the meter the backing store's rates are fio's, which can exceed
    what the replayer sustains at 4 KiB; the replayer's verified random-read IOPS
    at queue depth 32 (the validation's) are measured on the same store
    (``workdir``; on ``targets``, the devices themselves, where given), over the ``n``
    devices read at once as the validation reads them, and :func:`replayer_scale`
    keeps the devices below them.
    """
    if meter == "replayer":
        return scale_for(source, n, sustainable, headroom), None
    ceiling = sustainable_iops(workdir, qd=32, seconds=1.0, n_dev=n, targets=targets)
    return replayer_scale(source, n, sustainable, ceiling, headroom), ceiling

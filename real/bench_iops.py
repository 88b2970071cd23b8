"""Replayer IOPS against fio's on the same file: ``python -m real.bench_iops``.

Builds a plan of 4 KiB random reads (``--ops`` read ops whose extents are
``--ios`` block offsets drawn uniformly over a ``--size`` file, each op at
queue depth ``--qd``), fills the file with kvtier's self-checking blocks,
replays it with verification on, then runs fio (io_uring engine, O_DIRECT,
4 KiB ``randread``, same file, same ``iodepth``, same number of I/Os) and
prints both IOPS and their ratio.  The file is created by kvtier under
``--path`` (a directory, e.g. ``/dev/shm``, which accepts O_DIRECT) and
removed at the end.

Each queue depth alternates replayer and fio ``--repeat`` times on the same
file and prints the median of the per-pair ratios, so that a noisy machine's
swings cancel; ``--fio-async`` runs fio with ``--force_async=1``, the way the
replayer issues reads of tmpfs files (:func:`real.engine.on_tmpfs`).

Measured on the 2-core dev machine (shared with 4 other jobs, load 3-8; 200K
verified I/Os per run, medians of 3 pairs): before this work qd 32 0.44 of
fio at 9.1 us of process CPU per I/O, qd 128 0.66 at 4.5 us.  Now qd 32
0.71-1.24 of plain fio and 0.43 of ``--fio-async`` fio at 5.5-8 us per I/O; qd
128 0.78-2.25 of plain fio and 0.85 of ``--fio-async`` fio at 3.2-4.8 us; fio
itself spends 1.3-2.4 us per I/O.  The spread is the machine's: fio alone ran
64K-330K IOPS over the session.  The replay loop's own cost, fitted over qd 8,
32 and 128 (main thread, verification on): about 62-77 us per round plus 1-2
us per I/O, of which verification is about 20 us per round plus 0.4 us per I/O
(the expected images gathered from the 1 MiB block template, then one
comparison); with no kernel at all (an engine that completes at once) a round
of the laid-out round robin costs 19 us of Python at qd 32 and 22 us at qd 128.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.plan import PlanBuilder
from real._blocks import BLOCK
from real.datafile import prepare_targets
from real.fio import run_fio, summarize
from real.replay import replay


def randread_plan(ios: int, ops: int, size: int, qd: int, seed: int = 0) -> pa.Table:
    """``ops`` read ops of ssd0 sharing ``ios`` uniformly random 4 KiB extents of ``size``."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, size // BLOCK, ios, dtype=np.int64)
    b = PlanBuilder()
    for part in np.array_split(blocks, ops):
        if len(part):
            ext = np.stack([part * BLOCK, np.full(len(part), BLOCK)], axis=1)
            b.read("ssd0", "dram0", extents=ext, queue_depth=qd, io_path="io_uring")
    return b.table()


def fio_iops(
    path: str, size: int, qd: int, ios: int, out: Path, force_async: bool = False
) -> tuple[float, float]:
    """(IOPS, process CPU seconds per I/O) of fio doing ``ios`` 4 KiB io_uring O_DIRECT
    random reads of ``path`` at ``qd`` (its CPU: ``usr_cpu + sys_cpu`` of the run,
    io-wq workers included, as for the replayer).

    ``--io_size`` (not ``--number_ios``, which ``--size`` would cut to one pass
    over the file) makes fio issue exactly ``ios`` I/Os.
    """
    args = [
        f"--filename={path}",
        "--rw=randread",
        f"--bs={BLOCK}",
        f"--iodepth={qd}",
        "--ioengine=io_uring",
        "--direct=1",
        f"--size={size}",
        f"--io_size={ios * BLOCK}",
        "--norandommap",
        "--randrepeat=0",
        "--name=bench",
    ] + (["--force_async=1"] if force_async else [])
    got = run_fio(args, out / "fio.json")
    iops = summarize(got).read.iops
    job = got["jobs"][0]
    cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["read"]["runtime"] / 1e3
    return iops, cpu_s / max(1, job["read"]["total_ios"])


def replayer_iops(plan: pa.Table, files, engine: str, qd: int) -> tuple[float, float]:
    """(IOPS, process CPU seconds per I/O) of one verified replay of ``plan``."""
    rec = replay(plan, files, engine=engine, qd=qd)
    n_ios = rec.stats["ios"]
    return n_ios / rec.stats["makespan_s"], rec.stats["cpu_s"] / n_ios


def compare(plan, files, size: int, a: argparse.Namespace, tmp: Path) -> None:
    """Alternate replayer and fio ``a.repeat`` times; print each pair and the medians."""
    path = str(files.targets["ssd0"].path)
    ratios, ours_all, cpus = [], [], []
    for r in range(a.repeat):
        ours, cpu = replayer_iops(plan, files, a.engine, a.qd)
        ours_all.append(ours)
        cpus.append(cpu)
        line = f"qd {a.qd} run {r + 1}: replayer {ours:,.0f} IOPS ({cpu * 1e6:.2f} us CPU/I/O)"
        if not a.no_fio:
            theirs, fio_cpu = fio_iops(path, size, a.qd, a.ios, tmp, a.fio_async)
            ratios.append(ours / theirs)
            line += f", fio {theirs:,.0f} IOPS ({fio_cpu * 1e6:.2f} us CPU/I/O)"
            line += f", ratio {ours / theirs:.2f}"
        print(line, flush=True)
    summary = f"qd {a.qd}: median replayer {np.median(ours_all):,.0f} IOPS, "
    summary += f"{np.median(cpus) * 1e6:.2f} us CPU/I/O"
    if ratios:
        summary += f"; median replayer/fio {np.median(ratios):.2f} over {len(ratios)} pairs"
    print(summary)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="/dev/shm", help="directory for the data file")
    ap.add_argument("--ios", type=int, default=200_000)
    ap.add_argument("--ops", type=int, default=20)
    ap.add_argument("--qd", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--size", type=int, default=256 << 20, help="file bytes")
    ap.add_argument("--engine", default="uring")
    ap.add_argument("--repeat", type=int, default=3, help="replayer/fio pairs per queue depth")
    ap.add_argument("--no-fio", action="store_true")
    ap.add_argument(
        "--fio-async",
        action="store_true",
        help="fio with --force_async=1 (IOSQE_ASYNC, as the replayer issues tmpfs reads)",
    )
    a = ap.parse_args(argv)
    qds = a.qd
    with tempfile.TemporaryDirectory(dir=a.path, prefix="kvtier-bench-") as tmp:
        files = prepare_targets(randread_plan(a.ios, a.ops, a.size, max(qds)), tmp)
        try:
            for qd in qds:
                a.qd = qd
                compare(randread_plan(a.ios, a.ops, a.size, qd), files, a.size, a, Path(tmp))
        finally:
            files.cleanup()


if __name__ == "__main__":
    main()

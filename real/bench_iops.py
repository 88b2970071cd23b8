"""Replayer IOPS against fio's on the same file: ``python -m real.bench_iops``.

Builds a plan of 4 KiB random reads (``--ops`` read ops whose extents are
``--ios`` block offsets drawn uniformly over a ``--size`` file, each op at
queue depth ``--qd``), fills the file with kvtier's self-checking blocks,
replays it with verification on, then runs fio (io_uring engine, O_DIRECT,
4 KiB ``randread``, same file, same ``iodepth``, same number of I/Os) and
prints both IOPS and their ratio.  The file is created by kvtier under
``--path`` (a directory, e.g. ``/dev/shm``, which accepts O_DIRECT) and
removed at the end.

Measured on the 2-core dev machine (noisy: shared with other jobs, so compare
runs taken back to back; 100K I/Os, ``--engine liburing`` vs the default raw
ring): qd 32, liburing 98K IOPS (0.32 of fio's 311K), raw ring 112K (0.44 of
255K); qd 128, liburing 114K (0.49 of 231K), raw ring 221K (0.66 of 333K), 4.5 us
of process CPU per verified I/O (io-wq workers included: tmpfs O_DIRECT reads
are punted to them).  What is left per round is the scheduler's Python (round
robin over the started ops, completion accounting), about 20 numpy calls.
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


def fio_iops(path: str, size: int, qd: int, ios: int, out: Path) -> tuple[float, float]:
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
    ]
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
            theirs, fio_cpu = fio_iops(path, size, a.qd, a.ios, tmp)
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

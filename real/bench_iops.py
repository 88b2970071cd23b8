"""Replayer IOPS against fio's on the same file or devices: ``python -m real.bench_iops``.

Builds a plan of 4 KiB random reads (``--ops`` read ops whose extents are
``--ios`` block offsets drawn uniformly over a ``--size`` file, each op at
queue depth ``--qd``), fills the file with kvtier's self-checking blocks,
replays it with verification on, then runs fio (io_uring engine, O_DIRECT,
4 KiB ``randread``, same file, same ``iodepth``, same number of I/Os) and
prints both IOPS and their ratio.  The file is created by kvtier under
``--path`` (a directory, e.g. ``/dev/shm``, which accepts O_DIRECT) and
removed at the end.

Each queue depth alternates the ``--engine`` replayers (``uring``, ``python``,
``fio``, ...) and fio ``--repeat`` times on the same targets and prints, per
engine, the median of its per-round ratios to fio, so that a noisy machine's
swings cancel; ``--fio-async`` runs fio with ``--force_async=1``, the way both
engines issue reads of tmpfs files and loop devices (:func:`real.engine.on_tmpfs`).
``--emulate PROFILE --n N --scale S`` reads N emulated devices instead
(:func:`real.emulate.emulate`: loop devices over ``--path``, cgroup v1 blkio
limits; this process joins the group, so fio, its child, is held to the same
limits), one job per device.  CPU per I/O is each side's whole process (user +
system, io-wq workers included): fio's from :func:`real.fioreplay.children_cpu_s`,
since fio's own ``usr_cpu``/``sys_cpu`` leave io-wq out (measured 1.4 us reported
against 3.7 us per 4 KiB read on tmpfs).

Measured 2026-11-24 on the 2-core dev machine shared with 5 other jobs (load
4-9 throughout; 200K verified 4 KiB random reads per run, medians of 3 rounds):

``--emulate h20-8ssd --n 1``: IOPS (ratio to fio's in the same round), CPU us/I/O

* scale 1 (1.1M IOPS limit), qd 32: python 84K (0.68), fio engine 131K (1.00),
  async fio 131K; CPU 6.8 / 9.1* / 5.1
* scale 1, qd 128: python 129K (0.90), fio engine 134K (0.78), async fio 143K;
  CPU 4.5 / 8.3* / 4.8
* scale 0.1 (110K IOPS limit) [a], qd 32: python 90K (1.44), fio engine 98K
  (1.72), fio 58K; CPU 6.2 / - / 4.2
* scale 0.1 [a], qd 128: python 88K (1.13), fio engine 93K (1.18), fio 87K;
  CPU 3.8 / - / 3.6

2026-11-24 (later, quiet machine, load 0.3-1.2, same command, 3 rounds): before /
after the lead-in probe (:mod:`real._fioprobe`: no lead-in pads where fio's own
ceiling is far below the limit, as at scale 1), fio engine against plain fio:

* scale 1, qd 32: 0.91 -> **0.94** (219K vs 232-243K IOPS); CPU 11.9 -> **6.0** us/I/O
  (plain fio 4.6-4.9: the rest is fio's verification, ~1.5 us, and the 2 x qd closing pads)
* scale 1, qd 128: 0.95 -> **1.01** (240K vs 238K); CPU 11.1 -> **5.6** us/I/O
* scale 0.1 (throttle binds: lead-in kept), qd 32: 0.99 (109K vs 110K); CPU 6.6 us/I/O

The python engine in the same rounds: 0.59 / 0.98 (qd 32 / 128).

Ratios are to fio's IOPS in the same round.  [a]: fio without ``--force_async``
(which on a loop device costs it half its IOPS), before CPU was measured from
outside.  ``*``: the fio engine's CPU is per plan I/O, but on a throttled target
every run also does one slice of lead-in and closing pads (:func:`real._fiolog.lead_in`;
at scale 1 that is 110K pads each way against 200K plan I/Os), so about half of it
is pads.  The spread is the machine's: plain fio alone ran 29K-172K IOPS over the
session.  Verification settings (fio alone, tmpfs, async, qd 32 / 128, CPU from
outside): no verify 3.7 / 3.6 us per I/O; ``verify=crc32c`` 5.9 / 5.8;
``crc32c-intel`` 5.6 / 5.6 (the same code: fio picks the SSE4.2 crc32c for both);
``disable_lat``/``disable_clat`` 5.7 / 5.6 (no gain); ``thread=1`` the same CPU as
processes; ``verify_async=2`` 17K IOPS at 37 us (far worse: handing each
completion to a verify thread costs more than checking it).  So per-I/O
verification costs fio about 2 us per 4 KiB read here and no setting tried
lowers it; ``verify=md5`` and ``experimental_verify`` were not tried (md5 is
slower than crc32c; experimental_verify concerns write-then-verify jobs).

Before 2026-11-24 (tmpfs file, no emulation, medians of 3 pairs): qd 32
0.71-1.24 of plain fio and 0.43 of ``--fio-async`` fio at 5.5-8 us per I/O; qd
128 0.78-2.25 of plain fio and 0.85 of ``--fio-async`` fio at 3.2-4.8 us.  The
replay loop's own cost, fitted over qd 8, 32 and 128 (main thread, verification
on): about 62-77 us per round plus 1-2 us per I/O, of which verification is
about 20 us per round plus 0.4 us per I/O; with no kernel at all (an engine
that completes at once) a round of the laid-out round robin costs 19 us of
Python at qd 32 and 22 us at qd 128.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import PlanBuilder
from real._blocks import BLOCK
from real.datafile import fill_targets, io_layout, prepare_targets
from real.fio import run_fio, summarize
from real.fioreplay import children_cpu_s
from real.replay import replay
from real.targets import Target

PLAIN = "plain-fio"  # fio's own random reads (no iolog, no verification): the yardstick


def randread_plan(
    ios: int, ops: int, size: int, qd: int, n_dev: int = 1, seed: int = 0
) -> pa.Table:
    """``ops`` read ops sharing ``ios`` uniformly random 4 KiB extents of ``size``; op j
    reads ``ssd{j % n_dev}`` (so every device gets ``ops / n_dev`` of them)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, size // BLOCK, ios, dtype=np.int64)
    b = PlanBuilder()
    for j, part in enumerate(np.array_split(blocks, ops)):
        if len(part):
            ext = np.stack([part * BLOCK, np.full(len(part), BLOCK)], axis=1)
            node = f"ssd{j % n_dev}"
            b.read(node, "dram0", extents=ext, queue_depth=qd, io_path="io_uring")
    return b.table()


def fio_iops(
    jobs: Mapping[str, int], size: int, qd: int, out: Path, force_async: bool = False
) -> tuple[float, float]:
    """(IOPS, process CPU seconds per I/O) of fio doing 4 KiB io_uring O_DIRECT random
    reads at ``qd``: one job per path of ``jobs`` (path -> I/Os), all at once.  IOPS are
    all jobs' I/Os over the longest job's runtime; CPU is fio's whole process CPU
    (:func:`real.fioreplay.children_cpu_s`, io-wq workers included, as for the replayer;
    fio's own ``usr_cpu``/``sys_cpu`` leave them out).

    ``--io_size`` (not ``--number_ios``, which ``--size`` would cut to one pass
    over the file) makes fio issue exactly the job's I/Os.
    """
    glob = [f"--bs={BLOCK}", "--rw=randread", f"--iodepth={qd}", "--ioengine=io_uring"]
    glob += ["--direct=1", f"--size={size}", "--norandommap", "--randrepeat=0"]
    glob += ["--force_async=1"] if force_async else []
    args = list(glob)
    for k, (path, ios) in enumerate(jobs.items()):
        args += [f"--name=bench{k}", f"--filename={path}", f"--io_size={ios * BLOCK}"]
    before = children_cpu_s()
    got = run_fio(args, out / "fio.json")
    cpu_s = children_cpu_s() - before
    runtime = max(j["read"]["runtime"] for j in got["jobs"]) / 1e3
    total = sum(j["read"]["total_ios"] for j in got["jobs"])
    return total / runtime if runtime > 0 else summarize(got).read.iops, cpu_s / max(1, total)


def replayer_iops(plan: pa.Table, files, engine: str, qd: int) -> tuple[float, float]:
    """(IOPS, process CPU seconds per I/O) of one verified replay of ``plan``."""
    rec = replay(plan, files, engine=engine, qd=qd)
    n_ios = rec.stats["ios"]
    return n_ios / rec.stats["makespan_s"], rec.stats["cpu_s"] / n_ios


def compare(plan: pa.Table, targets: Mapping[str, Target], size: int, a, tmp: Path) -> dict:
    """Alternate every engine of ``a.engine`` and fio ``a.repeat`` times; print each round
    and the medians; return ``{engine: (median IOPS, median us CPU/I/O, median ratio)}``."""
    lay = io_layout(plan)
    jobs = {targets[n].path: int((lay.io_node == k).sum()) for k, n in enumerate(lay.nodes)}
    got: dict[str, list] = {e: [] for e in a.engine}
    for r in range(a.repeat):
        line = f"qd {a.qd} run {r + 1}:"
        for e in a.engine:
            got[e].append(replayer_iops(plan, targets, e, a.qd))
            iops, cpu = got[e][-1]
            line += f" {e} {iops:,.0f} IOPS ({cpu * 1e6:.2f} us CPU/I/O),"
        if not a.no_fio:
            theirs, fio_cpu = fio_iops(jobs, size, a.qd, tmp, a.fio_async)
            got.setdefault(PLAIN, []).append((theirs, fio_cpu))
            line += f" {PLAIN} {theirs:,.0f} IOPS ({fio_cpu * 1e6:.2f} us CPU/I/O)"
        print(line, flush=True)
    return summarize_rounds(got, a.qd)


def summarize_rounds(got: dict[str, list], qd: int) -> dict:
    """Per engine: median IOPS, median CPU/I/O (us) and the median of its per-round ratio
    to fio's IOPS (NaN without fio); printed one line each."""
    fio = np.array([i for i, _ in got.get(PLAIN, [])])
    out = {}
    for e, rounds in got.items():
        iops = np.array([i for i, _ in rounds])
        cpu = np.median([c for _, c in rounds]) * 1e6
        ratio = float(np.median(iops / fio)) if len(fio) and e != PLAIN else float("nan")
        out[e] = (float(np.median(iops)), float(cpu), ratio)
        tail = f"; median {e}/fio {ratio:.2f} over {len(fio)} rounds" if ratio == ratio else ""
        print(f"qd {qd}: median {e} {out[e][0]:,.0f} IOPS, {cpu:.2f} us CPU/I/O{tail}")
    return out


@contextlib.contextmanager
def devices(a: argparse.Namespace, plan: pa.Table) -> Iterator[tuple[dict[str, Target], Path]]:
    """The targets the bench reads (filled for ``plan``) and a scratch directory: files
    under ``a.path``, or ``a.emulate``'s devices (this process joins their blkio group,
    so fio, its child, is held to the same limits)."""
    with tempfile.TemporaryDirectory(dir=a.path, prefix="kvtier-bench-") as tmp:
        if not a.emulate:
            files = prepare_targets(plan, tmp)
            try:
                yield files.targets, Path(tmp)
            finally:
                files.cleanup()
            return
        from real.emulate import emulate

        with emulate(a.emulate, a.n, where=a.path, size=a.size, scale=a.scale) as es:
            print(es.note, flush=True)
            # the plan's queue depth, not the profile's device slots, sets what is in flight
            targets = {t.node: dataclasses.replace(t, queue_depth=0) for t in es.targets}
            fill_targets(targets, plan)
            with es.joined():
                yield targets, Path(tmp)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="/dev/shm", help="directory for the data files")
    ap.add_argument("--ios", type=int, default=200_000)
    ap.add_argument("--ops", type=int, default=20)
    ap.add_argument("--qd", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--size", type=int, default=256 << 20, help="bytes per file or device")
    ap.add_argument("--engine", nargs="+", default=["uring"], help="replayer engines to time")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (engines, then fio) per qd")
    ap.add_argument("--no-fio", action="store_true")
    ap.add_argument(
        "--fio-async",
        action="store_true",
        help="fio with --force_async=1 (IOSQE_ASYNC, as the replayer issues tmpfs reads)",
    )
    ap.add_argument("--emulate", metavar="PROFILE", help="read emulated devices (root)")
    ap.add_argument("--n", type=int, default=1, help="emulated devices (with --emulate)")
    ap.add_argument("--scale", type=float, help="emulation scale (default: measured)")
    a = ap.parse_args(argv)
    n_dev = a.n if a.emulate else 1
    qds = a.qd
    with devices(a, randread_plan(a.ios, a.ops, a.size, max(qds), n_dev)) as (targets, tmp):
        for qd in qds:
            a.qd = qd
            plan = randread_plan(a.ios, a.ops, a.size, qd, n_dev)
            compare(plan, targets, a.size, a, tmp)


if __name__ == "__main__":
    main()

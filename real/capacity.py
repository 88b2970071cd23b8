"""What the machine can sustain, and whether throttled devices hold their limits.

Two fio measurements for :mod:`real.emulate`:

* :func:`measure_rates` drives all devices at once, unthrottled, to find
  the backing store's aggregate read/write bandwidth (1 MiB, QD16) and IOPS
  (4 KiB random, QD32), and one device's QD1 4 KiB latency;
  :func:`scale_for` turns that into the one factor that fits a profile's
  devices into it;
* :func:`check_limits` reads every throttled device at once inside the
  throttle group and compares each one's rate with its limit: at most the
  limit (the throttle holds), close to it (the machine keeps up).

Both keep fio's JSON in the directory they are given.  Without fio
(``kvtier real validate --no-fio``), :func:`measure_rates_replayer` measures
the same four aggregate rates and the QD1 latencies with kvtier's own
replayer: the plan of :func:`rate_plan`, replayed unthrottled on all devices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from hwprofiles.schema import HardwareProfile
from kvtier.contracts.plan import PlanBuilder
from real import fio
from real.errors import RealError
from real.targets import Target

MEASURE_REGION = 256 << 20  # bytes of each device a measurement touches


@dataclass(frozen=True)
class Rates:
    """Aggregate rates the backing store sustained (bytes/s, I/Os per second)."""

    read_bps: float
    write_bps: float
    read_iops: float
    write_iops: float
    read_latency_us: float = 0.0  # QD1 4 KiB mean completion latency, one device alone
    write_latency_us: float = 0.0


def measure_rates(paths: Sequence[str], evidence: Path, size: int, runtime: str = "500ms") -> Rates:
    """Aggregate rates of ``paths`` driven all at once by fio (unthrottled)."""
    region = min(size, MEASURE_REGION)
    got = {}
    for rw, bs, qd in (
        ("write", 1 << 20, 16),  # first: on a disk, reads then find written blocks
        ("read", 1 << 20, 16),
        ("randwrite", 4096, 32),
        ("randread", 4096, 32),
    ):
        opts = fio.point_options(rw, bs, qd, region, runtime)
        jobs = [{"name": f"ssd{i}", "filename": p} for i, p in enumerate(paths)]
        doc = fio.run_fio(fio.job_args(opts, jobs), evidence / f"{rw}.json")
        got[rw] = fio.summarize(doc, f"{rw}.json").stats
    for rw in ("randread", "randwrite"):
        opts = fio.point_options(rw, 4096, 1, region, runtime)
        doc = fio.run_fio(
            fio.job_args(opts, [{"name": "ssd0", "filename": paths[0]}]),
            evidence / f"{rw}-qd1.json",
        )
        got[f"{rw}-qd1"] = fio.summarize(doc, f"{rw}-qd1.json").stats
    return Rates(
        read_bps=got["read"].bw_bps,
        write_bps=got["write"].bw_bps,
        read_iops=got["randread"].iops,
        write_iops=got["randwrite"].iops,
        read_latency_us=got["randread-qd1"].clat_mean_us,
        write_latency_us=got["randwrite-qd1"].clat_mean_us,
    )


RATE_STEPS = ("write", "read", "randwrite", "randread", "randread-qd1", "randwrite-qd1")


def rate_plan(n: int, region: int, random_ios: int, qd1_ios: int = 256) -> pa.Table:
    """The replayer's rate measurement on devices ``ssd0..ssd{n-1}``: one step per
    :data:`RATE_STEPS` entry (``step`` = its index), each after the previous one.

    Sequential: every device written, then read, whole ``region`` in 1 MiB I/Os at
    QD16 (as :func:`measure_rates` drives fio); random: ``random_ios`` distinct
    4 KiB blocks of ``region`` per device at QD32; then ``qd1_ios`` 4 KiB random
    reads and writes of ``ssd0`` alone at QD1 (its latency)."""
    mib, blk = 1 << 20, 4096
    rng = np.random.default_rng(0)
    nodes = [f"ssd{k}" for k in range(n)]
    b, prev = PlanBuilder(), []

    def blocks(count: int) -> np.ndarray:
        picked = rng.choice(region // blk, size=min(count, region // blk), replace=False)
        return np.stack([picked * blk, np.full(len(picked), blk)], axis=1)

    for step, name in enumerate(RATE_STEPS):
        kind = "write" if "write" in name else "read"
        qd = 1 if name.endswith("qd1") else 32 if name.startswith("rand") else 16
        ops = []
        for node in nodes[:1] if qd == 1 else nodes:
            ends = ("dram0", node) if kind == "write" else (node, "dram0")
            kw = {"queue_depth": qd, "step": step, "io_path": "io_uring", "depends_on": prev}
            if name.startswith("rand"):
                kw["extents"] = blocks(qd1_ios if qd == 1 else random_ios)
            else:
                kw.update(nbytes=region // mib * mib, n_ios=region // mib, stride=mib)
            ops.append(getattr(b, kind)(*ends, **kw))
        prev = ops
    return b.table()


def measure_rates_replayer(targets: Sequence[Target], size: int, engine: str = "auto") -> Rates:
    """Aggregate rates of ``targets`` (created by kvtier) driven all at once by the
    replayer, unthrottled and unpaced: bytes (or I/Os) of each step of
    :func:`rate_plan` over that step's span, first start to last end."""
    import dataclasses

    from real.datafile import fill_targets
    from real.replay import replay

    region = min(size, MEASURE_REGION // 4) // (1 << 20) << 20
    plan = rate_plan(len(targets), region, random_ios=max(1024, 8192 // len(targets)))
    free = {t.node: dataclasses.replace(t, pacing=False) for t in targets}
    fill_targets(free, plan, 0)
    ops = replay(plan, free, seed=0, engine=engine).ops.to_pandas()
    got = {}
    for step, name in enumerate(RATE_STEPS):
        mine = ops[ops["step"] == step]
        span = float(mine["end_s"].max() - mine["start_s"].min())
        got[name] = (float(mine["bytes"].sum()) / span, float(mine["n_ios"].sum()) / span)
    return Rates(
        read_bps=got["read"][0],
        write_bps=got["write"][0],
        read_iops=got["randread"][1],
        write_iops=got["randwrite"][1],
        read_latency_us=1e6 / got["randread-qd1"][1],  # QD1: one I/O at a time
        write_latency_us=1e6 / got["randwrite-qd1"][1],
    )


METERS = ("fio", "replayer")
Meter = Callable[[list[Target]], Rates]


def make_meter(meter: str, evidence: Path, size: int) -> Meter:
    """What measures the backing store's rates: fio (its JSON kept in ``evidence``)
    or the replayer."""
    if meter == "replayer":
        return lambda targets: measure_rates_replayer(targets, size)

    def with_fio(targets: list[Target]) -> Rates:
        if fio.fio_binary() is None:
            raise RealError(
                f"{fio.missing_message()}; it measures the emulated devices: give --scale F "
                "to skip the measurement (F in (0, 1]: the fraction of the profile's rates)"
            )
        return measure_rates([t.path for t in targets], evidence, size)

    return with_fio


def scale_for(source: HardwareProfile, n: int, sustainable: Rates, headroom: float = 0.8) -> float:
    """The one factor that fits ``n`` devices of ``source`` into ``sustainable`` rates:
    ``min(1, headroom * sustainable / demand)`` over the four rates."""
    groups = [source.ssd(f"ssd{i}") for i in range(n)]
    demand = Rates(
        read_bps=sum(g.read_gbps for g in groups) * 1e9,
        write_bps=sum(g.write_gbps for g in groups) * 1e9,
        read_iops=sum(g.read_iops for g in groups),
        write_iops=sum(g.write_iops for g in groups),
    )
    rates = ("read_bps", "write_bps", "read_iops", "write_iops")
    ratios = [headroom * getattr(sustainable, r) / getattr(demand, r) for r in rates]
    return min(1.0, *ratios)


@dataclass(frozen=True)
class Check:
    """One device's measured rate against its limit (``what``: read_bps | read_iops)."""

    node: str
    what: str
    limit: float
    measured: float
    source: str
    burst: float = 0.0  # what the first queue of I/Os adds to a short run's rate

    @property
    def ratio(self) -> float:
        return self.measured / self.limit if self.limit else float("nan")

    def line(self) -> str:
        unit, div = ("MB/s", 1e6) if self.what.endswith("bps") else ("IOPS", 1)
        return (
            f"{self.node}: {self.what} limit {self.limit / div:.1f} {unit}, fio measured "
            f"{self.measured / div:.1f} {unit} ({100 * self.ratio:.0f}% of the limit)"
        )


def check_limits(
    targets: Sequence[Target],
    cgroup: str | Path | None,
    evidence: Path,
    runtime_s: float = 2.0,
    iops: bool = True,
) -> list[Check]:
    """Read every target at once with fio (512 KiB QD8; then 4 KiB QD32 if ``iops``)
    inside ``cgroup``; one :class:`Check` per device and measurement.

    The throttle lets the first queue of I/Os through at once, so a run may
    read up to ``Check.burst`` (``QD x bs / runtime``) above the limit.  (fio's
    ``ramp_time`` would hide that burst, but with a throttled device it
    stalls the restart and under-reports the rate.)  512 KiB, not larger: a
    larger I/O may be split by the loop driver, and the throttle passes split
    I/Os at about half its limit (see :mod:`real.calibrate`)."""
    region = min(min(t.size for t in targets), MEASURE_REGION)
    points = [("check-read", 512 << 10, 8, "read_bps")]
    if iops:
        points.append(("check-iops", 4096, 32, "read_iops"))
    checks = []
    for label, bs, qd, what in points:
        opts = fio.point_options("randread", bs, qd, region, f"{int(runtime_s * 1000)}ms")
        jobs = [{"name": t.node, "filename": t.path} for t in targets]
        doc = fio.run_fio(fio.job_args(opts, jobs), evidence / f"{label}.json", cgroup=cgroup)
        for t, run in zip(targets, fio.per_job(doc, f"{label}.json"), strict=True):
            got = run.read.bw_bps if what == "read_bps" else run.read.iops
            burst = qd * (bs if what == "read_bps" else 1) / runtime_s
            limit = getattr(t.limits, what)
            checks.append(Check(t.node, what, limit, got, f"{label}.json", burst))
    return checks

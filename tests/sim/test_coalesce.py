"""Coalesced reads: a contiguous run of slots is one range, cut at the device's
maximum transfer size, and the simulator sees those few large I/Os.

Every number below is worked out by hand from the h20-8ssd profile (Samsung
PM9A3: 6.9 GB/s, 1.1M IOPS, 80 us, QD 128, max I/O 1280 KiB; io_uring
1.5 us per I/O + 1 us per io_uring_enter of up to QD I/Os; PCIe 4.0 x4 7.88 GB/s).
"""

from __future__ import annotations

import numpy as np
import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import PlanBuilder, io_extents
from kvtier.contracts.units import KiB
from sim.executor import simulate
from sim.hw.machine import ssd_rates
from sim.policies import extents_from_slots
from sim.policies.baselines.nocluster import Stripe, entry_reads
from sim.policies.swarm.placement import place
from sim.policies.swarm.retrieval import schedule
from sim.policies.swarm.types import Clustering


@pytest.fixture(scope="module")
def h20():
    return load_profile("h20-8ssd")


def one_read(extents: np.ndarray, io_bytes: int) -> PlanBuilder:
    b = PlanBuilder()
    b.read("ssd0", "dram0", extents=extents, io_bytes=io_bytes, io_path="io_uring")
    return b


def test_one_contiguous_cluster_is_one_range_cut_at_max_io(h20):
    # one cluster of 40 entries, unbalanced placement: all 40 on one disk, slots 0..39
    eb = 40 * KiB  # 40 x 40 KiB = 1600 KiB = one 1280 KiB I/O + one 320 KiB I/O
    members = [np.arange(40, dtype=np.int64)]
    pl = place(Clustering(members, 1.0, 40), n_ssd=1, balance=False)
    buckets = schedule([0], pl, members)
    ext = extents_from_slots(buckets.slots[0], eb, merge=True)
    assert ext.tolist() == [[0, 40 * eb]]
    max_io = h20.ssds[0].max_io_kib * KiB
    plan = one_read(ext, max_io).table()
    assert plan.column("n_ios")[0].as_py() == -(-40 * eb // max_io) == 2
    assert plan.column("bytes")[0].as_py() == 40 * eb
    ios = io_extents(plan)
    assert ios.offset.tolist() == [0, 1280 * KiB]
    assert ios.length.tolist() == [1280 * KiB, 320 * KiB]


def test_non_contiguous_slots_keep_one_range_per_entry():
    eb = 4 * KiB
    # No Cluster's stripe (chunks of 16 on 2 disks): every other entry of chunk 0
    ids = np.arange(0, 16, 2)
    ext = entry_reads(ids, Stripe(16, 2), eb)
    assert ext[0].tolist() == [[s * eb, eb] for s in range(0, 16, 2)] and ext[1].size == 0
    # and the whole chunk is one range
    assert entry_reads(np.arange(16), Stripe(16, 2), eb)[0].tolist() == [[0, 16 * eb]]
    # Swarm's slots given out of order, with a gap: runs merged by offset only
    got = extents_from_slots(np.array([7, 3, 4, 9, 5]), eb, merge=True)
    assert got.tolist() == [[3 * eb, 3 * eb], [7 * eb, eb], [9 * eb, eb]]


def test_cluster_read_time_falls_as_the_model_predicts(h20):
    """1280 entries of 4 KiB (5 MiB) on one PM9A3, QD 0 (the device maximum), io_uring.

    Per entry: 1280 I/Os of 4 KiB.  Device min(6.9e9, 1.1e6 x 4096) = 4.5056e9
    B/s; queue 128 x 4096 / 80 us = 6.5536e9; link 7.88e9; data 80 us + 5 MiB /
    4.5056e9 = 1243.6 us.  CPU: 1280 x 1.5 + 1 x 1 = 1921 us on one core (the
    plan's queue_depth 0 submits all I/Os in one io_uring_enter) > data, so the
    op takes 1921 us (CPU-bound).
    Coalesced: one 5 MiB range = 4 I/Os of 1280 KiB.  Device min(6.9e9, 1.1e6 x
    1.31e6) = 6.9e9; queue 4 x 1310720 / 80 us = 65.5e9; data 80 us + 5 MiB /
    6.9e9 = 839.84 us; CPU 4 x 1.5 + 1 = 7 us.  The op takes 839.84 us: 1081.16 us less.
    """
    eb, n = 4 * KiB, 1280
    per_entry = extents_from_slots(np.arange(n), eb)
    merged = extents_from_slots(np.arange(n), eb, merge=True)
    max_io = h20.ssds[0].max_io_kib * KiB
    t_entry = simulate(one_read(per_entry, max_io).table(), h20).makespan_s
    t_merged = simulate(one_read(merged, max_io).table(), h20).makespan_s
    assert t_entry == pytest.approx((1280 * 1.5 + 1.0) * 1e-6, rel=1e-9)
    assert t_merged == pytest.approx(80e-6 + n * eb / 6.9e9, rel=1e-9)
    assert t_entry - t_merged == pytest.approx(1081.1623e-6, abs=1e-10)


def device_seconds(spec, sizes: np.ndarray) -> float:
    """Device time of I/Os of these sizes, each at its own rate (one flow per size)."""
    return sum(float(s) / ssd_rates(spec, False, float(s), 128).device_rate for s in sizes)


def test_mean_io_size_is_exact_within_one_regime(h20):
    """The executor rates an op by its mean I/O size B/n.  Bandwidth (B/bw), IOPS
    (n/iops) and queue (n x lat/qd) time are each linear in B or n, so the mean
    gives each exactly; the device time max(B/bw, n/iops) equals the I/Os rated
    one by one when all lie on one side of bw/iops (6273 B on a PM9A3), and is
    lower (the bounds overlap) when an op mixes IOPS- and bandwidth-bound I/Os."""
    spec = h20.ssds[0]
    large = np.array([1280 * KiB, 1280 * KiB, 320 * KiB])  # a range cut at max_io
    mean = large.sum() / large.size
    by_mean = large.sum() / ssd_rates(spec, False, mean, 128).device_rate
    assert by_mean == pytest.approx(device_seconds(spec, large), rel=1e-12)
    assert by_mean == pytest.approx(large.sum() / 6.9e9, rel=1e-12)
    small = np.full(8, 4 * KiB)  # all IOPS-bound: n / iops either way
    by_mean = small.sum() / ssd_rates(spec, False, 4 * KiB, 128).device_rate
    assert by_mean == pytest.approx(device_seconds(spec, small)) == pytest.approx(8 / 1.1e6)
    mixed = np.array([4 * KiB, 1280 * KiB])
    by_mean = mixed.sum() / ssd_rates(spec, False, mixed.mean(), 128).device_rate
    assert by_mean == pytest.approx(mixed.sum() / 6.9e9)  # the bandwidth bound alone
    assert device_seconds(spec, mixed) == pytest.approx(1 / 1.1e6 + 1280 * KiB / 6.9e9)
    assert by_mean < device_seconds(spec, mixed)

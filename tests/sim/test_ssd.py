"""The SSD's three regimes, worked out by hand for PM9A3 figures.

rate = min(bandwidth, IOPS x size, QD x size / latency).  An op of n I/Os
is one base latency L (the first wave: its min(n, QD) I/Os are in flight
together) then its bytes at the device rate, the n - QD I/Os after the
first wave at no more than QD per L: alone, an op takes
L + max(B / device_rate, (n - QD) x L / QD).  With L = 80 us, 1.1M IOPS,
6.9 GB/s:

* QD1, 4 KiB: QD x size / L = 4096 / 80e-6 = 51.2 MB/s  (latency-bound)
* QD32, 4 KiB: 32 x 4096 / 80e-6 = 1.638 GB/s; IOPS x 4 KiB = 4.506 GB/s, so
  at 80 us QD32 is still queue-bound: by Little's law the device needs
  1.1M x 80 us = 88 I/Os in flight to reach its IOPS.
* QD128, 4 KiB: 128 x 4096 / 80e-6 = 6.55 GB/s > 4.506 GB/s: IOPS-bound.
* QD32, 1 MiB: 32 x 1 MiB / 80 us = 419 GB/s, IOPS x 1 MiB = 1.15 TB/s:
  bandwidth-bound at 6.9 GB/s.
"""

import math

import pytest

from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate
from sim.hw.machine import ssd_rates

L = 80e-6
KIB4 = 4096
MIB = 1 << 20


def one_read(profile, nbytes, n_ios, qd, kind="read"):
    b = PlanBuilder()
    if kind == "read":
        b.read("ssd0", "dram0", nbytes, n_ios, queue_depth=qd, io_path="passthrough")
    else:
        b.write("dram0", "ssd0", nbytes, n_ios, queue_depth=qd, io_path="passthrough")
    rec = simulate(b.table(), profile)
    ops = rec.ops.to_pandas()
    return float(ops["end_s"][0] - ops["start_s"][0])


def test_rates_by_regime(pm9a3):
    qd1 = ssd_rates(pm9a3, False, KIB4, 1)
    assert qd1.solo_rate == pytest.approx(KIB4 / L)
    qd32 = ssd_rates(pm9a3, False, KIB4, 32)
    assert qd32.solo_rate == pytest.approx(32 * KIB4 / L)
    qd128 = ssd_rates(pm9a3, False, KIB4, 128)
    assert qd128.solo_rate == pytest.approx(1.1e6 * KIB4)
    big = ssd_rates(pm9a3, False, MIB, 32)
    assert big.solo_rate == pytest.approx(6.9e9)
    # queue depth is clamped to the device's useful maximum
    assert ssd_rates(pm9a3, False, KIB4, 4096).queue_rate == pytest.approx(128 * KIB4 / L)


def test_qd1_4k_latency_bound(tiny):
    n = 1000
    t = one_read(tiny, n * KIB4, n, 1)
    # n serial I/Os, one L each: the fill is the first I/O, not one more L
    # (L + B/device = 80 us + 0.91 ms < n x L = 80 ms)
    assert t == pytest.approx(n * L)
    assert n * KIB4 / t == pytest.approx(51.2e6)


def test_qd32_4k_queue_bound_at_80us(tiny):
    n = 32_000
    t = one_read(tiny, n * KIB4, n, 32)
    # 1000 waves of 32, one L each = n x L / 32 = 80 ms (the device alone would
    # need L + n / 1.1M = 29.2 ms)
    assert t == pytest.approx(n * L / 32)
    assert n * KIB4 / t == pytest.approx(32 * KIB4 / L)


def test_rates_op_cap_counts_the_first_wave_once(pm9a3):
    r = ssd_rates(pm9a3, False, KIB4, 32)
    assert r.op_cap(32) == math.inf and r.op_cap(1) == math.inf
    # 128 I/Os: the 96 after the first wave take 3 L, so 128 x 4 KiB in 240 us
    assert r.op_cap(128) == pytest.approx(128 * KIB4 / (3 * L))


def test_one_wave_of_4k_is_latency_plus_device_time(tiny):
    # n <= QD: all 32 I/Os are in flight at once; they finish after one L plus
    # their transfer at the device rate (IOPS-bound for 4 KiB: 32 / 1.1M = 29.1 us)
    t = one_read(tiny, 32 * KIB4, 32, 32)
    assert t == pytest.approx(L + 32 / 1.1e6)
    t = one_read(tiny, KIB4, 1, 1)  # one I/O: L + 4096 / 4.506 GB/s
    assert t == pytest.approx(L + 1 / 1.1e6)


def test_four_waves_take_four_latencies(tiny):
    # n = 4 QD at low device load: 4 waves of 32, 4 x 80 us = 320 us
    # (the device alone: L + 128 / 1.1M = 196 us, so the queue bounds it)
    t = one_read(tiny, 128 * KIB4, 128, 32)
    assert t == pytest.approx(4 * L)


def test_a_partial_last_wave_is_fluid(tiny):
    # n = 100 at QD32: the fluid model gives n x L / QD = 3.125 L = 250 us, between
    # the 3 full waves (240 us) and the discrete closed loop's ceil(100/32) L = 320 us
    t = one_read(tiny, 100 * KIB4, 100, 32)
    assert t == pytest.approx(100 * L / 32)
    assert 3 * L < t < 4 * L


def test_two_waves_bound_by_the_device(tiny):
    # n = 2 QD = 256 at QD128: the queue allows 2 L = 160 us, the device needs
    # 256 / 1.1M = 232.7 us after the first wave's L, so L + 232.7 us
    t = one_read(tiny, 256 * KIB4, 256, 128)
    assert t == pytest.approx(L + 256 / 1.1e6)


def test_qd128_4k_iops_bound(tiny):
    n = 110_000
    t = one_read(tiny, n * KIB4, n, 128)
    assert t == pytest.approx(L + n / 1.1e6)  # 0.1 s of IOPS + the fill
    assert n / (t - L) == pytest.approx(1.1e6)


def test_1mib_bandwidth_bound(tiny):
    n = 690
    t = one_read(tiny, n * MIB, n, 32)
    assert t == pytest.approx(L + n * MIB / 6.9e9)


def test_one_wave_of_large_ios_bandwidth_bound(tiny):
    # 8 x 1 MiB at QD32: one wave, L + 8 MiB / 6.9 GB/s = 80 + 1215.7 us
    t = one_read(tiny, 8 * MIB, 8, 32)
    assert t == pytest.approx(L + 8 * MIB / 6.9e9)


def test_two_single_wave_ops_share_the_device(tiny):
    # two ops of 64 x 4 KiB at QD64 start together: after one L both flows are
    # uncapped (one wave each) and split the device's 1.1M IOPS, so both end at
    # L + 128 / 1.1M (not L + 64 / 1.1M: contention still costs device time)
    b = PlanBuilder()
    for _ in range(2):
        b.read("ssd0", "dram0", 64 * KIB4, 64, queue_depth=64, io_path="passthrough")
    ops = simulate(b.table(), tiny).ops.to_pandas()
    for i in range(2):
        assert ops["end_s"][i] - ops["start_s"][i] == pytest.approx(L + 128 / 1.1e6)


def test_writes_use_write_figures(tiny):
    n = 400
    t = one_read(tiny, n * MIB, n, 32, kind="write")
    assert t == pytest.approx(20e-6 + n * MIB / 4.1e9)
    n = 20_000
    t = one_read(tiny, n * KIB4, n, 128, kind="write")
    assert t == pytest.approx(20e-6 + n / 200_000)


def test_small_and_large_share_device_time(tiny):
    # A 4 KiB stream (device rate 4.506 GB/s at QD128) and a 1 MiB stream
    # (6.9 GB/s) on one SSD: equal rates r with r/4.506e9 + r/6.9e9 = 1.
    b = PlanBuilder()
    n_small, n_big = 100_000, 400
    b.read("ssd0", "dram0", n_small * KIB4, n_small, queue_depth=128, io_path="passthrough")
    b.read("ssd0", "dram0", n_big * MIB, n_big, queue_depth=32, io_path="passthrough")
    rec = simulate(b.table(), tiny)
    small_rate = 1.1e6 * KIB4
    r = 1 / (1 / small_rate + 1 / 6.9e9)
    ops = rec.ops.to_pandas()
    # both run at r until the small one (409.6 MB < 419.4 MB) finishes
    assert ops["end_s"][0] == pytest.approx(L + n_small * KIB4 / r)
    left = n_big * MIB - n_small * KIB4
    assert ops["end_s"][1] == pytest.approx(ops["end_s"][0] + left / 6.9e9)
    assert rec.stats["capacity_peak"]["ssd0"] == pytest.approx(1.0)

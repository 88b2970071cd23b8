"""``software.io_submit_cores``: the cores that drive one SSD op's I/Os, an
assumption the sensitivity pass varies (hwprofiles/*.yaml, range 1-4).

The toy (tiny_profile: PM9A3, 1.1M read IOPS, 80 us; io_uring 1.0 us per I/O and
2.0 us per io_uring_enter): one io_uring read of n = 100,000 4 KiB I/Os at queue
depth 128.  Its CPU cost is 100,000 x 1.0 us + ceil(100,000 / 128) = 782 batches
x 2.0 us = 0.101564 core-seconds.  The SSD needs 80 us + 100,000 / 1.1M =
0.0909891 s (IOPS-bound: 4 KiB x 1.1M = 4.5 GB/s, under the 6.9 GB/s and the
7.88 GB/s link; the queue bound, 99,872 x 80 us / 128 = 0.0624 s, is looser).
On k cores the op takes max(0.101564 / k, 0.0909891): CPU-bound at k = 1, bound
by the SSD from k = 0.101564 / 0.0909891 = 1.116 up, so the range [1, 4] crosses
the flip point between its ends.
"""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles import Assumption
from hwprofiles.assume import with_value
from hwprofiles.loader import load_profile
from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate
from sim.hw.machine import Machine

N = 100_000
CPU_S = N * 1.0e-6 + 782 * 2.0e-6  # 0.101564 core-seconds
SSD_S = 80e-6 + N / 1.1e6  # 0.0909891 s


def _read(profile, io_path: str = "io_uring"):
    b = PlanBuilder()
    b.read("ssd0", "dram0", N * 4096, N, queue_depth=128, io_path=io_path)
    return simulate(b.table(), profile).ops.to_pandas().iloc[0]


def _with_cores(profile, k: int):
    sw = dataclasses.replace(profile.software, io_submit_cores=k)
    return dataclasses.replace(profile, software=sw)


def test_one_core_is_cpu_bound_two_are_ssd_bound(make_profile) -> None:
    p = make_profile()
    assert p.software.io_submit_cores == 1  # the default: one ring on one thread
    one = _read(p)
    assert one["end_s"] == pytest.approx(CPU_S)
    assert one["cpu_s"] == pytest.approx(CPU_S)
    for k in (2, 4):  # above k = 1.116 the SSD binds; the core-seconds are the same
        op = _read(_with_cores(p, k))
        assert op["end_s"] == pytest.approx(SSD_S)
        assert op["cpu_s"] == pytest.approx(CPU_S)
    assert 1 < CPU_S / SSD_S < 2  # the flip point, k = 1.116, lies inside [1, 4]


def test_a_cpu_bound_op_scales_with_the_cores_until_the_ssd_binds(make_profile) -> None:
    # 16 us per I/O (io_uring_per_io_us 16): 1.6016 core-s; 4 cores: 0.4004 s > SSD
    p = make_profile()
    p = dataclasses.replace(p, software=dataclasses.replace(p.software, io_uring_per_io_us=16.0))
    cpu = N * 16e-6 + 782 * 2e-6
    for k in (1, 2, 4):
        assert _read(_with_cores(p, k))["end_s"] == pytest.approx(cpu / k)


def test_synchronous_paths_stay_on_one_thread(make_profile) -> None:
    # kernel_fs: 5 us + a 2 us syscall per I/O on the calling thread, 0.7 s at any k
    p = _with_cores(make_profile(), 4)
    assert _read(p, "kernel_fs")["end_s"] == pytest.approx(N * 7e-6)
    m = Machine(p)
    paths = ("io_uring", "passthrough", "kernel_fs", "gds")
    assert [m.submit_cores(x) for x in paths] == [4, 4, 1, 1]


def test_the_sensitivity_pass_sets_it_at_each_end(make_profile) -> None:
    p = dataclasses.replace(
        make_profile(), assumptions=(Assumption("software.io_submit_cores", 1, 4, "toy"),)
    )
    assert _read(with_value(p, "software.io_submit_cores", 1))["end_s"] == pytest.approx(CPU_S)
    at_high = with_value(p, "software.io_submit_cores", 4)
    cores = at_high.software.io_submit_cores
    assert cores == 4 and isinstance(cores, int)
    assert _read(at_high)["end_s"] == pytest.approx(SSD_S)


@pytest.mark.parametrize("name", ["h20-8ssd", "dgx-spark", "h100-2dimm-2ssd", "l20-server"])
def test_seed_profiles_range_it_from_one_ring_per_ssd(name: str) -> None:
    p = load_profile(name)
    (a,) = [a for a in p.assumptions if a.field == "software.io_submit_cores"]
    assert (a.low, p.software.io_submit_cores, a.high) == (1, 1, 4)

"""The share of the emulated rates the paced design replays run at (no devices needed).

The emulation holds the devices' aggregate IOPS at half the replayer's *batched*
ceiling; the designs replay through the pacer, whose per-I/O cost is higher, so
:func:`kvtier.compare.replayer.pace_scale` slows the paced devices (and the profile the
designs are simulated on, :func:`~kvtier.compare.replayer.slowed`) until the loop has
the same headroom over them.  Worked by hand from h20-8ssd (8 x 1.1M read IOPS, 200K
write IOPS, 6.9 / 4.1 GB/s).
"""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles.loader import load_profile
from kvtier.compare.replayer import pace_scale, paced, slowed
from real.targets import Limits, Target


def test_the_reads_demand_binds_the_scale() -> None:
    p = load_profile("h20-8ssd")
    # 12.5 us an I/O: the loop's ceiling is 80,000 IOPS; half of it over 8 x 1.1M reads
    assert pace_scale(p, 12.5, 0.5) == pytest.approx(40_000 / 8_800_000)
    # the writes' demand (8 x 200K) alone would allow 40,000 / 1.6M = 0.025: not binding
    assert pace_scale(p, 12.5, 0.5) < 40_000 / 1_600_000


def test_a_loop_with_headroom_keeps_the_rates() -> None:
    p = load_profile("h20-8ssd")
    # 0.05 us an I/O: 20M IOPS, 10M at 0.5 headroom > 8.8M demanded
    assert pace_scale(p, 0.05, 0.5) == 1.0
    assert slowed(p, 1.0) is p
    assert pace_scale(p, 0.0, 0.5) == 1.0  # no measurement: nothing to hold to


def test_slowed_scales_rates_not_latencies() -> None:
    p = load_profile("h20-8ssd")
    s = slowed(p, 0.25)
    g, h = p.ssds[0], s.ssds[0]
    assert (h.read_gbps, h.write_gbps) == pytest.approx((6.9 / 4, 4.1 / 4))
    assert (h.read_iops, h.write_iops) == pytest.approx((275_000, 50_000))
    assert (h.read_latency_us, h.write_latency_us, h.count) == (
        g.read_latency_us,
        g.write_latency_us,
        g.count,
    )
    assert dataclasses.replace(s, ssds=p.ssds) == p  # nothing else moved


def test_paced_targets_are_held_to_the_scaled_limits() -> None:
    lim = Limits(read_bps=125_463_000, write_bps=74_550_300, read_iops=20_001, write_iops=0)
    t = {"ssd0": Target("ssd0", "/dev/null", 1 << 20, limits=lim), "dram0": Target("x", "/x", 1)}
    got = paced(t, scale=0.5)
    assert got["ssd0"].pacing and got["ssd0"].limits == Limits(
        read_bps=62_731_500, write_bps=37_275_150, read_iops=10_000, write_iops=0
    )  # 20,001 / 2 = 10,000.5 rounds to even; an unlimited rate stays unlimited
    assert got["dram0"] is t["dram0"]  # no limits: not paced
    assert paced(t)["ssd0"].limits == lim  # the default keeps the emulated rates


def test_paced_targets_carry_their_ssds_latency_from_the_profile():
    """The pacer adds the emulated device's access latency after an op's paced finish,
    as the simulator's latency phase: the profile's read / write latency of that SSD."""
    p = load_profile("h20-8ssd")
    g = p.ssd("ssd0")
    lim = Limits(read_bps=1_000_000, read_iops=1000)
    t = {"ssd0": Target("ssd0", "/dev/null", 1 << 20, limits=lim)}
    got = paced(t, p)["ssd0"]
    assert got.latency_s == pytest.approx((g.read_latency_us * 1e-6, g.write_latency_us * 1e-6))
    assert paced(t)["ssd0"].latency_s == (0.0, 0.0)  # no profile: none added

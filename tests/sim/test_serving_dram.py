"""Seed 004's host memory (§III-A): two DDR4 modules on one 21.3 GB/s
DDR4-2666 channel, which every bounced SSD byte crosses twice."""

import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate

MIB = 1 << 20
PROFILE = load_profile("h100-2dimm-2ssd")
LINKS = {ln.name: ln for ln in PROFILE.topology.links}
CHANNEL = LINKS["mc0.ch"].gbps * 1e9 * PROFILE.efficiency.membus


def test_channel_is_one_jedec_ddr4_2666_channel() -> None:
    # JEDEC DDR4-2666: 2,666.67 MT/s on a 64-bit (8 B) channel
    assert LINKS["mc0.ch"].gbps == pytest.approx(2666.67e6 * 8 / 1e9, rel=2e-3)
    assert LINKS["mc0.ch"].duplex == "half"
    # both modules hang off the one channel
    assert {tuple(LINKS[f"dram{i}.bus"].between) for i in (0, 1)} == {
        ("mc0", "dram0"),
        ("mc0", "dram1"),
    }


def ends(b: PlanBuilder) -> list[float]:
    return simulate(b.table(), PROFILE).ops.to_pandas()["end_s"].tolist()


def test_one_module_alone_gets_the_whole_channel() -> None:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", 64 * MIB)
    assert ends(b) == pytest.approx([64 * MIB / CHANNEL], rel=1e-9)


def test_two_modules_share_the_channel() -> None:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", 64 * MIB)
    b.copy("dram1", "gpu0", 64 * MIB)
    # not two buses: together they move 128 MiB at the channel's rate
    assert ends(b) == pytest.approx([128 * MIB / CHANNEL] * 2, rel=1e-9)


def test_ssd_bounce_and_copy_share_the_channel() -> None:
    """An SSD read into dram0 beside a copy out of dram1: both cross mc0.ch."""
    n = 64 * MIB
    b = PlanBuilder()
    b.read("ssd0", "dram0", n, n // (128 * 1024), queue_depth=128, io_path="passthrough")
    b.copy("dram1", "gpu0", n)
    read_end, copy_end = ends(b)
    lat = PROFILE.ssds[0].read_latency_us * 1e-6
    ssd = PROFILE.ssds[0].read_gbps * 1e9 * PROFILE.efficiency.ssd
    # the copy runs alone through the read's latency, then the two split the channel
    alone = CHANNEL * lat
    t1 = lat + (n - alone) / (CHANNEL / 2)
    assert copy_end == pytest.approx(t1, rel=1e-6)
    # the read then finishes its last `alone` bytes at the SSD's own rate
    assert read_end == pytest.approx(t1 + alone / min(ssd, CHANNEL), rel=1e-6)

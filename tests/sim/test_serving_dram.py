"""Seed 004's host memory (§III-A): two DDR4-2666 modules "with a combined peak
bandwidth of 21.3 GB/s".  The reading is one number, the memory controller's link
mc0.ch (an assumption of h100-2dimm-2ssd.yaml): 42.6 GB/s, one DDR4-2666 channel per
DIMM (the default), or 21.3 GB/s, both DIMMs on one channel (its low end), which every
bounced SSD byte then crosses twice."""

import pytest

from hwprofiles import load_profile
from hwprofiles.assume import with_value
from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate

MIB = 1 << 20
READING = "topology.links[0].gbps"
PROFILE = load_profile("h100-2dimm-2ssd")
LINKS = {ln.name: ln for ln in PROFILE.topology.links}
RANGE = {a.field: a for a in PROFILE.assumptions}[READING]
SHARED = with_value(PROFILE, READING, RANGE.low)
DDR4_2666 = 2666.67e6 * 8 / 1e9  # JEDEC DDR4-2666: 2,666.67 MT/s on a 64-bit (8 B) channel
DIMM = LINKS["dram0.bus"].gbps * 1e9 * PROFILE.efficiency.membus  # one module's bus
CHANNEL = RANGE.low * 1e9 * PROFILE.efficiency.membus  # the shared reading's one channel


def test_the_reading_is_one_field_with_both_readings_as_its_range() -> None:
    assert PROFILE.topology.links[0].name == "mc0.ch"
    assert LINKS["mc0.ch"].duplex == "half"
    # each DIMM is DDR4-2666 under both readings (10.65 per DIMM would be DDR4-1333)
    for i in (0, 1):
        assert LINKS[f"dram{i}.bus"].gbps == pytest.approx(DDR4_2666, rel=2e-3)
        assert PROFILE.dram[i].gbps == pytest.approx(DDR4_2666, rel=2e-3)
        assert tuple(LINKS[f"dram{i}.bus"].between) == ("mc0", f"dram{i}")
    # shared channel (low) .. one channel per DIMM (high, the default)
    assert RANGE.low == pytest.approx(DDR4_2666, rel=2e-3)
    assert RANGE.high == pytest.approx(2 * DDR4_2666, rel=2e-3)
    assert LINKS["mc0.ch"].gbps == RANGE.high


def ends(b: PlanBuilder, profile=PROFILE) -> list[float]:
    return simulate(b.table(), profile).ops.to_pandas()["end_s"].tolist()


@pytest.mark.parametrize("profile", [PROFILE, SHARED], ids=["per-DIMM", "shared"])
def test_one_module_alone_moves_at_its_dimms_rate(profile) -> None:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", 64 * MIB)
    assert ends(b, profile) == pytest.approx([64 * MIB / DIMM], rel=1e-9)


def test_per_dimm_two_modules_move_in_parallel() -> None:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", 64 * MIB)
    b.copy("dram1", "gpu0", 64 * MIB)
    # two channels of 17.04 GB/s: 34.08 GB/s together, below the GPU's PCIe 5.0 x16
    assert ends(b) == pytest.approx([64 * MIB / DIMM] * 2, rel=1e-9)


def test_shared_two_modules_share_the_channel() -> None:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", 64 * MIB)
    b.copy("dram1", "gpu0", 64 * MIB)
    # not two buses: together they move 128 MiB at the channel's rate
    assert ends(b, SHARED) == pytest.approx([128 * MIB / CHANNEL] * 2, rel=1e-9)


def test_shared_ssd_bounce_and_copy_share_the_channel() -> None:
    """An SSD read into dram0 beside a copy out of dram1: both cross mc0.ch."""
    n = 64 * MIB
    b = PlanBuilder()
    b.read("ssd0", "dram0", n, n // (128 * 1024), queue_depth=128, io_path="passthrough")
    b.copy("dram1", "gpu0", n)
    read_end, copy_end = ends(b, SHARED)
    lat = PROFILE.ssds[0].read_latency_us * 1e-6
    ssd = PROFILE.ssds[0].read_gbps * 1e9 * PROFILE.efficiency.ssd
    # the copy runs alone through the read's latency, then the two split the channel
    alone = CHANNEL * lat
    t1 = lat + (n - alone) / (CHANNEL / 2)
    assert copy_end == pytest.approx(t1, rel=1e-6)
    # the read then finishes its last `alone` bytes at the SSD's own rate
    assert read_end == pytest.approx(t1 + alone / min(ssd, CHANNEL), rel=1e-6)


def test_per_dimm_ssd_bounce_and_copy_do_not_meet() -> None:
    """The same two transfers with a channel per DIMM: the copy out of dram1 runs at
    its DIMM's rate whatever the read into dram0 does (mc0.ch has room for both:
    17.04 + 14.7 < 34.08 GB/s)."""
    n = 64 * MIB
    b = PlanBuilder()
    b.read("ssd0", "dram0", n, n // (128 * 1024), queue_depth=128, io_path="passthrough")
    b.copy("dram1", "gpu0", n)
    _, copy_end = ends(b)
    assert copy_end == pytest.approx(n / DIMM, rel=1e-9)

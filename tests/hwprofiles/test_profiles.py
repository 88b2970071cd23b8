"""Shipped hardware profiles: they load, say what their seeds say, and cite sources."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import pytest

from hwprofiles import PROFILE_DIR, HardwareProfile, list_profiles, load_profile


@dataclass(frozen=True)
class Expect:
    """Hand-written figures a profile must reproduce (from its seed unless noted)."""

    gpus: int
    hbm_gib: float
    ssds: int
    ssd_read_gbps: float  # summed over all SSDs
    dram_modules: int
    dram_gib: float  # summed
    dram_gbps: float  # summed
    cores: int


EXPECTED = {
    # seed 000 §8.1: 8x H20 96 GB, 64 cores, 1 TB DDR5, 8x PM9A3 at 6.9 GB/s
    "h20-8ssd": Expect(8, 96, 8, 8 * 6.9, 1, 1024, 614.4, 64),
    # seed 000 §8.1: same box with Optane 900P at 2.5 GB/s
    "h20-8ssd-900p": Expect(8, 96, 8, 8 * 2.5, 1, 1024, 614.4, 64),
    # seed 002 §5: 4x H20 96 GB, 64-core CPU, 128 GB host memory, no SSD
    "h20-4gpu-nvlink": Expect(4, 96, 0, 0.0, 1, 128, 307.2, 64),
    # seed 004 §III-A: H100 80 GB, two 64 GB DDR4-2666 modules ("a combined peak bandwidth of
    # 21.3 GB/s", read as one channel per DIMM: 2 x 21.3; the shared-channel reading, 21.3,
    # is the low end of the profile's assumption on mc0.ch), two SSDs
    "h100-2dimm-2ssd": Expect(1, 80, 2, 2 * 14.7, 2, 128, 2 * 21.3, 16),
    # seed 003 §9.1: the three KVDrive machines (one U.2 SSD each: an assumption)
    "l20-server": Expect(1, 48, 1, 6.9, 1, 100, 307.2, 48),
    "h20-server": Expect(1, 96, 1, 6.9, 1, 200, 460.8, 96),
    "rtx4090-ws": Expect(1, 24, 1, 6.9, 1, 120, 281.6, 32),
    # DGX BasePOD RA: 8 x H100 80 GB, 112 cores, 2 TB DDR5 (32 x 64 GB at 2 DPC: 16 channels x
    # 4400 MT/s x 8 B = 563.2 GB/s), 8 x 3.84 TB U.2 (modelled as PM1733: 6.4 GB/s read each)
    "dgx-h100": Expect(8, 80, 8, 8 * 6.4, 1, 2048, 563.2, 112),
    # two dgx-h100 nodes (hwprofiles/fleet.py): every figure twice, the host CPUs pooled
    "fleet-2x-dgx-h100": Expect(16, 80, 16, 16 * 6.4, 2, 2 * 2048, 2 * 563.2, 2 * 112),
    "fleet-2x-dgx-h100-8to1": Expect(16, 80, 16, 16 * 6.4, 2, 2 * 2048, 2 * 563.2, 2 * 112),
    # fleet-2x-dgx-h100 plus two 3fs-storage servers (3FS README: sixteen 14 TiB NVMe each;
    # 512 GiB of DDR5 on 8 channels x 4800 MT/s x 8 B = 307.2 GB/s, an assumption); no GPUs or
    # host CPUs of their own
    "fleet-2x-dgx-h100-storage": Expect(
        16, 80, 16 + 2 * 16, 48 * 6.4, 4, 2 * 2048 + 2 * 512, 2 * 563.2 + 2 * 307.2, 2 * 112
    ),
    # eight dgx-h100 nodes: every figure eight times
    "fleet-8x-dgx-h100": Expect(64, 80, 64, 64 * 6.4, 8, 8 * 2048, 8 * 563.2, 8 * 112),
    # seed 001 §3.1.1: 128 GB unified LPDDR5X, 20 cores; 273 GB/s (NVIDIA datasheet)
    "dgx-spark": Expect(1, 112, 1, 5.0, 1, 16, 273.0, 20),
}

PROFILES = list_profiles()


@pytest.fixture(scope="module", params=PROFILES)
def profile(request: pytest.FixtureRequest) -> HardwareProfile:
    return load_profile(request.param)


def test_every_shipped_profile_has_expectations() -> None:
    assert sorted(EXPECTED) == PROFILES


def test_name_matches_file(profile: HardwareProfile) -> None:
    assert profile.source_file == str(PROFILE_DIR / f"{profile.name}.yaml")


def combined_dram_gbps(p: HardwareProfile) -> float:
    """The modules' combined peak.  Modules whose buses meet at a memory
    channel (a node linked onward only by memory-bus links, h100-2dimm-2ssd's
    mc0) share that channel's link; modules on a root complex add up."""
    groups: dict[str, float] = {}
    for m in p.dram:
        (bus,) = [ln for ln in p.topology.links if m.name in ln.between]
        (at,) = [n for n in bus.between if n != m.name]
        groups[at] = groups.get(at, 0.0) + m.gbps
    total = 0.0
    for at, gbps in groups.items():
        onward = [ln for ln in p.topology.links if at in ln.between]
        onward = [ln for ln in onward if not set(ln.between) & set(p.dram_names)]
        channel = bool(onward) and all(ln.kind == "membus" for ln in onward)
        total += min([gbps, *(ln.gbps for ln in onward)]) if channel else gbps
    return total


def test_derived_counts_match_the_seed(profile: HardwareProfile) -> None:
    e = EXPECTED[profile.name]
    assert len(profile.gpu_names) == e.gpus
    assert profile.gpu.hbm_capacity_gib == e.hbm_gib
    assert len(profile.ssd_names) == e.ssds
    total_read = sum(g.count * g.read_gbps for g in profile.ssds)
    assert total_read == pytest.approx(e.ssd_read_gbps)
    assert len(profile.dram_names) == e.dram_modules
    assert sum(m.capacity_gib for m in profile.dram) == pytest.approx(e.dram_gib)
    assert combined_dram_gbps(profile) == pytest.approx(e.dram_gbps)
    assert profile.cpu.cores == e.cores


def test_every_dram_module_has_its_own_bus_of_its_bandwidth(profile: HardwareProfile) -> None:
    for m in profile.dram:
        buses = [ln for ln in profile.topology.links if m.name in ln.between]
        assert len(buses) == 1, m.name
        assert buses[0].duplex == "half" and buses[0].gbps == m.gbps


def test_each_ssd_link_carries_the_device_read_rate(profile: HardwareProfile) -> None:
    """An SSD's own link is no narrower than the device's datasheet read rate."""
    for name in profile.ssd_names:
        (link,) = [ln for ln in profile.topology.links if name in ln.between]
        assert link.gbps >= profile.ssd(name).read_gbps, name


# ---- topology: paths and shared links ------------------------------------------------------


def reachable(p: HardwareProfile, src: str, dst: str, without: str | None = None) -> bool:
    """Is there a path src -> dst that does not use link ``without``?

    Like the simulator's router, traffic only passes *through* switches, never
    through a GPU, SSD or DRAM module.
    """
    endpoints = set(p.gpu_names + p.ssd_names + p.dram_names)
    adj: dict[str, list[str]] = {n: [] for n in p.node_names}
    for ln in p.topology.links:
        if ln.name != without:
            a, b = ln.between
            adj[a].append(b)
            adj[b].append(a)
    seen, queue = {src}, deque([src])
    while queue:
        node = queue.popleft()
        if node == dst:
            return True
        if node != src and node in endpoints:
            continue
        for nxt in adj[node]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return False


def test_every_gpu_reaches_every_dram_module_and_ssd(profile: HardwareProfile) -> None:
    for gpu in profile.gpu_names:
        for other in profile.dram_names + profile.ssd_names:
            assert reachable(profile, other, gpu), (other, gpu)


def crosses(p: HardwareProfile, src: str, dst: str, link: str) -> bool:
    """Every path src -> dst crosses ``link`` (it is a cut between them)."""
    return reachable(p, src, dst) and not reachable(p, src, dst, without=link)


def test_swiftcache_gpus_share_one_32_gbps_host_link() -> None:
    p = load_profile("h20-4gpu-nvlink")
    assert p.link("sw0.up").gbps == 32.0
    for gpu in p.gpu_names:
        assert crosses(p, gpu, "dram0", "sw0.up"), gpu
        assert p.link(f"{gpu}.nvlink").gbps == 200.0  # 400 GB/s bidirectional
    assert p.ssds == ()


def test_unified_kv_pooling_ssds_share_the_x16_upstream() -> None:
    p = load_profile("h100-2dimm-2ssd")
    assert p.link("sw0.up").gbps == 63.0
    for ssd in p.ssd_names:
        assert crosses(p, ssd, "gpu0", "sw0.up"), ssd
        assert crosses(p, ssd, "dram0", "sw0.up"), ssd
    # the two DRAM modules are separate devices: neither bus carries the other's traffic
    assert crosses(p, "dram0", "gpu0", "dram0.bus")
    assert not crosses(p, "dram1", "gpu0", "dram0.bus")
    # ... on one DDR4-2666 channel (issue 15 cause 4: 21.3 GB/s is one channel, JEDEC),
    # which both cross: the modules share its 21.3 GB/s, not 2 x 10.65
    assert [m.gbps for m in p.dram] == [21.3, 21.3]
    assert crosses(p, "dram0", "gpu0", "mc0.ch") and crosses(p, "dram1", "gpu0", "mc0.ch")


@pytest.mark.parametrize("name", ["h20-8ssd", "h20-8ssd-900p"])
def test_swarm_gpu_pairs_share_a_switch_uplink(name: str) -> None:
    p = load_profile(name)
    for k in range(4):
        for gpu in (f"gpu{2 * k}", f"gpu{2 * k + 1}"):
            assert crosses(p, gpu, "dram0", f"sw{k}.up")
    for ssd in p.ssd_names:
        assert crosses(p, ssd, "gpu0", f"{ssd}.pcie")


def test_optane_profile_differs_from_pm9a3_only_in_ssds() -> None:
    a, b = load_profile("h20-8ssd"), load_profile("h20-8ssd-900p")
    assert (a.gpu, a.cpu, a.dram, a.software) == (b.gpu, b.cpu, b.dram, b.software)
    opt = b.ssds[0]
    assert (opt.read_gbps, opt.read_iops) == (2.5, 550_000)  # seed 000 §8.1
    assert opt.read_latency_us == 10  # Intel 900P product brief
    non_ssd = [ln for ln in a.topology.links if not ln.name.startswith("ssd")]
    assert non_ssd == [ln for ln in b.topology.links if not ln.name.startswith("ssd")]


def test_dgx_spark_memory_is_one_pool() -> None:
    p = load_profile("dgx-spark")
    # the GPU share and the host share split the seed's 128 GB; same LPDDR5X bus
    assert p.gpu.hbm_capacity_gib + p.dram[0].capacity_gib == 128
    assert p.gpu.hbm_gbps == p.dram[0].gbps == 273.0
    assert p.software.gpudirect


# ---- the source-comment lint ---------------------------------------------------------------

_NUMBER = r"[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# "key: 12", "key: &anchor 7.88", "{..., gbps: 50, ...}"
_NUMERIC_VALUE = re.compile(rf":\s+(?:&[\w.-]+\s+)?{_NUMBER}\s*(?:[,}}\]]|$)")


def strip_comment(line: str) -> tuple[str, bool]:
    """(code, has_comment): split at the first '#' outside quotes that starts a comment."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], True
    return line, False


def uncited_lines(text: str) -> list[int]:
    """Lines assigning a numeric literal with no comment on or directly above them (an
    assumption's range cites its source in its own ``why``)."""
    bad = []
    previous = ""
    for number, line in enumerate(text.splitlines(), start=1):
        code, has_comment = strip_comment(line)
        cited = has_comment or previous.startswith("#") or "why: " in code
        if _NUMERIC_VALUE.search(code) and not cited:
            bad.append(number)
        if line.strip():
            previous = line.strip()
    return bad


def test_lint_catches_and_passes_what_it_should() -> None:
    text = (
        "a: 1  # cited\n"
        "# cited above\n"
        "\n"
        "b: 2.5\n"
        "c: 3\n"
        "d: x4\n"
        'e: "12 # not a comment"\n'
        "f: &f 7.88\n"
        "- {name: x, gbps: 50, kind: y}\n"
        "g: *f\n"
        "h: 1.1e+6 # ok\n"
        '- {field: x.y, low: 1, high: 2, why: "a source"}\n'
        "- {field: x.y, low: 1, high: 2}\n"
    )
    assert uncited_lines(text) == [5, 8, 9, 13]


@pytest.mark.parametrize("name", PROFILES)
def test_every_number_carries_a_source_comment(name: str) -> None:
    text = (PROFILE_DIR / f"{name}.yaml").read_text()
    assert uncited_lines(text) == [], f"{name}.yaml: numbers without a source comment"


@pytest.mark.parametrize("name", PROFILES)
def test_header_names_the_seed(name: str) -> None:
    text = (PROFILE_DIR / f"{name}.yaml").read_text()
    header = text[: text.index("\nname:")]
    assert all(line.startswith("#") for line in header.splitlines() if line.strip())
    assert re.search(r"seed 00\d_[0-9a-f]{16}", header), f"{name}.yaml: header names no seed"


def test_dgx_h100_nvlink_is_half_the_bidirectional_900_per_direction() -> None:
    """NVIDIA's 900 GB/s per H100 SXM is both directions together (HGX H100 blog: "NVLink
    bidirectional speed of 900 gigabytes per second"): each direction of a GPU's port is
    450 GB/s, and the simulator charges 450 x 0.85 (efficiency.nvlink) = 382.5 GB/s."""
    from sim.hw.machine import Machine

    p = load_profile("dgx-h100")
    m = Machine(p)
    for gpu in p.gpu_names:
        assert p.link(f"{gpu}.nvlink").gbps == 900 / 2
        assert m.link_caps[f"{gpu}.nvlink"] == pytest.approx(382.5e9)
    assert m.route_names("gpu0", "gpu5") == ["gpu0.nvlink>", "gpu5.nvlink<"]  # via NVSwitch


def test_dgx_h100_aggregate_nvme_read_by_hand() -> None:
    """8 U.2 drives x 6.4 GB/s = 51.2 GB/s of reads into host memory, each drive on its own
    PCIe 4.0 x4 (16 GT/s x 4 x 128/130 / 8 = 7.88 GB/s, x 0.88 = 6.93 GB/s: wider than 6.4);
    the 563.2 GB/s DRAM bus (x 0.8 = 450.6) does not bind 51.2."""
    from sim.hw.machine import Machine

    p = load_profile("dgx-h100")
    m = Machine(p)
    assert sum(p.ssd(s).read_gbps for s in p.ssd_names) == pytest.approx(51.2)
    assert m.link_caps["ssd0.pcie"] == pytest.approx(7.88e9 * 0.88)
    assert m.link_caps["dram0.bus"] == pytest.approx(16 * 4400e6 * 8 * 0.80)

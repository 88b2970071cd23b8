"""Reloading a prefix over PCIe vs NVLink on h20-4gpu-nvlink (seed 002 Fig. 1):
from the profile's links (pure) and through the simulator; the shared host link."""

import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import PlanBuilder
from sim.executor import simulate
from sim.hw.machine import Machine
from sim.models import get_model
from sim.serving.swift.links import path_bps, path_links, reload_seconds

PROFILE = load_profile("h20-4gpu-nvlink")
# a 5K-token LWM history (Fig. 1's first point): 5000 x 0.5 MiB (seed 002 Table 2)
PREFIX = 5000 * get_model("LWM-Text-1M").kv_bytes_per_token
PCIE = 31.5e9 * 0.88  # gpu0.pcie, PCIe 4.0 x16 x efficiency: narrower than sw0.up's 32 x 0.88
NVLINK = 200e9 * 0.85  # 200 GB/s per direction x efficiency
HOST = 32e9 * 0.88  # sw0.up, the one host link of the four GPUs


def _ends(*copies):
    b = PlanBuilder()
    for src, dst in copies:
        b.copy(src, dst, PREFIX)
    ops = simulate(b.table(), PROFILE).ops.to_pandas()
    return (ops["end_s"] - ops["start_s"]).tolist()


def test_paths_from_the_profile():
    assert PREFIX == 5000 * 524_288
    assert [ln.name for ln in path_links(PROFILE, "dram0", "gpu0")] == [
        "dram0.bus",
        "sw0.up",
        "gpu0.pcie",
    ]
    assert [ln.name for ln in path_links(PROFILE, "gpu1", "gpu0")] == ["gpu1.nvlink", "gpu0.nvlink"]
    assert path_bps(PROFILE, "dram0", "gpu0") == pytest.approx(PCIE)
    assert path_bps(PROFILE, "gpu1", "gpu0") == pytest.approx(NVLINK)


@pytest.mark.parametrize("src, dst", [("dram0", "gpu0"), ("gpu1", "gpu0"), ("gpu0", "dram0")])
def test_same_route_as_the_simulated_machine(src, dst):
    names = [n.rstrip("<>") for n in Machine(PROFILE).route_names(src, dst)]
    assert names == [ln.name for ln in path_links(PROFILE, src, dst)]


def test_reload_pcie_vs_nvlink_pure_and_simulated():
    t_pcie = reload_seconds(PROFILE, PREFIX, "dram0", "gpu0")
    t_nvl = reload_seconds(PROFILE, PREFIX, "gpu1", "gpu0")
    # by hand: 2.62144 GB / 27.72 GB/s = 94.57 ms; / 170 GB/s = 15.42 ms
    assert t_pcie == pytest.approx(PREFIX / PCIE) == pytest.approx(0.094569, rel=1e-4)
    assert t_nvl == pytest.approx(PREFIX / NVLINK) == pytest.approx(0.015420, rel=1e-4)
    assert t_pcie / t_nvl == pytest.approx(NVLINK / PCIE)  # 6.13x
    # the simulator, one copy alone on the machine, agrees with both
    assert _ends(("dram0", "gpu0")) == pytest.approx([t_pcie], rel=1e-9)
    assert _ends(("gpu1", "gpu0")) == pytest.approx([t_nvl], rel=1e-9)


def test_two_instances_share_the_host_link():
    # masters on gpu0 and gpu2 reload at once: both cross sw0.up, each gets half of it
    # (14.08 GB/s, below either GPU's own 27.72 GB/s link)
    both = _ends(("dram0", "gpu0"), ("dram0", "gpu2"))
    assert both == pytest.approx([PREFIX / (HOST / 2)] * 2, rel=1e-9)
    assert min(both) > reload_seconds(PROFILE, PREFIX, "dram0", "gpu0")


def test_nvlink_reload_leaves_the_host_link_alone():
    # a borrowed-block load gpu1 -> gpu0 beside a host reload dram0 -> gpu2: no shared
    # link, so each takes its solo time
    nvl, host = _ends(("gpu1", "gpu0"), ("dram0", "gpu2"))
    assert nvl == pytest.approx(PREFIX / NVLINK, rel=1e-9)
    assert host == pytest.approx(PREFIX / PCIE, rel=1e-9)

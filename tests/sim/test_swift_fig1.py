"""Seed 002 Fig. 1's mechanism through the engine (sim/scenarios/swiftcache.py):
reloading an LWM history over PCIe vs NVLink, times worked out by hand."""

import pytest

from hwprofiles import load_profile
from sim.scenarios.swiftcache import reload_point, reload_shares

PROFILE = load_profile("h20-4gpu-nvlink")
PCIE = 31.5e9 * 0.88  # the GPU's own x16 link, narrower than sw0.up
NVLINK = 200e9 * 0.85
PER_TOKEN = 524_288  # LWM-Text-1M: 0.5 MiB of KV per token (seed 002 Table 2)


def test_reload_times_by_hand():
    # 5000 history tokens: 312 full 16-token blocks hit (4992 tokens), 2.617 GB
    hit = 312 * 16 * PER_TOKEN
    pcie = reload_point(PROFILE, "LWM-Text-1M", 5000, 64, "pcie", 16)
    nvl = reload_point(PROFILE, "LWM-Text-1M", 5000, 64, "nvlink", 16)
    assert pcie["reload_s"] == pytest.approx(hit / PCIE, rel=1e-9)  # 94.42 ms
    assert nvl["reload_s"] == pytest.approx(hit / NVLINK, rel=1e-9)  # 15.40 ms
    # the same prefill follows either reload
    assert pcie["ttft_s"] - pcie["reload_s"] == pytest.approx(nvl["ttft_s"] - nvl["reload_s"])


def test_reload_share_grows_with_history_and_nvlink_is_lower():
    rows = reload_shares(PROFILE, histories=(2_000, 8_000)).to_pylist()
    share = {(r["history_tokens"], r["path"]): r["reload_share"] for r in rows}
    for path in ("pcie", "nvlink"):
        assert share[(2_000, path)] < share[(8_000, path)]
    for h in (2_000, 8_000):
        assert share[(h, "nvlink")] < share[(h, "pcie")]

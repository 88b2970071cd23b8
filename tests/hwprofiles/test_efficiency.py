"""The profile's ``efficiency:`` section: defaults, overrides, physics bounds and
one clean error line for a bad factor, an unknown key or an unknown link kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hwprofiles import EfficiencySpec, list_profiles, load_profile
from hwprofiles.schema import LINK_KINDS, efficiency_of
from tests.hwprofiles.test_loader import MINIMAL, assert_points_at, edit, load_error, write

FACTORS = [f.name for f in dataclasses.fields(EfficiencySpec)]
SECTION = "efficiency:\n  pcie: 0.9\n"


def with_section(section: str) -> str:
    return edit("topology:\n", section + "topology:\n")


def test_every_link_kind_has_a_factor_field():
    for kind in LINK_KINDS:
        assert kind.replace("-", "_") in FACTORS
        assert efficiency_of(EfficiencySpec(), kind) == getattr(
            EfficiencySpec(), kind.replace("-", "_")
        )


def test_default_pcie_factor_is_below_the_tlp_packet_bound():
    # 256 B payload per TLP + 4 B framing/sequence + 16 B header + 4 B LCRC
    assert EfficiencySpec().pcie < 256 / (256 + 4 + 16 + 4)


@pytest.mark.parametrize("name", list_profiles())
def test_shipped_profiles_state_every_factor_in_0_1(name: str):
    p = load_profile(name)
    text = Path(p.source_file).read_text()
    kinds = {ln.kind.replace("-", "_") for ln in p.topology.links}
    if p.fleet is not None:  # the network's factor here, the node's in its own file
        section = text[text.index("\nefficiency:") : text.index("\nassumptions:")]
        assert "\n  rdma: " in section, name
        return
    section = text[text.index("\nefficiency:") : text.index("\ntopology:")]
    for factor in ("pcie", "membus", "hbm", "tensor", "ssd", *kinds):
        assert f"\n  {factor}: " in section, (name, factor)  # explicit, with its source
    for factor in FACTORS:
        assert 0 < getattr(p.efficiency, factor) <= 1


@pytest.mark.parametrize("name", list_profiles())
def test_each_ssd_link_carries_the_device_read_rate_after_efficiency(name: str):
    """The datasheet read rate is measured *through* the SSD's own link, so the
    link's achievable rate (gbps x its factor) must be at least that rate."""
    p = load_profile(name)
    for ssd in p.ssd_names:
        (link,) = [ln for ln in p.topology.links if ssd in ln.between]
        achievable = link.gbps * efficiency_of(p.efficiency, link.kind)
        assert achievable >= p.ssd(ssd).read_gbps * p.efficiency.ssd, (name, ssd)


def test_missing_section_gives_the_schema_defaults(tmp_path: Path):
    assert "efficiency" not in MINIMAL
    assert load_profile(write(tmp_path, MINIMAL)).efficiency == EfficiencySpec()


def test_a_partial_section_overrides_only_its_keys(tmp_path: Path):
    p = load_profile(write(tmp_path, with_section(SECTION)))
    assert p.efficiency == dataclasses.replace(EfficiencySpec(), pcie=0.9)


@pytest.mark.parametrize("bad", ["0", "-0.5", "1.01", "2"])
def test_factor_outside_0_1_names_file_line_and_key(tmp_path: Path, bad: str):
    text = with_section(f"efficiency:\n  hbm: {bad}\n")
    msg, path = load_error(tmp_path, text)
    line = text.splitlines().index(f"  hbm: {bad}") + 1
    assert_points_at(msg, path, line, "efficiency.hbm", "must be in (0, 1]", bad)


def test_non_number_factor_names_the_key(tmp_path: Path):
    text = with_section("efficiency:\n  tensor: high\n")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, text.splitlines().index("  tensor: high") + 1, "efficiency.tensor")


def test_unknown_factor_key_names_the_key(tmp_path: Path):
    text = with_section("efficiency:\n  pcei: 0.9\n")
    msg, path = load_error(tmp_path, text)
    line = text.splitlines().index("  pcei: 0.9") + 1
    assert_points_at(msg, path, line, "efficiency.pcei", "unknown key")


def test_unknown_link_kind_names_the_link(tmp_path: Path):
    old = "    - {name: sw0.up, between: [sw0, rc0], gbps: 10, kind: pcie}"
    text = edit(old, old.replace("kind: pcie", "kind: cxl"))
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, None, "topology.links[3].kind", "'cxl'")

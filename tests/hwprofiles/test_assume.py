"""A profile's assumptions: key paths, a profile with one number changed, coverage."""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles import list_profiles, load_profile
from hwprofiles.assume import PathError, field_value, with_value

# the kinds of link an efficiency factor applies to (hwprofiles/schema.py EfficiencySpec)
LINK_FACTORS = {"pcie": "pcie", "nvlink": "nvlink", "nvlink_c2c": "nvlink-c2c", "membus": "membus"}


def test_with_value_changes_one_number_only() -> None:
    p = load_profile("h20-8ssd")
    q = with_value(p, "efficiency.tensor", 0.6)
    assert field_value(q, "efficiency.tensor") == 0.6
    assert dataclasses.replace(q.efficiency, tensor=0.75) == p.efficiency
    assert q.cpu == p.cpu and q.assumptions == p.assumptions
    r = with_value(p, "ssds[0].read_latency_us", 120)
    assert r.ssds[0].read_latency_us == 120.0 and p.ssds[0].read_latency_us == 80.0
    s = with_value(p, "topology.links[1].gbps", 4.0)
    assert s.topology.links[1].gbps == 4.0 and s.topology.links[0] == p.topology.links[0]
    assert isinstance(with_value(p, "gpu.count", 4.0).gpu.count, int)


@pytest.mark.parametrize(
    "path", ["efficiency.tensr", "gpu.model", "ssds[9].read_gbps", "cpu", "a..b"]
)
def test_bad_paths(path: str) -> None:
    with pytest.raises(PathError):
        field_value(load_profile("h20-8ssd"), path)


@pytest.mark.parametrize("name", list_profiles())
def test_every_profile_ranges_its_efficiency_factors_and_core_copy_rate(name: str) -> None:
    """Each factor that applies to something of the profile (tensor, hbm, ssd always;
    a link factor where a link of its kind exists) and ``cpu.core_mem_gbps`` carry a
    range that holds the value."""
    p = load_profile(name)
    kinds = {link.kind for link in p.topology.links}
    want = {"efficiency.tensor", "efficiency.hbm", "efficiency.ssd", "cpu.core_mem_gbps"}
    want |= {f"efficiency.{f}" for f, k in LINK_FACTORS.items() if k in kinds}
    got = {a.field: a for a in p.assumptions}
    assert want <= set(got)
    for a in got.values():
        assert a.low <= field_value(p, a.field) <= a.high and a.why

"""A profile's assumptions: key paths, a profile with one number changed, coverage."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from hwprofiles import list_profiles, load_profile
from hwprofiles.assume import PathError, field_value, with_value
from hwprofiles.loader import (
    PROFILE_DIR,
    STORAGE_DIR,
    list_storage_servers,
    load_storage_server,
    read_yaml,
)
from hwprofiles.schema import HardwareProfile

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


# a comment that calls the number on its line an assumption
_ASSUMED = re.compile(r"\bassum(?:ption|ed)\b", re.IGNORECASE)
# ... and, where a range cannot be expressed, says so with its reason in parentheses
_NOT_RANGED = re.compile(r"\bassumption, not ranged \([^)]+\)", re.IGNORECASE)


def _commented_assumptions(name: str) -> list[tuple[str, str]]:
    """(key path, comment) of every number of profile ``name`` whose own line's
    comment calls it an assumption, read from the YAML text and the loader's map of
    key paths to lines (``defs:`` anchors are not fields: the field that uses one
    carries the range)."""
    path = PROFILE_DIR / f"{name}.yaml"
    text = path.read_text(encoding="utf-8").splitlines()
    _, where = read_yaml(path)
    profile = load_profile(name)
    out = []
    for key, line in where.lines.items():
        _, hash_, comment = text[line - 1].partition("#")
        top = key.split(".")[0]
        if not hash_ or not _ASSUMED.search(comment) or top in ("defs", "assumptions"):
            continue
        try:
            field_value(profile, key)
        except PathError:  # a model name, a flag, a block: not a number
            continue
        out.append((key, comment.strip()))
    return out


@pytest.mark.parametrize("name", list_profiles())
def test_every_number_a_profile_calls_an_assumption_has_a_range(name: str) -> None:
    """The rule for new profiles too: a number commented as an assumption has an
    ``assumptions:`` entry (low <= value <= high, a reason), or its comment says
    "assumption, not ranged (why)"."""
    profile = load_profile(name)
    ranged = {a.field for a in profile.assumptions}
    found = _commented_assumptions(name)
    missing = [k for k, c in found if k not in ranged and not _NOT_RANGED.search(c)]
    assert not missing, f"{name}: assumptions without a range: {missing}"


def test_the_comment_scan_finds_the_numbers_it_should() -> None:
    """The scan is not vacuous: on h100-2dimm-2ssd it finds the assumed CPU, SSD
    latencies and per-I/O costs, and not the seed's datasheet figures."""
    keys = dict(_commented_assumptions("h100-2dimm-2ssd"))
    assert {"cpu.cores", "cpu.core_gflops", "ssds[0].read_latency_us",
            "software.io_uring_per_io_us", "efficiency.tensor"} <= set(keys)  # fmt: skip
    assert "ssds[0].read_gbps" not in keys and "gpu.hbm_gbps" not in keys
    assert "software.kernel_fs_per_io_us" not in keys  # derived from seed 004's 11x
    not_ranged = dict(_commented_assumptions("l20-server"))["ssds[0].count"]
    assert _NOT_RANGED.search(not_ranged)


def _fleet_file(tmp_path: Path, base: str, old: str, new: str) -> HardwareProfile:
    text = (PROFILE_DIR / f"{base}.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1
    path = tmp_path / f"{base}.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return load_profile(path)


@pytest.mark.parametrize(
    ("base", "key", "old", "new", "value"),
    [
        ("fleet-2x-dgx-h100", "fleet.network.nodes_per_leaf",
         "nodes_per_leaf: 2 ", "nodes_per_leaf: 1 ", 1),
        ("fleet-2x-dgx-h100", "fleet.nic.latency_us", "latency_us: 2.0 ", "latency_us: 5.0 ", 5.0),
        ("fleet-2x-dgx-h100-8to1", "fleet.network.uplink_oversubscription",
         "uplink_oversubscription: 8.0 ", "uplink_oversubscription: 1.0 ", 1.0),
        ("fleet-2x-dgx-h100-8to1", "fleet.network.switch_latency_us",
         "switch_latency_us: 0.5 ", "switch_latency_us: 1.0 ", 1.0),
        ("fleet-2x-dgx-h100-8to1", "fleet.network.nodes_per_leaf",
         "nodes_per_leaf: 1 ", "nodes_per_leaf: 2 ", 2),
        ("fleet-2x-dgx-h100-storage", "fleet.network.nodes_per_leaf",
         "nodes_per_leaf: 4 ", "nodes_per_leaf: 2 ", 2),
        ("fleet-2x-dgx-h100-storage", "fleet.storage.nic.latency_us",
         "latency_us: 2.0     # assumption (header): as", "latency_us: 4.0     # as", 4.0),
    ],
)  # fmt: skip
def test_a_fleet_number_changed_rebuilds_its_links_as_the_file_would(
    tmp_path: Path, base: str, key: str, old: str, new: str, value: float
) -> None:
    """with_value on a fleet's network number gives the profile that loading a fleet
    file holding that number gives (expanded independently, by hwprofiles.fleet.expand)."""
    changed = with_value(load_profile(base), key, value)
    assert changed.topology == _fleet_file(tmp_path, base, old, new).topology
    assert changed.fleet == _fleet_file(tmp_path, base, old, new).fleet


def test_a_fleet_uplink_and_port_by_hand() -> None:
    """8to1: each node alone on its leaf, 8 NICs x 50 GB/s / 8 = 50 GB/s a leaf uplink;
    non-blocking (1) it is 400 GB/s; a NIC latency of 5 us puts 2.5 us on each port;
    one leaf for both nodes has no uplink and no spine."""
    p = load_profile("fleet-2x-dgx-h100-8to1")
    ups = {link.name: link.gbps for link in p.topology.links if link.name.startswith("leaf")}
    assert ups == {"leaf0.up": 50.0, "leaf1.up": 50.0}
    q = with_value(p, "fleet.network.uplink_oversubscription", 1.0)
    assert {k.name: k.gbps for k in q.topology.links if k.name.startswith("leaf")} == {
        "leaf0.up": 400.0, "leaf1.up": 400.0}  # fmt: skip
    r = with_value(p, "fleet.nic.latency_us", 5.0)
    ports = [k for k in r.topology.links if k.name.endswith(".port")]
    assert len(ports) == 16 and {k.latency_us for k in ports} == {2.5}
    s = with_value(p, "fleet.network.nodes_per_leaf", 2)
    assert not [k for k in s.topology.links if k.name.startswith("leaf")]
    assert "spine" not in s.topology.switches and "leaf1" not in s.topology.switches


def _server_commented_assumptions(name: str) -> list[tuple[str, str]]:
    """:func:`_commented_assumptions` for a storage-server file (hwprofiles/storage/)."""
    path = STORAGE_DIR / f"{name}.yaml"
    text = path.read_text(encoding="utf-8").splitlines()
    _, where = read_yaml(path)
    server = load_storage_server(name)
    out = []
    for key, line in where.lines.items():
        _, hash_, comment = text[line - 1].partition("#")
        if (
            not hash_
            or not _ASSUMED.search(comment)
            or key.split(".")[0] in ("defs", "assumptions")
        ):
            continue
        try:
            field_value(server, key)  # type: ignore[arg-type]  (any dataclass of numbers)
        except PathError:
            continue
        out.append((key, comment.strip()))
    return out


@pytest.mark.parametrize("name", list_storage_servers())
def test_every_number_a_storage_server_calls_an_assumption_has_a_range(name: str) -> None:
    server = load_storage_server(name)
    ranged = {a.field for a in server.assumptions}
    found = _server_commented_assumptions(name)
    assert found  # the scan is not vacuous: the shipped server assumes its DRAM and latencies
    missing = [k for k, c in found if k not in ranged and not _NOT_RANGED.search(c)]
    assert not missing, f"{name}: assumptions without a range: {missing}"
    for a in server.assumptions:
        assert a.low <= field_value(server, a.field) <= a.high and a.why  # type: ignore[arg-type]


def _fleet_of_files(tmp_path: Path, node: tuple[str, str, str], server: tuple[str, str, str]):
    """fleet-2x-dgx-h100-storage with its node profile and storage server read from
    copies in ``tmp_path``, each with one number edited: (file, old text, new text)."""
    paths = {}
    for src, old, new in (node, server):
        text = src.read_text(encoding="utf-8")
        assert text.count(old) == 1
        paths[src.stem] = tmp_path / src.name
        paths[src.stem].write_text(text.replace(old, new), encoding="utf-8")
    fleet = (PROFILE_DIR / "fleet-2x-dgx-h100-storage.yaml").read_text(encoding="utf-8")
    fleet = fleet.replace("node_profile: dgx-h100", f"node_profile: {paths['dgx-h100']}")
    fleet = fleet.replace("node_profile: 3fs-storage", f"node_profile: {paths['3fs-storage']}")
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet, encoding="utf-8")
    return load_profile(path)


def test_a_node_or_storage_number_changes_every_node_built_from_it(tmp_path: Path) -> None:
    """On the expanded fleet (2 DGX H100 nodes, one SSD group each; 2 3FS storage
    nodes, one group of 16 each: ssds[0..3]), the node profile's
    ``ssds[0].read_latency_us`` is both compute nodes' group (ssds[0] and [1]) and the
    server file's, offered as ``storage.ssds[0].read_latency_us``, both storage
    nodes' (ssds[2] and [3]); ``storage.dram[0].gbps`` is s0.dram0 and s1.dram0.
    Each changed profile equals the fleet expanded from files holding the number."""
    p = load_profile("fleet-2x-dgx-h100-storage")
    names = {a.field for a in p.assumptions}
    assert {"storage.ssds[0].read_latency_us", "storage.dram[0].gbps"} <= names
    assert [s.read_latency_us for s in p.ssds] == [80, 80, 80, 80]
    q = with_value(p, "ssds[0].read_latency_us", 120.0)
    assert [s.read_latency_us for s in q.ssds] == [120, 120, 80, 80]
    q = with_value(q, "storage.ssds[0].read_latency_us", 60.0)
    assert [s.read_latency_us for s in q.ssds] == [120, 120, 60, 60]
    q = with_value(q, "storage.dram[0].gbps", 614.4)
    assert {d.name: d.gbps for d in q.dram if d.name.startswith("s")} == {
        "s0.dram0": 614.4,
        "s1.dram0": 614.4,
    }
    assert field_value(q, "storage.ssds[0].read_latency_us") == 60.0
    node = (PROFILE_DIR / "dgx-h100.yaml", "read_latency_us: 80     # assumption, as the PM9A3",
            "read_latency_us: 120    # assumption, as the PM9A3")  # fmt: skip
    server = PROFILE_DIR / "storage" / "3fs-storage.yaml"
    files = _fleet_of_files(
        tmp_path, node, (server, "read_latency_us: 80 ", "read_latency_us: 60 ")
    )
    files = with_value(files, "storage.dram[0].gbps", 614.4)  # the ssds from files, dram here
    assert q.ssds == files.ssds and q.dram == files.dram and q.topology == files.topology

"""Profile loader: every user mistake is one ProfileError line naming file, line and key."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hwprofiles import HardwareProfile, ProfileError, list_profiles, load_profile, loader

# A valid profile small enough to reason about line by line: one GPU, one DRAM
# module, two SSDs behind one switch whose uplink both SSD paths share.
MINIMAL = """\
name: mini
description: "test profile"
defs:
  x4: &x4 7.88
gpu:
  model: G
  count: 1
  hbm_capacity_gib: 80
  hbm_gbps: 2000
  bf16_tflops: 100
cpu:
  model: C
  cores: 8
  core_gflops: 100
  core_mem_gbps: 10
dram:
  - {name: dram0, capacity_gib: 64, gbps: 50}
ssds:
  - model: S
    count: 2
    capacity_gib: 1000
    read_gbps: 6.9
    write_gbps: 4.1
    read_iops: 1000000
    write_iops: 200000
    read_latency_us: 80
    write_latency_us: 20
    max_queue_depth: 128
    max_io_kib: 1280
software:
  kernel_fs_per_io_us: 5
  io_uring_per_io_us: 1.5
  passthrough_per_io_us: 0.1
  syscall_us: 1
  gds_per_io_us: 2
  gpudirect: true
topology:
  switches: [rc0, sw0]
  links:
    - {name: dram0.bus, between: [rc0, dram0], gbps: 50, kind: membus, duplex: half}
    - {name: ssd0.pcie, between: [ssd0, sw0], gbps: *x4, kind: pcie}
    - {name: ssd1.pcie, between: [ssd1, sw0], gbps: *x4, kind: pcie}
    - {name: sw0.up, between: [sw0, rc0], gbps: 10, kind: pcie}
    - {name: gpu0.pcie, between: [gpu0, rc0], gbps: 63, kind: pcie}
"""


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based number of the ``nth`` line of ``text`` that contains ``needle``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) > nth, f"{needle!r} not in the test profile"
    return hits[nth]


def edit(old: str, new: str, text: str = MINIMAL) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def write(directory: Path, text: str, stem: str = "mini") -> Path:
    path = directory / f"{stem}.yaml"
    path.write_text(text)
    return path


def load_error(directory: Path, text: str, stem: str = "mini") -> tuple[str, Path]:
    path = write(directory, text, stem)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    return str(info.value), path


def assert_points_at(message: str, path: Path, line: int | None, key: str, *words: str) -> None:
    """One line, with the file, ``file:line``, the key path and the given words."""
    assert "\n" not in message
    assert path.name in message
    if line is not None:
        assert f"{path.name}:{line}:" in message, message
    assert key in message, message
    for word in words:
        assert word in message, message


# ---- the valid case ---------------------------------------------------------------


def test_minimal_profile_loads(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL))
    assert isinstance(p, HardwareProfile)
    assert p.name == "mini"
    assert p.source_file == str(tmp_path / "mini.yaml")
    assert p.gpu_names == ("gpu0",)
    assert p.ssd_names == ("ssd0", "ssd1")
    assert p.dram_names == ("dram0",)
    assert p.node_names == ("gpu0", "ssd0", "ssd1", "dram0", "rc0", "sw0")
    assert p.ssd("ssd1").read_iops == 1_000_000
    assert p.link("ssd1.pcie").gbps == 7.88  # through the defs anchor
    assert p.link("dram0.bus").duplex == "half"
    assert p.link("gpu0.pcie").duplex == "full"  # the default
    assert p.link("ssd0.pcie").between == ("ssd0", "sw0")
    assert isinstance(p.gpu.count, int) and isinstance(p.gpu.hbm_gbps, float)


def test_profile_is_frozen(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL))
    with pytest.raises(AttributeError):
        p.gpu.count = 2  # type: ignore[misc]


def test_empty_ssd_list_is_allowed(tmp_path: Path) -> None:
    start = MINIMAL.index("ssds:")
    end = MINIMAL.index("software:")
    text = MINIMAL[:start] + "ssds: []\n" + MINIMAL[end:]
    for link in ("ssd0.pcie", "ssd1.pcie"):
        text = "\n".join(line for line in text.splitlines() if link not in line) + "\n"
    p = load_profile(write(tmp_path, text))
    assert p.ssds == () and p.ssd_names == ()


# ---- unknown and missing keys ------------------------------------------------------------


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    text = edit("    read_gbps: 6.9", "    read_gbs: 6.9")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "read_gbs"), "ssds[0].read_gbs", "unknown key")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    text = MINIMAL + "colour: red\n"
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "colour"), "colour", "unknown key")


def test_defs_is_free_only_at_top_level(tmp_path: Path) -> None:
    text = edit("  model: G\n", "  model: G\n  defs: 1\n")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "  defs: 1"), "gpu.defs", "unknown key")


def test_missing_key_names_the_mapping_and_the_key(tmp_path: Path) -> None:
    text = edit("    write_iops: 200000\n", "")
    msg, path = load_error(tmp_path, text)
    # the line of the SSD group's mapping, where the key should have been
    assert_points_at(
        msg, path, line_of(text, "- model: S"), "ssds[0]", "missing required key 'write_iops'"
    )


def test_missing_top_level_key(tmp_path: Path) -> None:
    text = edit('description: "test profile"\n', "")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, 1, "'description'", "missing required key")


def test_duplicate_key_is_an_error_not_a_silent_override(tmp_path: Path) -> None:
    text = edit("    write_gbps: 4.1\n", "    write_gbps: 4.1\n    read_gbps: 0.5\n")
    msg, path = load_error(tmp_path, text)
    assert_points_at(
        msg, path, line_of(text, "read_gbps", nth=1), "ssds[0].read_gbps", "duplicate key"
    )


# ---- numbers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("    read_gbps: 6.9", "    read_gbps: 0", "ssds[0].read_gbps", ("must be > 0", "got 0")),
        ("  hbm_gbps: 2000", "  hbm_gbps: -1", "gpu.hbm_gbps", ("must be > 0",)),
        ("  cores: 8", "  cores: 0", "cpu.cores", ("must be > 0",)),
        ("    count: 2", "    count: -2", "ssds[0].count", ("must be > 0",)),
        (
            "capacity_gib: 64, gbps: 50}",
            "capacity_gib: 64, gbps: 0}",
            "dram[0].gbps",
            ("must be > 0",),
        ),
        (
            "[sw0, rc0], gbps: 10,",
            "[sw0, rc0], gbps: -10,",
            "topology.links[3].gbps",
            ("must be > 0",),
        ),
        (
            "    read_latency_us: 80",
            "    read_latency_us: -1",
            "ssds[0].read_latency_us",
            ("must be >= 0",),
        ),
        (
            "    read_gbps: 6.9",
            "    read_gbps: fast",
            "ssds[0].read_gbps",
            ("must be a number", "'fast'"),
        ),
        ("    read_gbps: 6.9", "    read_gbps: true", "ssds[0].read_gbps", ("must be a number",)),
        ("    read_gbps: 6.9", "    read_gbps: .inf", "ssds[0].read_gbps", ("finite",)),
        ("    read_gbps: 6.9", "    read_gbps: .nan", "ssds[0].read_gbps", ("finite",)),
        ("    count: 2", "    count: 2.5", "ssds[0].count", ("must be an integer",)),
        ("  syscall_us: 1", "  syscall_us: [1]", "software.syscall_us", ("must be a number",)),
        ("  gpudirect: true", "  gpudirect: 1", "software.gpudirect", ("true or false",)),
        ("  model: G", "  model: 7", "gpu.model", ("non-empty string",)),
    ],
)
def test_bad_value_names_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, words: tuple[str, ...]
) -> None:
    text = edit(old, new)
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, new.strip()), key, *words)


def test_zero_is_fine_for_a_cost(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, edit("  syscall_us: 1", "  syscall_us: 0")))
    assert p.software.syscall_us == 0.0


# ---- shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "at", "key", "words"),
    [
        (
            "  model: C\n  cores: 8\n  core_gflops: 100\n  core_mem_gbps: 10\n",
            "  - C\n",
            "cpu:",
            "cpu",
            ("must be a mapping",),
        ),
        ("switches: [rc0, sw0]", "switches: rc0", "switches:", "topology.switches", ("a list",)),
        (
            "between: [sw0, rc0]",
            "between: [sw0]",
            "[sw0]",
            "topology.links[3].between",
            ("2 items",),
        ),
    ],
)
def test_wrong_shape(
    tmp_path: Path, old: str, new: str, at: str, key: str, words: tuple[str, ...]
) -> None:
    text = edit(old, new)
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, at), key, *words)


def test_empty_file(tmp_path: Path) -> None:
    msg, path = load_error(tmp_path, "")
    assert_points_at(msg, path, None, "", "must be a mapping")


def test_invalid_yaml_syntax(tmp_path: Path) -> None:
    text = edit("  model: G", "  model: G: H")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "G: H"), "", "invalid YAML")


def test_invalid_yaml_unclosed_flow(tmp_path: Path) -> None:
    text = edit("switches: [rc0, sw0]", "switches: [rc0, sw0")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, None, "", "invalid YAML")
    assert f"{path.name}:" in msg.split("invalid YAML")[0]


# ---- topology --------------------------------------------------------------------------


def test_link_to_unknown_node(tmp_path: Path) -> None:
    text = edit("between: [ssd1, sw0]", "between: [ssd9, sw0]")
    msg, path = load_error(tmp_path, text)
    assert_points_at(
        msg, path, line_of(text, "ssd9"), "topology.links[2].between[0]", "unknown node 'ssd9'"
    )


def test_node_attached_to_no_link(tmp_path: Path) -> None:
    text = edit("    - {name: ssd1.pcie, between: [ssd1, sw0], gbps: *x4, kind: pcie}\n", "")
    msg, path = load_error(tmp_path, text)
    assert_points_at(
        msg, path, line_of(text, "  links:"), "topology.links", "'ssd1'", "not attached"
    )


def test_duplicate_link_name(tmp_path: Path) -> None:
    text = edit("{name: ssd1.pcie,", "{name: ssd0.pcie,")
    msg, path = load_error(tmp_path, text)
    line = line_of(text, "ssd0.pcie", nth=1)
    assert_points_at(msg, path, line, "topology.links[2].name", "duplicate link name 'ssd0.pcie'")


def test_bad_duplex(tmp_path: Path) -> None:
    text = edit("duplex: half}", "duplex: simplex}")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "simplex"), "topology.links[0].duplex", "'simplex'")


def test_node_defined_twice(tmp_path: Path) -> None:
    text = edit("switches: [rc0, sw0]", "switches: [rc0, sw0, dram0]")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, line_of(text, "topology:"), "topology", "'dram0'", "defined twice")


def test_link_to_itself(tmp_path: Path) -> None:
    text = edit("between: [gpu0, rc0]", "between: [gpu0, gpu0]")
    msg, path = load_error(tmp_path, text)
    assert_points_at(
        msg, path, line_of(text, "[gpu0, gpu0]"), "topology.links[4].between", "itself"
    )


# ---- names and files -----------------------------------------------------------------


def test_profile_name_must_match_file_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "PROFILE_DIR", tmp_path)  # the check applies to shipped profiles
    text = edit("name: mini", "name: other")
    msg, path = load_error(tmp_path, text)
    assert_points_at(msg, path, 1, "name", "'other'", "'mini'")


def test_other_directories_may_use_any_file_name(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, MINIMAL, stem="my-box"))
    assert p.name == "mini"


def test_load_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "PROFILE_DIR", tmp_path)
    write(tmp_path, MINIMAL)
    assert list_profiles() == ["mini"]
    assert load_profile("mini").name == "mini"


def test_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("no-such-box")
    msg = str(info.value)
    assert "\n" not in msg
    assert "unknown hardware profile 'no-such-box'" in msg
    assert "h20-8ssd" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(info.value) and "no such file" in str(info.value)


# ---- properties --------------------------------------------------------------------------

# every bandwidth in MINIMAL, as (key path, how to reach it in the parsed YAML)
BANDWIDTHS = [
    ("gpu.hbm_gbps", ("gpu", "hbm_gbps")),
    ("dram[0].gbps", ("dram", 0, "gbps")),
    ("ssds[0].read_gbps", ("ssds", 0, "read_gbps")),
    ("ssds[0].write_gbps", ("ssds", 0, "write_gbps")),
    ("topology.links[0].gbps", ("topology", "links", 0, "gbps")),
    ("topology.links[3].gbps", ("topology", "links", 3, "gbps")),
]


def load_with(route: tuple, value: object) -> HardwareProfile:
    """MINIMAL with one value replaced, written out and loaded."""
    data = yaml.safe_load(MINIMAL)
    node = data
    for step in route[:-1]:
        node = node[step]
    node[route[-1]] = value
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "mini.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_profile(path)


def read_back(profile: HardwareProfile, route: tuple) -> float:
    if route[0] == "gpu":
        return profile.gpu.hbm_gbps
    if route[0] == "dram":
        return profile.dram[route[1]].gbps
    if route[0] == "ssds":
        return getattr(profile.ssds[route[1]], route[2])
    return profile.topology.links[route[2]].gbps


@settings(max_examples=60, deadline=None)
@given(
    where=st.sampled_from(BANDWIDTHS),
    value=st.floats(min_value=1e-6, max_value=1e5, allow_nan=False, allow_infinity=False)
    | st.integers(min_value=1, max_value=10**5),
)
def test_any_positive_bandwidth_loads(where: tuple[str, tuple], value: float) -> None:
    key, route = where
    assert read_back(load_with(route, value), route) == float(value)


@settings(max_examples=60, deadline=None)
@given(
    where=st.sampled_from(BANDWIDTHS),
    value=st.floats(min_value=100_000.01, allow_nan=False, allow_infinity=False)
    | st.integers(min_value=100_001),
)
def test_a_bandwidth_above_the_ceiling_is_rejected_by_key(
    where: tuple[str, tuple], value: float
) -> None:
    key, _ = where
    with pytest.raises(ProfileError) as info:
        load_with(where[1], value)
    msg = str(info.value)
    assert "\n" not in msg
    assert "mini.yaml:" in msg and f": {key}: must be at most 100,000 (" in msg


@settings(max_examples=60, deadline=None)
@given(
    where=st.sampled_from(BANDWIDTHS),
    value=st.floats(max_value=0.0, allow_nan=False, allow_infinity=False)
    | st.integers(max_value=0),
)
def test_any_non_positive_bandwidth_is_rejected_by_key(
    where: tuple[str, tuple], value: float
) -> None:
    key, route = where
    with pytest.raises(ProfileError) as info:
        load_with(route, value)
    msg = str(info.value)
    assert "\n" not in msg
    assert "mini.yaml:" in msg and f": {key}: must be > 0" in msg

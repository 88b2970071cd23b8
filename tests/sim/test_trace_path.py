"""A serving scenario's request-trace file is found where kvtier runs, else beside the
scenario file (:mod:`sim.scenarios.trace_path`), when the scenario loads."""

from __future__ import annotations

import pytest

from sim.config import ConfigError, load_scenario

SCENARIO = "name: v\ndescription: x\nseed: 0\nworkload:\n  kind: serving\n  trace: {trace}\n"


def _write(tmp_path, trace: str, *files: str) -> str:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "v.yaml").write_text(SCENARIO.format(trace=trace))
    for name in files:
        (tmp_path / name).write_bytes(b"")  # only its existence is looked at on load
    return "sub/v.yaml"


def test_a_trace_beside_the_scenario_is_found_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_scenario(_write(tmp_path, "azure.parquet", "sub/azure.parquet"))
    assert cfg.workload.trace == "sub/azure.parquet"


def test_the_working_directory_comes_first_as_documented(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_scenario(_write(tmp_path, "azure.parquet", "azure.parquet", "sub/azure.parquet"))
    assert cfg.workload.trace == "azure.parquet"


def test_an_absolute_path_is_the_one_place_tried(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere.parquet"
    with pytest.raises(ConfigError) as exc:
        load_scenario(_write(tmp_path, str(missing)))
    assert str(exc.value).endswith(f"(no file at '{missing}')")
    assert str(exc.value).startswith("sub/v.yaml:6: workload.trace: ")


def test_a_variant_beside_the_scenario_gets_its_own_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "long_doc", "sub/b.parquet")
    with open(path, "a") as f:
        f.write("variants:\n  - {name: a}\n  - {name: b, trace: b.parquet}\n")
    cfg = load_scenario(path)
    a, b = (cfg.variant_params(v) for v in cfg.variants)
    assert (a.trace, b.trace) == ("long_doc", "sub/b.parquet")


def test_every_shipped_scenario_loads_its_trace() -> None:
    """Every scenario shipped in sim/scenarios names a trace that is built in or found:
    seed 002's ``sharegpt_long`` once failed here as a missing file."""
    from sim.config import SCENARIO_DIR, load_scenario

    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
    assert "swiftcache" in names
    for name in names:
        load_scenario(name)


SWARM = (
    "name: v\ndescription: x\nseed: 0\nworkload:\n  kind: swarm\n  model: Qwen3-32B\n"
    "  trace: {trace}\n"
)


def test_a_captured_access_trace_beside_the_scenario_is_found(tmp_path, monkeypatch):
    """A sparse-decoding scenario's captured access trace (a .parquet from
    ``kvtier trace capture``) follows the same rule as a serving trace file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "v.yaml").write_text(SWARM.format(trace="cap.parquet"))
    (tmp_path / "sub" / "cap.parquet").write_bytes(b"")
    assert load_scenario("sub/v.yaml").workload.trace == "sub/cap.parquet"


def test_a_capture_not_made_yet_is_left_as_named(tmp_path, monkeypatch):
    """Read (and refused, naming the file) when the lanes are built, not on load."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "v.yaml").write_text(SWARM.format(trace="later.parquet"))
    assert load_scenario("sub/v.yaml").workload.trace == "later.parquet"

"""Scenario configuration: the shipped scenario, overrides, and one-line errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from sim.config import (
    ConfigError,
    ScenarioConfig,
    SparseDecodeParams,
    Variant,
    list_scenarios,
    load_scenario,
)

# Line numbers matter: the error tests below name them.
BASE = """\
name: tiny
description: a small scenario
seed: 7
workload:
  model: Llama-3.1-8B
  context_tokens: 1024
  batch: 2
  sparsity: 0.5
  steps: 3
  io_path: io_uring
variants:
  - {name: one, ssds: 1}
  - {name: two, ssds: 2, io_path: passthrough}
  - {name: base}
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def tiny(tmp_path: Path) -> ScenarioConfig:
    return load_scenario(write(tmp_path, BASE))


def test_default_scenario_loads() -> None:
    assert "tiers" in list_scenarios()
    cfg = load_scenario("tiers")
    assert cfg.name == "tiers"
    assert cfg.source_file.endswith("tiers.yaml")
    assert cfg.workload.model == "Qwen3-32B"  # Swarm Table 2 (seed 000 §8.1)
    assert 0 < cfg.workload.sparsity <= 1
    assert cfg.workload.steps > 0
    names = [v.name for v in cfg.variants]
    assert len(names) == len(set(names)) >= 1
    for v in cfg.variants:  # every variant is a valid workload
        assert isinstance(cfg.variant_params(v), SparseDecodeParams)


def test_fields_and_defaults(tiny: ScenarioConfig) -> None:
    assert (tiny.name, tiny.description, tiny.seed) == ("tiny", "a small scenario", 7)
    w = tiny.workload
    assert (w.context_tokens, w.batch, w.sparsity, w.steps) == (1024, 2, 0.5, 3)
    # unset keys keep the dataclass defaults
    assert (w.ssds, w.queue_depth, w.gds, w.balance, w.layers) == (0, 0, False, "random", 0)
    assert tiny.variants == (
        Variant("one", (("ssds", 1),)),
        Variant("two", (("ssds", 2), ("io_path", "passthrough"))),
        Variant("base", ()),
    )


def test_variant_params_applies_overrides_and_keeps_the_rest(tiny: ScenarioConfig) -> None:
    one, two, base = (tiny.variant_params(v) for v in tiny.variants)
    assert one == dataclasses.replace(tiny.workload, ssds=1)
    assert two == dataclasses.replace(tiny.workload, ssds=2, io_path="passthrough")
    assert base == tiny.workload
    assert tiny.workload.ssds == 0  # the config itself is untouched


def test_no_variants_means_one_default_variant(tmp_path: Path) -> None:
    text = BASE.split("variants:")[0]
    cfg = load_scenario(write(tmp_path, text))
    assert cfg.variants == (Variant("default", ()),)


def test_to_dict_round_trips(tiny: ScenarioConfig, tmp_path: Path) -> None:
    d = tiny.to_dict()
    assert d["workload"]["ssds"] == 0  # defaults are written out: the effective config
    assert d["variants"][1] == {"name": "two", "ssds": 2, "io_path": "passthrough"}
    path = write(tmp_path, yaml.safe_dump(d, sort_keys=False), "effective.yaml")
    back = load_scenario(path)
    assert back.to_dict() == d
    assert dataclasses.replace(back, source_file="") == dataclasses.replace(tiny, source_file="")


def test_to_dict_round_trips_the_default_scenario(tmp_path: Path) -> None:
    cfg = load_scenario("tiers")
    path = write(tmp_path, yaml.safe_dump(cfg.to_dict()), "default-effective.yaml")
    assert load_scenario(path).to_dict() == cfg.to_dict()


def test_config_is_frozen(tiny: ScenarioConfig) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.workload.steps = 1  # type: ignore[misc]


# (edit of BASE, line named in the message, key path named in the message)
ERRORS = {
    "unknown workload key": (("  steps: 3", "  steps: 3\n  stepz: 4"), 10, "workload.stepz"),
    "unknown variant key": (
        ("{name: one, ssds: 1}", "{name: one, sdds: 1}"),
        12,
        "variants[0].sdds",
    ),
    "duplicate variant name": (("{name: base}", "{name: one}"), 14, "variants[2].name"),
    "sparsity above 1": (("sparsity: 0.5", "sparsity: 1.5"), 8, "workload.sparsity"),
    "sparsity zero": (("sparsity: 0.5", "sparsity: 0"), 8, "workload.sparsity"),
    "sparsity in a variant": (
        ("{name: base}", "{name: base, sparsity: 2.0}"),
        14,
        "variants[2].sparsity",
    ),
    "bad io_path": (("io_path: io_uring", "io_path: mmap"), 10, "workload.io_path"),
    "io_path none": (("io_path: io_uring", "io_path: none"), 10, "workload.io_path"),
    "bad io_path in a variant": (
        ("io_path: passthrough", "io_path: spdk"),
        13,
        "variants[1].io_path",
    ),
    "bad balance": (("  steps: 3", "  steps: 3\n  balance: round_robin"), 10, "workload.balance"),
    "negative ssds": (("  steps: 3", "  steps: 3\n  ssds: -1"), 10, "workload.ssds"),
    "negative ssds in a variant": (
        ("{name: one, ssds: 1}", "{name: one, ssds: -2}"),
        12,
        "variants[0].ssds",
    ),
    "negative queue_depth": (
        ("  steps: 3", "  steps: 3\n  queue_depth: -4"),
        10,
        "workload.queue_depth",
    ),
    "steps not a number": (("steps: 3", "steps: many"), 9, "workload.steps"),
    "missing workload key": (("  batch: 2\n", ""), 4, "workload"),
    "missing top-level key": (("seed: 7\n", ""), 1, ""),
    "variant without name": (("{name: base}", "{ssds: 3}"), 14, "variants[2]"),
}


@pytest.mark.parametrize("edit, line, key", ERRORS.values(), ids=ERRORS.keys())
def test_errors_name_file_line_and_key(
    tmp_path: Path, edit: tuple[str, str], line: int, key: str
) -> None:
    old, new = edit
    assert old in BASE
    path = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{line}: {key}"), msg


def test_missing_key_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, BASE.replace("  batch: 2\n", ""))
    with pytest.raises(ConfigError, match="missing required key 'batch'"):
        load_scenario(path)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, BASE.replace("  batch: 2", "  batch: [2"))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:") and "invalid YAML" in msg


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    path = write(tmp_path, BASE.replace("  batch: 2", "  batch: 2\n  batch: 3"))
    expected = rf"^{re.escape(str(path))}:8: workload\.batch: duplicate key$"
    with pytest.raises(ConfigError, match=expected):
        load_scenario(path)


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_scenario(write(tmp_path, "- just\n- a list\n"))


def test_unknown_scenario_name() -> None:
    with pytest.raises(ConfigError) as exc:
        load_scenario("no-such-scenario")
    msg = str(exc.value)
    assert "\n" not in msg
    assert "no-such-scenario" in msg and "default" in msg  # names the known ones


def test_missing_scenario_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(tmp_path / "absent.yaml")


# A KV-design scenario; line numbers matter, as in BASE.
SWARM = """\
name: designs
description: two KV designs
seed: 0
workload:
  kind: swarm
  context_tokens: 1024
  design: swarm
  design_params: {radius: 0.5}
variants:
  - {name: Swarm}
  - {name: InfLLM, design: infllm, design_params: {block_tokens: 64}}
"""

# (edit of SWARM, line named in the message, key path named, words the message must hold)
REGISTRY_ERRORS = {
    "unknown kind": (
        ("kind: swarm", "kind: swam"),
        5,
        "workload.kind",
        ["unknown workload kind 'swam'", "known: kvdrive, serving, sparse_decode, swarm"],
    ),
    "unknown design": (
        ("design: infllm", "design: inflm"),
        11,
        "variants[1].design",
        ["unknown KV design 'inflm'", "infllm", "swarm-static"],
    ),
    "unknown design in the workload": (
        ("  design: swarm", "  design: swarn"),
        7,
        "workload.design",
        ["unknown KV design 'swarn'"],
    ),
    "unknown design param": (
        ("{radius: 0.5}", "{radus: 0.5}"),
        8,
        "workload.design_params.radus",
        ["unknown parameter of swarm", "radius"],
    ),
    "unknown design param in a variant": (
        ("{block_tokens: 64}", "{block_token: 64}"),
        11,
        "variants[1].design_params.block_token",
        ["unknown parameter of infllm", "block_tokens"],
    ),
    "design param of the wrong type": (
        ("{block_tokens: 64}", "{block_tokens: big}"),
        11,
        "variants[1].design_params.block_tokens",
        ["must be int, got 'big'"],
    ),
    "design param a bool for an int": (
        ("{block_tokens: 64}", "{block_tokens: true}"),
        11,
        "variants[1].design_params.block_tokens",
        ["must be int, got True"],
    ),
    "design param its Params rejects": (
        ("{radius: 0.5}", "{retrieval: psychic}"),
        8,
        "workload.design_params",
        ["retrieval must be one of"],
    ),
    "a design param of another design": (  # InfLLM has no radius: the design decides
        ("{block_tokens: 64}", "{radius: 0.5}"),
        11,
        "variants[1].design_params.radius",
        ["unknown parameter of infllm"],
    ),
}


@pytest.mark.parametrize(
    "edit, line, key, words", REGISTRY_ERRORS.values(), ids=REGISTRY_ERRORS.keys()
)
def test_registry_errors_name_file_line_and_key(
    tmp_path: Path, edit: tuple[str, str], line: int, key: str, words: list[str]
) -> None:
    old, new = edit
    assert old in SWARM
    path = write(tmp_path, SWARM.replace(old, new, 1))
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{line}: {key}: "), msg
    assert all(w in msg for w in words), msg


def test_the_swarm_scenario_loads_with_its_design_params(tmp_path: Path) -> None:
    cfg = load_scenario(write(tmp_path, SWARM))
    swarm, infllm = (cfg.variant_params(v) for v in cfg.variants)
    assert (swarm.design, swarm.design_params) == ("swarm", {"radius": 0.5})
    assert (infllm.design, infllm.design_params) == ("infllm", {"block_tokens": 64})


def test_serving_design_params_are_checked_at_load(tmp_path: Path) -> None:
    text = SWARM.replace("kind: swarm", "kind: serving").replace("  context_tokens: 1024\n", "")
    text = text.replace("design: swarm", "design: pool").replace("{radius: 0.5}", "{cpu_gb: 1}")
    text = text.replace("design: infllm, design_params: {block_tokens: 64}", "design: lmcache")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}:7: workload.design_params.cpu_gb: unknown parameter")


def test_matrix_values_are_typed_at_load(tmp_path: Path) -> None:
    text = SWARM.replace("kind: swarm", "kind: serving").replace("  context_tokens: 1024\n", "")
    text = text.replace("design: swarm", "design: pool").replace("{radius: 0.5}", "{}")
    text = text.replace("design: infllm, design_params: {block_tokens: 64}", "design: lmcache")
    ok = text.replace("variants:", "  matrix: {context_tokens: [1024, 2048]}\nvariants:")
    assert load_scenario(write(tmp_path, ok)).workload.matrix == {"context_tokens": [1024, 2048]}
    bad = text.replace("variants:", "  matrix: {context_tokens: [1024, many]}\nvariants:")
    path = write(tmp_path, bad)
    with pytest.raises(ConfigError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(f"{path}:8: workload.matrix.context_tokens: must be int")

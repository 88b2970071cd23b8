"""The one registry: registration, lookup, and parameter checks by field and type."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sim import limits
from sim.policies import get_design
from sim.policies.baselines.infllm import InfLLM
from sim.policies.swarm.design import ABLATIONS, SwarmDesign
from sim.registry import (
    KV_DESIGNS,
    REQUEST_TRACES,
    SERVING_DESIGNS,
    WORKLOADS,
    Kind,
    ParamError,
    Registry,
    RegistryError,
)
from sim.serving.designs import DesignParams


@dataclass(frozen=True)
class Knobs:
    size: int = 4
    rate: float = 0.5
    name: str = "a"
    limit: int | None = None
    on: bool = False

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ParamError("size", f"must be >= 1, got {self.size}")


def fresh() -> Registry:
    reg = Registry("toy", "design")
    reg.register("toy", Knobs, lambda p: ("built", p))
    return reg


def test_registering_a_name_twice_fails() -> None:
    reg = fresh()
    with pytest.raises(ValueError, match="toy 'toy' registered twice"):
        reg.register("toy", Knobs)
    with pytest.raises(ValueError, match="KV design 'swarm' registered twice"):
        KV_DESIGNS.register("swarm", Knobs)
    assert reg.names() == ["toy"]


def test_params_must_be_a_frozen_dataclass() -> None:
    @dataclass
    class Loose:
        x: int = 0

    with pytest.raises(TypeError, match="frozen dataclass"):
        fresh().register("loose", Loose)


def test_a_kinds_caps_name_int_fields_of_its_params() -> None:
    reg = Registry("toy kind", "kind")
    for bad in ("rate", "limit", "nope"):  # a float, an optional int, no field at all
        with pytest.raises(TypeError, match=f"cap '{bad}' is no int field"):
            reg.register(bad, Knobs, kind=Kind("decode", limits.DECODE, caps={bad: 1}))
    entry = reg.register("toy", Knobs, kind=Kind("decode", limits.DECODE, caps={"size": 2}))
    assert entry.kind.caps == {"size": 2} and reg.names() == ["toy"]


def test_each_workload_kind_names_its_report_progress_limits_and_caps() -> None:
    kinds = {n: WORKLOADS.entry(n).kind for n in WORKLOADS.names()}
    assert {n: k.report for n, k in kinds.items()} == {
        "kvdrive": "kvdrive",
        "serving": "serving",
        "sparse_decode": "decode",
        "swarm": "swarm",
    }
    assert [n for n, k in kinds.items() if k.closed_loop] == ["serving"]
    assert kinds["serving"].limits is limits.SERVING and kinds["kvdrive"].limits is limits.KVDRIVE
    assert kinds["swarm"].limits is kinds["sparse_decode"].limits is limits.DECODE
    # the designs' sim-vs-real replay: swarm's and kvdrive's workloads, capped alike
    caps = {"context_tokens": 4096, "batch": 2, "layers": 4, "steps": 6, "profile_steps": 256}
    assert kinds["swarm"].caps == kinds["kvdrive"].caps == caps
    assert not kinds["serving"].caps and not kinds["sparse_decode"].caps


def test_lookup_checks_names_fields_and_types() -> None:
    reg = fresh()
    assert reg.create("toy", {"size": 8}) == ("built", Knobs(size=8))
    with pytest.raises(RegistryError) as exc:
        reg.entry("tyo")
    assert (exc.value.key, exc.value.message) == ("design", "unknown toy 'tyo' (known: toy)")
    bad = {
        "sise": ("design_params.sise", "unknown parameter of toy"),
        "size": ("design_params.size", "must be int, got '8'"),
        "on": ("design_params.on", "must be bool, got 1"),
        "limit": ("design_params.limit", "must be int, got 2.5"),
        "name": ("design_params.name", "must be str, got 3"),
    }
    values = {"sise": 1, "size": "8", "on": 1, "limit": 2.5, "name": 3}
    for field, (key, message) in bad.items():
        with pytest.raises(RegistryError) as exc:
            reg.params("toy", {field: values[field]})
        assert exc.value.key == key and exc.value.message.startswith(message), exc.value
    with pytest.raises(RegistryError, match=r"^design_params\.size: must be int, got True$"):
        reg.params("toy", {"size": True})  # a bool is not a number here


def test_ints_pass_for_floats_and_none_for_optionals() -> None:
    p = fresh().params("toy", {"rate": 1, "limit": None})
    assert p.rate == 1.0 and isinstance(p.rate, float) and p.limit is None
    assert fresh().params("toy", {"limit": 3}).limit == 3


def test_post_init_errors_name_their_field() -> None:
    with pytest.raises(RegistryError) as exc:
        fresh().params("toy", {"size": 0})
    assert (exc.value.key, exc.value.message) == ("design_params.size", "must be >= 1, got 0")
    with pytest.raises(RegistryError, match=r"^design_params\.io_path: must be one of"):
        SERVING_DESIGNS.params("pool", {"io_path": "ftp"})


def test_presets_start_and_overrides_win() -> None:
    # an ablation is Swarm with its preset; design_params still override it
    static = get_design("swarm-static")
    assert isinstance(static, SwarmDesign) and static.name == "swarm-static"
    assert static.params.retrieval == ABLATIONS["swarm-static"]["retrieval"] == "static"
    assert get_design("swarm-static", retrieval="first").params.retrieval == "first"
    # serving presets: LMCache is one kernel-filesystem stream; the override adds capacity
    lm = SERVING_DESIGNS.params("lmcache", {"cpu_gib": 2})
    assert (lm.io_path, lm.parallel, lm.cpu_gib) == ("kernel_fs", False, 2.0)
    assert SERVING_DESIGNS.params("gpu-only", {}) == DesignParams()


def test_every_kind_and_design_is_registered_once_by_the_catalog() -> None:
    assert WORKLOADS.names() == ["kvdrive", "serving", "sparse_decode", "swarm"]
    assert {"swarm", "nocluster", "infllm", "pqcache"} <= set(KV_DESIGNS.names())
    assert {f"{n}" for n in ABLATIONS} <= set(KV_DESIGNS.names())
    assert {"gpu-only", "paged-ssd", "lmcache", "pool"} <= set(SERVING_DESIGNS.names())
    assert WORKLOADS.entry("swarm").designs is KV_DESIGNS
    assert WORKLOADS.entry("kvdrive").designs is KV_DESIGNS
    assert WORKLOADS.entry("serving").designs is SERVING_DESIGNS
    assert isinstance(get_design("infllm", block_tokens=64), InfLLM)
    names = ["mooncake_conversation", "mooncake_synthetic", "mooncake_tool_agent"]
    assert REQUEST_TRACES.names() == names

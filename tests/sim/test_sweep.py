"""One sweep mechanism: the cartesian product of factors, typed from the workload."""

from __future__ import annotations

import dataclasses
import itertools

import pandas as pd
import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, ScenarioConfig, Variant, load_scenario
from sim.factors import expand_matrix, grid
from sim.runner import run
from sim.sweep import parse_factor, sweep, sweep_points

HW = "h20-8ssd"


@pytest.fixture(scope="module")
def tiny() -> ScenarioConfig:
    """Two variants of the tiers scenario, one decode step, a short context."""
    cfg = load_scenario("tiers")
    keep = ("1 SSD, io_uring", "all SSDs, kernel fs")
    variants = tuple(v for v in cfg.variants if v.name in keep)
    assert len(variants) == 2 and dict(variants[0].overrides) == {"ssds": 1}
    w = dataclasses.replace(cfg.workload, steps=1, context_tokens=4096)
    return dataclasses.replace(cfg, workload=w, variants=variants)


def test_grid_is_the_cartesian_product_first_factor_slowest() -> None:
    assert grid({"a": [1, 2], "b": ["x", "y", "z"]}) == [
        {"a": a, "b": b} for a, b in itertools.product([1, 2], ["x", "y", "z"])
    ]
    assert grid({}) == [{}]


def test_two_factors_give_every_combination_each_equal_to_a_direct_run(
    tiny: ScenarioConfig,
) -> None:
    factors = {"ssds": [2, 4], "context_tokens": [4096, 8192]}
    df = sweep(tiny, load_profile(HW), factors, jobs=1)
    combos = list(itertools.product([2, 4], [4096, 8192]))
    assert len(df) == len(combos) * len(tiny.variants)
    assert list(df.columns[:3]) == ["ssds", "context_tokens", "hw"]
    got = list(df[["ssds", "context_tokens"]].drop_duplicates().itertuples(index=False))
    assert [tuple(r) for r in got] == combos
    for ssds, ctx in combos:
        # built by hand: the factor replaces the base value and the variant's own (ssds: 1)
        w = dataclasses.replace(tiny.workload, ssds=ssds, context_tokens=ctx)
        variants = (
            Variant("1 SSD, io_uring", ()),
            Variant("all SSDs, kernel fs", (("io_path", "kernel_fs"),)),
        )
        direct = run(
            dataclasses.replace(tiny, workload=w, variants=variants), load_profile(HW), None
        )
        want = direct.summary().drop(columns=["ssds"])
        rows = df[(df.ssds == ssds) & (df.context_tokens == ctx)]
        pd.testing.assert_frame_equal(
            rows.drop(columns=["ssds", "context_tokens", "hw"]).reset_index(drop=True), want
        )


def test_a_process_pool_gives_the_same_table(tiny: ScenarioConfig) -> None:
    factors = {"batch": [1, 2], "io_path": ["io_uring", "passthrough"]}
    one = sweep(tiny, load_profile(HW), factors, jobs=1)
    two = sweep(tiny, load_profile(HW), factors, jobs=2)
    pd.testing.assert_frame_equal(one, two)


def test_the_one_factor_form_still_works(tiny: ScenarioConfig) -> None:
    a = sweep(tiny, load_profile(HW), "batch", [1, 2], jobs=1)
    b = sweep(tiny, load_profile(HW), {"batch": [1, 2]}, jobs=1)
    pd.testing.assert_frame_equal(a, b)
    assert list(a["batch"]) == [1, 1, 2, 2]


def test_hw_is_a_factor_like_the_others(tiny: ScenarioConfig) -> None:
    pts = sweep_points(tiny, {"hw": ["h20-8ssd", "h20-8ssd-900p"], "batch": [1, 2]})
    assert [p for p, _ in pts] == [
        {"hw": h, "batch": b} for h in ("h20-8ssd", "h20-8ssd-900p") for b in (1, 2)
    ]
    assert [c.workload.batch for _, c in pts] == [1, 2, 1, 2]


@pytest.mark.parametrize(
    "factors, message",
    [
        ({"ssdz": [1]}, "factor ssdz: unknown workload key (one of: model, context_tokens"),
        ({"ssds": ["x"]}, "factor ssds: must be int, got 'x'"),
        ({"ssds": [1.5]}, "factor ssds: must be int, got 1.5"),
        ({"ssds": []}, "factor ssds: must be a non-empty list"),
        ({"kind": ["swarm"]}, "factor kind: unknown workload key"),
        ({"io_path": ["mmap"]}, "factor io_path: must be one of"),
        ({"sparsity": [2.0]}, "factor sparsity: must be in (0, 1]"),
    ],
)
def test_bad_factors_and_values_are_one_line_naming_the_factor(
    tiny: ScenarioConfig, factors: dict, message: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        sweep_points(tiny, factors)
    assert str(exc.value).startswith(message), exc.value
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "text, values, want",
    [
        ("ssds=1,2,4", None, ("ssds", [1, 2, 4])),
        ("ssds", "1, 2", ("ssds", [1, 2])),
        ("sparsity=0.05,0.1", None, ("sparsity", [0.05, 0.1])),
        ("gds=true,false", None, ("gds", [True, False])),
        ("trace=default,positional", None, ("trace", ["default", "positional"])),
        ("hw=h20-8ssd", None, ("hw", ["h20-8ssd"])),
    ],
)
def test_parse_factor(text: str, values: str | None, want: tuple) -> None:
    assert parse_factor(text, values) == want


@pytest.mark.parametrize("text, values", [("ssds", None), ("ssds=", None), ("ssds=1", "2")])
def test_parse_factor_rejects(text: str, values: str | None) -> None:
    with pytest.raises(ConfigError, match="--factor ssds"):
        parse_factor(text, values)


def test_a_text_field_keeps_a_numeric_looking_value(tiny: ScenarioConfig) -> None:
    # "--factor model=8" reads 8 as a YAML int; a text field takes the text back
    ((p, c),) = sweep_points(tiny, {"model": [8]})
    assert p == {"model": "8"} and c.workload.model == "8"


def test_the_serving_matrix_expands_through_the_same_points() -> None:
    cfg = load_scenario("unified-pooling")
    v = cfg.variants[0]
    one = dataclasses.replace(
        cfg, variants=(v,), workload=dataclasses.replace(cfg.workload, matrix={})
    )
    matrix = {"model": ["Llama-3.1-8B", "Qwen3-30B-A3B"], "context_tokens": [1024, 4096]}
    mv = dataclasses.replace(v, overrides=(*v.overrides, ("matrix", matrix)))
    expanded = expand_matrix(dataclasses.replace(one, variants=(mv,)))
    assert [e.name for e in expanded] == [
        f"{v.name} | {m} | {k}" for m in matrix["model"] for k in ("1K", "4K")
    ]
    for e, point in zip(expanded, grid(matrix), strict=True):
        want = dataclasses.replace(one.variant_params(v), **point)
        assert one.variant_params(e) == want

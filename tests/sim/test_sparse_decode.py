"""Sparse-decode scenario: entry splits, the plan's shape and its dependency graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import depends_csr, validate_plan
from sim.config import load_scenario
from sim.models import get_model
from sim.scenarios.sparse_decode import (
    SparseDecodeShape,
    build_plan,
    entry_counts,
    plan_for,
    split_even,
)

SSDS = ("ssd0", "ssd1", "ssd2")
NODES = {*SSDS, "dram0", "gpu0", "rc0"}
EB = 4096  # entry bytes


def make_shape(
    steps: int = 2,
    layers: int = 3,
    entries: int = 10,
    gds: bool = False,
    ssds: tuple[str, ...] = SSDS,
) -> SparseDecodeShape:
    return SparseDecodeShape(
        steps=steps,
        layers=layers,
        ssds=ssds,
        gpu="gpu0",
        dram="dram0",
        entries_per_layer=entries,
        entry_bytes=EB,
        ios_per_entry=2,
        flops_per_layer=1e9,
        hbm_bytes_per_layer=1e6,
        gds=gds,
    )


def deps_of(plan: pa.Table) -> list[list[int]]:
    offsets, values = depends_csr(plan)
    return [values[offsets[i] : offsets[i + 1]].tolist() for i in range(plan.num_rows)]


def ops_by_group(plan: pa.Table) -> dict[tuple[int, int], dict[str, list[int]]]:
    """(step, layer) -> {'read': [ids], 'copy': [ids], 'compute': [ids]}."""
    cols = plan.select(["step", "layer", "kind"]).to_pydict()
    groups: dict[tuple[int, int], dict[str, list[int]]] = {}
    for i, (s, layer, kind) in enumerate(
        zip(cols["step"], cols["layer"], cols["kind"], strict=True)
    ):
        groups.setdefault((s, layer), {"read": [], "copy": [], "compute": []})[kind].append(i)
    return groups


@pytest.mark.parametrize("total, parts", [(10, 3), (9, 3), (2, 5), (0, 4), (131072, 8), (7, 1)])
def test_split_even(total: int, parts: int) -> None:
    split = split_even(total, parts)
    assert len(split) == parts
    assert split.sum() == total
    assert split.max() - split.min() <= 1


def test_split_even_puts_the_remainder_first() -> None:
    assert split_even(10, 3).tolist() == [4, 3, 3]


def test_entry_counts_even() -> None:
    counts = entry_counts(make_shape(), "even", None)
    assert counts.shape == (6, 3)
    assert (counts == [4, 3, 3]).all()


def test_entry_counts_random() -> None:
    shape = make_shape(steps=4, layers=5, entries=1000)
    a = entry_counts(shape, "random", np.random.default_rng(1))
    b = entry_counts(shape, "random", np.random.default_rng(1))
    c = entry_counts(shape, "random", np.random.default_rng(2))
    assert a.shape == (20, 3)
    assert (a.sum(axis=1) == 1000).all() and (c.sum(axis=1) == 1000).all()
    assert (a >= 0).all()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not (a == a[0]).all()  # random, not the even split repeated


def test_entry_counts_random_needs_a_generator() -> None:
    with pytest.raises(ValueError, match="random generator"):
        entry_counts(make_shape(), "random", None)


@pytest.mark.parametrize("gds, per", [(False, 3 + 2), (True, 3 + 1)])
def test_build_plan_shape_and_bytes(gds: bool, per: int) -> None:
    shape = make_shape(gds=gds)
    plan = build_plan(shape)
    validate_plan(plan, NODES, SSDS, {"gpu0"})
    assert plan.num_rows == 2 * 3 * per
    cols = plan.to_pydict()
    dst = "gpu0" if gds else "dram0"
    for key, g in ops_by_group(plan).items():
        reads = g["read"]
        assert [cols["src"][i] for i in reads] == list(SSDS)
        assert all(cols["dst"][i] == dst for i in reads)
        assert all(cols["io_path"][i] == ("gds" if gds else "io_uring") for i in reads)
        assert [cols["bytes"][i] for i in reads] == [4 * EB, 3 * EB, 3 * EB]
        assert [cols["n_ios"][i] for i in reads] == [8, 6, 6]  # 2 I/Os per entry
        assert sum(cols["bytes"][i] for i in reads) == shape.entries_per_layer * EB, key
        assert len(g["copy"]) == (0 if gds else 1)
        for i in g["copy"]:
            assert (cols["src"][i], cols["dst"][i], cols["bytes"][i]) == ("dram0", "gpu0", 10 * EB)
        (comp,) = g["compute"]
        assert (cols["flops"][comp], cols["hbm_bytes"][comp]) == (1e9, 1e6)
        assert cols["bytes"][comp] == 0


@pytest.mark.parametrize("gds", [False, True])
def test_build_plan_dependencies(gds: bool) -> None:
    plan = build_plan(
        make_shape(gds=gds), entry_counts(make_shape(), "random", np.random.default_rng(0))
    )
    deps = deps_of(plan)
    for i, d in enumerate(deps):
        assert all(0 <= j < i for j in d), (i, d)
    groups = ops_by_group(plan)
    order = sorted(groups)  # (step, layer): layer 0 of step s follows layer L-1 of s-1
    for n, key in enumerate(order):
        g = groups[key]
        expect_read: set[int] = set()
        if n >= 1:
            expect_read |= set(groups[order[n - 1]]["read"])
        if n >= 2:
            expect_read |= set(groups[order[n - 2]]["compute"])
        for r in g["read"]:
            assert set(deps[r]) == expect_read, (key, r)
        (comp,) = g["compute"]
        before = set(g["copy"]) if not gds else set(g["read"])
        if n >= 1:
            before |= set(groups[order[n - 1]]["compute"])
        assert set(deps[comp]) == before
        for c in g["copy"]:
            assert set(deps[c]) == set(g["read"])


def test_zero_count_ssds_get_no_op_and_dependencies_are_remapped() -> None:
    shape = make_shape(steps=1, layers=3)
    counts = np.array([[5, 0, 5], [10, 0, 0], [3, 3, 4]])
    plan = build_plan(shape, counts)
    validate_plan(plan, NODES, SSDS, {"gpu0"})
    cols = plan.to_pydict()
    # layer 0: read ssd0 (0), read ssd2 (1), copy (2), compute (3)
    # layer 1: read ssd0 (4), copy (5), compute (6)
    # layer 2: reads ssd0..2 (7, 8, 9), copy (10), compute (11)
    assert cols["kind"] == [
        "read",
        "read",
        "copy",
        "compute",
        "read",
        "copy",
        "compute",
        "read",
        "read",
        "read",
        "copy",
        "compute",
    ]
    assert cols["src"][:2] == ["ssd0", "ssd2"]
    assert cols["src"][4] == "ssd0"
    assert cols["layer"] == [0] * 4 + [1] * 3 + [2] * 5
    assert cols["bytes"] == [
        5 * EB,
        5 * EB,
        10 * EB,
        0,
        10 * EB,
        10 * EB,
        0,
        3 * EB,
        3 * EB,
        4 * EB,
        10 * EB,
        0,
    ]
    assert deps_of(plan) == [
        [],
        [],
        [0, 1],
        [2],
        [0, 1],
        [4],
        [3, 5],
        [3, 4],
        [3, 4],
        [3, 4],
        [7, 8, 9],
        [6, 10],
    ]


@pytest.mark.parametrize("kwargs", [{"steps": 0}, {"layers": 0}, {"entries": 0}, {"ssds": ()}])
def test_build_plan_rejects_empty_shapes(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="positive"):
        build_plan(make_shape(**kwargs))


def test_build_plan_rejects_counts_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"\(6, 3\)"):
        build_plan(make_shape(), np.ones((6, 2), dtype=np.int64))


@pytest.fixture(scope="module")
def profile():
    return load_profile("h20-8ssd")


@pytest.fixture(scope="module")
def workload():
    return dataclasses.replace(load_scenario("tiers").workload, steps=2)


def test_plan_for_reads_the_working_set_every_step(profile, workload) -> None:
    plan, shape = plan_for(workload, profile, seed=0)
    card = get_model(workload.model)
    layers = workload.layers or card.layers
    per_step = (
        round(workload.context_tokens * workload.sparsity)
        * workload.batch
        * layers
        * card.kv_bytes_per_token_layer
    )
    assert shape.ssds == profile.ssd_names and len(shape.ssds) == 8
    assert shape.layers == layers
    assert plan.num_rows == workload.steps * layers * (8 + 2)
    validate_plan(plan, profile.node_names, profile.ssd_names, profile.gpu_names)
    df = plan.select(["step", "kind", "bytes"]).to_pandas()
    by_step = df[df["kind"] == "read"].groupby("step")["bytes"].sum()
    assert by_step.tolist() == [per_step] * workload.steps
    copies = df[df["kind"] == "copy"].groupby("step")["bytes"].sum()
    assert copies.tolist() == [per_step] * workload.steps


def test_plan_for_is_reproducible_per_seed(profile, workload) -> None:
    a, _ = plan_for(workload, profile, seed=3)
    b, _ = plan_for(workload, profile, seed=3)
    c, _ = plan_for(workload, profile, seed=4)
    assert a.equals(b)
    assert not a.column("bytes").equals(c.column("bytes"))


def test_plan_for_uses_the_first_n_ssds_and_gds(profile, workload) -> None:
    plan, shape = plan_for(dataclasses.replace(workload, ssds=2, gds=True, layers=4), profile, 0)
    assert shape.ssds == profile.ssd_names[:2]
    assert plan.num_rows == 2 * 4 * (2 + 1)
    reads = plan.filter(pc.equal(plan.column("kind"), "read")).to_pydict()
    assert set(reads["src"]) == set(profile.ssd_names[:2])
    assert set(reads["dst"]) == {profile.gpu_names[0]}
    assert set(reads["io_path"]) == {"gds"}


def test_plan_for_rejects_more_ssds_than_the_profile_has(profile, workload) -> None:
    with pytest.raises(ValueError) as exc:
        plan_for(dataclasses.replace(workload, ssds=9), profile, 0)
    msg = str(exc.value)
    assert "\n" not in msg and "ssds" in msg and "9" in msg and "8" in msg


def test_plan_for_rejects_gds_without_gpudirect(profile, workload) -> None:
    no_gds = dataclasses.replace(
        profile, software=dataclasses.replace(profile.software, gpudirect=False)
    )
    plan_for(workload, no_gds, 0)  # the bounce path still works
    with pytest.raises(ValueError) as exc:
        plan_for(dataclasses.replace(workload, gds=True), no_gds, 0)
    msg = str(exc.value)
    assert "\n" not in msg and "gds" in msg and profile.name in msg


@pytest.mark.parametrize("tier, src", [("dram", "dram0"), ("peer", "gpu1")])
def test_dram_and_peer_tiers_fetch_one_copy_per_layer(tier: str, src: str) -> None:
    shape = dataclasses.replace(make_shape(), tier=tier, ssds=(), peer="gpu1")
    plan = build_plan(shape)
    assert plan.num_rows == 2 * 3 * 2  # steps x layers x (copy, compute)
    kind = plan.column("kind").to_pylist()
    assert kind == ["copy", "compute"] * 6
    assert set(plan.column("src").to_pylist()[0::2]) == {src}
    assert set(plan.column("bytes").to_pylist()[0::2]) == {10 * EB}
    deps = deps_of(plan)
    # copy of group g after the copy of g-1 and the compute of g-2
    assert deps[4] == [1, 2]
    # compute of g after its copy and the previous compute
    assert deps[5] == [3, 4]
    validate_plan(plan, {"dram0", "gpu0", "gpu1", "rc0"}, set(), {"gpu0", "gpu1"})


def test_plan_for_peer_tier_needs_two_gpus(profile, workload) -> None:
    plan, shape = plan_for(dataclasses.replace(workload, tier="peer", layers=2), profile, 0)
    assert shape.peer == "gpu1" and shape.ssds == ()
    one_gpu = dataclasses.replace(profile, gpu=dataclasses.replace(profile.gpu, count=1))
    with pytest.raises(ValueError, match="no peer GPU"):
        plan_for(dataclasses.replace(workload, tier="peer"), one_gpu, 0)


def test_fetch_time_follows_the_tier_bandwidth(profile, workload) -> None:
    # one layer, one step: the fetch of S bytes takes S / (narrowest link)
    from sim.executor import simulate

    small = dataclasses.replace(workload, steps=1, layers=1)
    card = get_model(small.model)
    nbytes = round(small.context_tokens * small.sparsity) * small.batch
    nbytes *= card.kv_bytes_per_token_layer
    eff = profile.efficiency  # achievable: datasheet x the link kind's factor
    for tier, gbps in (
        ("dram", 63.0 * eff.pcie),
        ("peer", 450.0 * eff.nvlink),
    ):  # PCIe 5.0 x16, H20 NVLink
        plan, _ = plan_for(dataclasses.replace(small, tier=tier), profile, 0)
        ops = simulate(plan, profile).ops.to_pandas()
        fetch = ops[ops["tag"] == "kv_fetch"].iloc[0]
        assert fetch["end_s"] - fetch["start_s"] == pytest.approx(nbytes / (gbps * 1e9))

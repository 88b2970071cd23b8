"""The sensitivity report on a toy scenario whose flip point is worked out by hand.

The toy machine (``tiny_profile``, tests/sim/conftest.py) with every efficiency
factor 1 except NVLink's: two designs decode from the same sparse working set,
one from host memory (``tier: dram``: dram0.bus 50 GB/s, then gpu0.pcie 25 GB/s,
so 25 GB/s), one from the peer GPU (``tier: peer``: gpu1.nvlink and gpu0.nvlink,
200 GB/s x ``efficiency.nvlink`` each; gpu1.pcie is narrowed to 5 GB/s here, so
the copy's other route, over PCIe through rc0, is never the wider one).  Both
compute the same layers the same way and fetch-bound (a fetch of 3,277 entries
x 4 KiB = 13.4 MB per layer takes 0.54 ms at 25 GB/s, the layer's compute ~0.1
ms), so their step times are equal
where the two bandwidths are: 200 x e = 25, e = 0.125.  At the toy's e = 0.14 the
peer design fetches at 28 GB/s and wins; its ratio to the host design is at most
28 / 25 = 1.12 (the equal compute dilutes it) and above 1.  A range [0.10, 0.20]
crosses 0.125: at 0.10 the peer fetches at 20 GB/s and loses, so the ranking
flips at the low end.  A range [0.13, 0.15] stays above it (26-30 GB/s): the
ranking holds, and the ratio, between 26/25 and 30/25 at most, moves by less
than 25% from the base run's.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from hwprofiles import Assumption
from sim.config import ConfigError, load_scenario
from sim.parallel import LocalExecutor, make_executor
from sim.sensitivity import (
    BASE,
    Knob,
    ahead,
    changes,
    design_figures,
    knobs,
    ranking,
    sensitivity,
    tornado,
    workload_groups,
)


@pytest.fixture
def toy(sparse_toy):
    return sparse_toy(
        "toy",
        "host memory vs peer GPU",
        [{"name": "host", "tier": "dram"}, {"name": "peer", "tier": "peer"}],
        tier="dram",
    )


def _profile(make_profile, low: float, high: float):
    p = make_profile()
    links = tuple(
        dataclasses.replace(link, gbps=5.0) if link.name == "gpu1.pcie" else link
        for link in p.topology.links
    )
    p = dataclasses.replace(
        p,
        efficiency=dataclasses.replace(p.efficiency, nvlink=0.14),
        topology=dataclasses.replace(p.topology, links=links),
    )
    return dataclasses.replace(p, assumptions=(Assumption("efficiency.nvlink", low, high, "toy"),))


def test_a_range_across_the_flip_point_flips(toy, make_profile) -> None:
    s = sensitivity(toy, _profile(make_profile, 0.10, 0.20), LocalExecutor(1))
    assert s.headline == "tokens_per_s" and s.higher
    (row,) = s.table.to_dict("records")
    assert (row["top"], row["second"]) == ("peer", "host")
    assert 1 < row["ratio_base"] <= 28 / 25
    assert row["ratio_low"] < 1 < row["ratio_high"]  # below e = 0.125 the host design wins
    assert row["verdict"] == "flips" and row["flips_at"] == "low"
    assert row["swap"] == "low: host ahead of peer"
    # the host design reads no NVLink: its figure is the same at every end
    assert row["host @low"] == row["host @base"] == row["host @high"]
    assert row["peer @low"] < row["peer @base"] < row["peer @high"]


def test_a_range_on_one_side_holds(toy, make_profile) -> None:
    s = sensitivity(toy, _profile(make_profile, 0.13, 0.15), LocalExecutor(1))
    (row,) = s.table.to_dict("records")
    assert row["verdict"] == "holds" and not row["flips"] and not row["moves"]
    assert 1 < row["ratio_low"] < row["ratio_base"] < row["ratio_high"] <= 30 / 25
    assert row["effect"] == pytest.approx(
        max(abs(math.log(row[f"ratio_{e}"] / row["ratio_base"])) for e in ("low", "high"))
    )


def test_no_assumptions_is_a_config_error(toy, make_profile) -> None:
    with pytest.raises(ConfigError, match="names no assumptions"):
        knobs(toy, make_profile())
    with pytest.raises(ConfigError, match="no assumption 'efficiency.tensor'"):
        knobs(toy, _profile(make_profile, 0.1, 0.2), only=["efficiency.tensor"])


def test_design_figures_fold_points_by_geometric_mean() -> None:
    rows = pd.DataFrame(
        {"variant": ["a | 1K", "a | 4K", "b | 1K", "b | 4K"], "t": [1.0, 4.0, 2.0, 2.0]}
    )
    figs = design_figures(rows, "t")
    assert figs == {"a": 2.0, "b": 2.0}  # sqrt(1 x 4) = 2 = sqrt(2 x 2)
    assert ranking(figs, higher=False) == ("a", "b")  # a tie: by name
    assert ahead(figs, "a", "b", higher=False) == "="
    assert ranking({"a": 1.0, "b": math.nan}, higher=True) == ("a", "b")
    assert ahead({"a": 1.0, "b": math.nan}, "a", "b", higher=True) is None
    # 1 + 1e-7 and 1: within TIE_REL (1e-6) of each other, tied; 1.00001 is 1e-5 ahead
    assert ahead({"b": 1.0 + 1e-7, "a": 1.0}, "b", "a", higher=True) == "="
    assert ranking({"b": 1.00001, "a": 1.0}, higher=True) == ("b", "a")
    assert ahead({"b": 1.00001, "a": 1.0}, "b", "a", higher=False) == "<"  # a time: a ahead
    base = {"a": 3.0, "b": 2.0, "c": 1.0}
    assert changes(("a", "b", "c"), base, {"a": 3.0, "b": 1.0, "c": 2.0}, True) == (
        "c ahead of b",
        "",
    )
    # every pair reversed: the best-ranked pair is named
    assert changes(("a", "b", "c"), base, {"a": 1.0, "b": 2.0, "c": 3.0}, True)[0] == (
        "b ahead of a"
    )
    assert changes(("a", "b", "c"), base, base, True) == ("", "")


def _toy(at_figs: dict[str, dict[str, float]]) -> dict:
    """The one row of :func:`tornado` for assumption x with these designs' tokens/s."""
    rows = []
    for at, figs in at_figs.items():
        name = BASE if at == "base" else "x"
        rows += [{"assumption": name, "at": at, "variant": d, "t": f} for d, f in figs.items()]
    (row,) = tornado(pd.DataFrame(rows), [Knob("x", 1.0, 0.5, 2.0, "toy")], "t", True).to_dict(
        "records"
    )
    return row


def test_a_tie_at_an_end_is_tied_not_a_flip() -> None:
    """a 1e-7 behind b at the low end (0.1 ppm: within TIE_REL = 1e-6), b 10% ahead as
    given: the two tie at low, and go from ordered to tied, which is no flip; at the
    high end a leads by 10%, 1.1 / 1.0: a genuine swap, a flip."""
    row = _toy({
        "base": {"a": 1.0, "b": 1.1},
        "low": {"a": 1.0, "b": 1.0 + 1e-7},
        "high": {"a": 1.1, "b": 1.0},
    })  # fmt: skip
    assert (row["top"], row["second"]) == ("b", "a")
    assert row["verdict"] == "flips" and row["flips_at"] == "high"
    assert row["swap"] == "high: a ahead of b"
    assert row["tied_at"] == "low" and row["tied"] == "low: b = a (tied; b ahead as given)"
    assert row["no_figure"] == ""
    # two designs 1e-7 apart as given that swap at an end: tied both times, no change at all
    row = _toy({
        "base": {"a": 1.0 + 1e-7, "b": 1.0},
        "low": {"a": 1.0, "b": 1.0 + 1e-7},
        "high": {"a": 1.0 + 1e-7, "b": 1.0},
    })  # fmt: skip
    assert row["verdict"] == "holds" and not row["flips"] and row["tied"] == ""


def test_a_design_with_no_figure_is_not_ranked() -> None:
    """At the low end a has no figure (NaN; the pair ranked by name would put a last,
    behind b, a swap) and at the high end c's point ran out of host memory: neither
    is a flip, and both are reported with their reason; at the base b trails a by 10%."""
    rows = []
    for at, figs in (
        ("base", {"a": 1.1, "b": 1.0, "c": 0.5}),
        ("low", {"a": math.nan, "b": 1.0, "c": 0.5}),
        ("high", {"a": 1.1, "b": 1.0, "c": math.nan}),
    ):
        name = BASE if at == "base" else "x"
        rows += [
            {"assumption": name, "at": at, "variant": d, "t": f,
             "oom": at == "high" and d == "c", "oom_where": "host" if at == "high" else ""}
            for d, f in figs.items()
        ]  # fmt: skip
    (row,) = tornado(pd.DataFrame(rows), [Knob("x", 1.0, 0.5, 2.0, "toy")], "t", True).to_dict(
        "records"
    )
    assert row["verdict"] == "holds" and not row["flips"] and row["swap"] == ""
    assert row["no_figure_at"] == "low+high"
    assert row["no_figure"] == "low: a (no t); high: c (out of host memory)"
    assert math.isnan(row["a @low"]) and row["ratio_high"] == pytest.approx(1.1)


def test_the_pool_and_ray_give_the_same_report(toy, make_profile) -> None:
    profile = _profile(make_profile, 0.10, 0.20)
    one = sensitivity(toy, profile, LocalExecutor(1))
    pool = sensitivity(toy, profile, LocalExecutor(2))
    pd.testing.assert_frame_equal(one.table, pool.table)
    pd.testing.assert_frame_equal(one.runs, pool.runs)
    assert set(one.runs["assumption"]) == {BASE, "efficiency.nvlink"}
    ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
    try:
        on_ray = sensitivity(toy, profile, make_executor("ray", jobs=2))
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(one.table, on_ray.table)


def test_designs_rank_only_against_those_run_on_the_same_workload() -> None:
    """paged-ssd's multi-turn variants (sessions, turns, session_rate, think_s
    overridden) ran another workload than its single-turn ones; kvdrive's variants
    with their own points (120K x 4 only; 360K x 2 with a 64 GB host) ran other
    workloads than those at the scenario's eight points."""
    groups = workload_groups(load_scenario("paged-ssd"))
    assert [len(g) for g in groups] == [6, 2]
    assert set(groups[1]) == {"multi-turn: GPU only", "multi-turn: +CPU (minimal) +SSD"}
    kvd = [set(g) for g in workload_groups(load_scenario("kvdrive"))]
    eight = kvd[0]  # the first design's group first: the scenario's eight points, the headline
    assert "KVDrive (SFC)" in eight and len(kvd[1]) > len(eight)  # not merely the largest
    assert {"ShadowKV", "KVDrive (calibrated)"} < eight and "Quest" not in eight
    assert {"KVDrive (64 GB host)", "ShadowKV (64 GB host)"} < next(  # 360K x 2, 64 GB host
        g for g in kvd if "ShadowKV (64 GB host)" in g
    )
    assert {"KVDrive (SFC, 100e9 B host)", "ShadowKV (100e9 B host)"} < next(
        g for g in kvd if "ShadowKV (100e9 B host)" in g
    )
    # 360K x 2 on the whole host, no SSD: ranked only against each other
    assert {"KVDrive (DRAM only)", "KVDrive (SFC+prefetch, DRAM only)"} in kvd
    # a design's points are one workload set: every design of default runs one workload
    assert workload_groups(load_scenario("default")) == [
        ("Swarm", "No Cluster (scoring included)", "No Cluster (paper: scoring excluded)", "InfLLM")
    ]


def test_a_flip_within_a_smaller_workload_group_is_a_flip() -> None:
    """Single-turn a (4 tokens/s) ahead of b (2); multi-turn m1 (10) ahead of m2 (9),
    and at the low end m2 (11) ahead of m1.  Ranked together, m1 and m2 would be
    the top two and a, b never compared with them is what the groups prevent."""
    ks = [Knob("x", 1.0, 0.5, 2.0, "toy")]
    rows = []
    for at, figs in (
        ("base", {"a": 4.0, "b": 2.0, "m1": 10.0, "m2": 9.0}),
        ("low", {"a": 4.0, "b": 2.0, "m1": 10.0, "m2": 11.0}),
        ("high", {"a": 4.0, "b": 3.0, "m1": 10.0, "m2": 9.0}),
    ):
        name = BASE if at == "base" else "x"
        rows += [{"assumption": name, "at": at, "variant": d, "t": f} for d, f in figs.items()]
    runs = pd.DataFrame(rows)
    (row,) = tornado(runs, ks, "t", True, [("a", "b"), ("m1", "m2")]).to_dict("records")
    assert (row["top"], row["second"]) == ("a", "b")
    assert [row[f"ratio_{e}"] for e in ("low", "base", "high")] == pytest.approx([2, 2, 4 / 3])
    assert row["verdict"] == "flips" and row["swap"] == "low: m2 ahead of m1"
    (mixed,) = tornado(runs, ks, "t", True).to_dict("records")  # one group: all four
    assert (mixed["top"], mixed["second"]) == ("m1", "m2")
    with pytest.raises(ConfigError, match="no two designs of the scenario ran the same workload"):
        tornado(runs, ks, "t", True, [("a",), ("m1",)])

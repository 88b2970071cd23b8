"""Every design of the Swarm comparison held to the same read, DRAM and
GPU budgets, each counted from what the design holds or moves, not from the
budget variable.

* reads: the entries a step selects (what is fetched or found in DRAM) equal
  the oracle's count, :meth:`Layout.step_budget`;
* DRAM: index keys (and Swarm's route records) plus the entries of the units
  in the cache, counted from the design's own structures, never exceed
  ``Layout.dram_bytes``; the cache's room is the rest, to one entry;
* GPU: the DRAM -> GPU copies of the plan move the same bytes per step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.policies import Layout
from sim.policies.cache import LRUCache, ScoreCache
from sim.policies.swarm.design import ROUTE_BYTES
from sim.scenarios.swarm import build_lane, layout_for, plan_swarm


def test_cache_room_is_what_the_index_leaves_by_hand():
    lay = Layout(2, 1000, 500, 10, 4, 2, 7, 80.0, 0.15, dram_bytes=10_000)
    assert lay.cache_entries(3_500) == 6  # 6,500 bytes left: 6 whole entries
    assert lay.cache_entries(10_000) == 0
    assert lay.cache_entries(12_000) == 0  # an index over budget leaves no cache
    assert dataclasses.replace(lay, dram_bytes=0).cache_entries(3_500) == 7  # the old rule


def test_lru_shrinks_oldest_first_by_hand():
    c = LRUCache(9, [3, 4, 2])
    c.touch([0, 1, 2])
    assert c.used == 9
    c.set_capacity(5)  # 0 (3) then 1 (4) leave: 2 (2) stays
    assert c.cached() == [2] and c.used == 2


def test_score_cache_shrinks_lowest_score_first_by_hand():
    # score = freq x latency / (size x entry_us): unit 0: 4/2, unit 1: 3/1, unit 2: 1/1
    c = ScoreCache(4, [2, 1, 1], [4.0, 3.0, 1.0], 1.0, 1.0)
    c.fill([0, 1, 2])
    assert c.cached() == [0, 1, 2] and c.used == 4
    c.set_capacity(3)  # the lowest score (unit 2, 1.0) leaves first
    assert c.cached() == [0, 1] and c.used == 3
    c.set_capacity(1)  # then unit 0 (2.0)
    assert c.cached() == [1] and c.used == 1


def _held(design, lay: Layout) -> tuple[int, int, int]:
    """(index bytes, cached bytes, has a cache) from the design's own structures."""
    name = type(design).__name__
    if name == "NoCluster":
        return 0, 0, 0  # no index, no cache: scores every key it loads
    if name == "SwarmDesign":
        members = design.clustering.members
        medoids = np.array([m[0] for m in members])  # a cluster's first member is its medoid
        replicas = design.placement.replication()[medoids]
        index = len(members) * lay.key_bytes + ROUTE_BYTES * int(replicas.sum())
    elif name == "InfLLM":
        members = design.members
        index = design.rep_keys.n * lay.key_bytes
    else:  # PQCache
        members = design.members
        index = len(design.centroids) * lay.key_bytes
    cached = sum(len(members[u]) for u in design.cache.cached()) * lay.entry_bytes
    return index, cached, 1


@pytest.fixture(scope="module")
def small():
    """default.yaml's workload (dram_budget 0.2) at a 4K prefix, one sequence, 4 steps;
    default's variants and default-matched's PQCache ones."""
    cfg = load_scenario("default")
    base = dataclasses.replace(
        cfg.workload, context_tokens=4096, profile_steps=64, steps=4, batch=1, layers=2
    )
    more = [v for v in load_scenario("default-matched").variants if "PQCache" in v.name]
    return base, cfg.variants + tuple(more)


def test_every_design_holds_the_same_read_and_dram_budget(small):
    base, variants = small
    h20 = load_profile("h20-8ssd")
    prefix = base.context_tokens + base.profile_steps
    assert base.dram_budget > 0
    for v in variants:
        p = dataclasses.replace(base, **{k: x for k, x in v.overrides if k != "match_recall"})
        lay = layout_for(p, h20, len(h20.ssd_names), prefix)
        assert lay.dram_bytes == int(0.2 * prefix * lay.entry_bytes)
        built = build_lane(p, lay, seed=5)
        design, data = built.design, built.data
        for t in range(p.steps):
            dec = design.step(t, data.queries[p.profile_steps + t], data.keys[prefix + t])
            assert len(dec.selected) == lay.step_budget(prefix + t + 1), (v.name, t)
            index, cached, unit = _held(design, lay)
            assert index + cached <= lay.dram_bytes, (v.name, t)
            if unit:  # a design with a cache may spend the rest: its room, to one entry
                room = design.cache.capacity * lay.entry_bytes
                assert lay.dram_bytes - lay.entry_bytes < index + room <= lay.dram_bytes


def test_every_design_copies_the_same_bytes_to_the_gpu(small):
    base, variants = small
    h20 = load_profile("h20-8ssd")
    per_step = {}
    for v in variants[:4]:  # default's designs (PQCache's k-means: the test above)
        p = dataclasses.replace(base, **{k: x for k, x in v.overrides if k != "match_recall"})
        plan = plan_swarm(p, h20, seed=5).plan.to_pandas()
        h2d = plan[plan["tag"] == "h2d"]
        per_step[v.name] = h2d.groupby("step")["bytes"].sum().tolist()
    prefix = base.context_tokens + base.profile_steps
    entry = layout_for(base, h20, 8, prefix).entry_bytes
    want = [2 * round(0.1 * (prefix + t)) * entry for t in range(base.steps)]  # 2 layers
    assert all(got == want for got in per_step.values()), per_step


def test_a_budget_beside_a_cache_fraction_is_one_clean_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ndescription: d\nseed: 0\nworkload:\n  kind: swarm\n  dram_budget: 0.2\n"
    )
    with pytest.raises(ConfigError) as exc:  # dram_cache keeps its default, 0.05
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{path}:") and "dram_cache" in msg, msg

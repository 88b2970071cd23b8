"""Swarm's ablations (``swarm-ablations.yaml``, seed 000 §8.3) held to one DRAM and
one GPU budget, counted from each run, beyond the reads that
``tests/sim/test_budget.py`` holds them to.

* DRAM: index keys, route records and the entries of the clusters in the score
  (or LRU) cache, counted after every step from the design's own structures
  (:func:`tests.sim.test_dram_budget._held`), never above ``Layout.dram_bytes``,
  the same for every variant; a variant's cache may spend what its index leaves;
* GPU: the DRAM -> GPU copies of each variant's plan move the same bytes every
  step, the step's budget of whole entries (no ablation keeps a GPU cache).
"""

from __future__ import annotations

import dataclasses

import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.swarm import build_lane, layout_for, plan_swarm
from tests.sim.test_dram_budget import _held

# swarm-ablations.yaml's workload (Qwen3-32B, 10% sparsity, dram_budget 0.2) at a 4K
# prefix, one sequence, 4 steps, 2 timed layers
PREFIX = 4096 + 64


@pytest.fixture(scope="module")
def ablations():
    cfg = load_scenario("swarm-ablations")
    base = dataclasses.replace(
        cfg.workload, context_tokens=4096, profile_steps=64, steps=4, batch=1, layers=2
    )
    return base, cfg.variants


def test_every_ablation_holds_index_and_cache_under_one_dram_budget(ablations):
    base, variants = ablations
    h20 = load_profile("h20-8ssd")
    budgets, designs = set(), set()
    for v in variants:
        p = dataclasses.replace(base, **dict(v.overrides))
        designs.add(p.design)
        lay = layout_for(p, h20, len(h20.ssd_names), PREFIX)
        # 0.2 x 4,160 entries x Qwen3-32B's 8 KV heads x 128 x 2 (K, V) x 2 B = 4,096 B
        assert lay.entry_bytes == 4096
        assert lay.dram_bytes == int(0.2 * PREFIX * 4096) == 3_407_872
        budgets.add(lay.dram_bytes)
        built = build_lane(p, lay, seed=5)
        design, data = built.design, built.data
        for t in range(p.steps):
            design.step(t, data.queries[p.profile_steps + t], data.keys[PREFIX + t])
            index, cached, _ = _held(design, lay)
            assert index > 0, v.name  # every ablation keeps its cluster keys in DRAM
            assert index + cached <= lay.dram_bytes, (v.name, t, index, cached)
            room = design.cache.capacity * lay.entry_bytes  # what the index leaves, to an entry
            assert lay.dram_bytes - lay.entry_bytes < index + room <= lay.dram_bytes, v.name
    assert budgets == {3_407_872}
    assert len(designs) == len(variants) == 10  # Swarm, eight ablations, the control


def test_every_ablation_copies_the_same_bytes_to_the_gpu(ablations):
    # every selected entry goes DRAM -> GPU (no ablation keeps a GPU cache):
    # 2 layers x round(0.1 x (4,160 + t + 1)) entries x 4,096 B at step t
    base, variants = ablations
    h20 = load_profile("h20-8ssd")
    want = [2 * round(0.1 * (PREFIX + t + 1)) * 4096 for t in range(base.steps)]
    assert want == [2 * 416 * 4096] * 4 == [3_407_872] * 4
    for v in variants:
        p = dataclasses.replace(base, **dict(v.overrides))
        plan = plan_swarm(p, h20, seed=5).plan.to_pandas()
        h2d = plan[plan["tag"] == "h2d"].groupby("step")["bytes"].sum().tolist()
        assert h2d == want, (v.name, h2d)
        assert set(plan.loc[plan["tag"] == "h2d", "dst"]) == {"gpu0"}, v.name

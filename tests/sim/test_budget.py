"""Issue 12 point 1: one selection budget, spent the same way by every design.

The budget (:meth:`Layout.step_budget`) counts the sinks and the local window,
as the oracle does; designs that select whole units (clusters, blocks) cut the
last unit at the budget, so no design ever exceeds it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.policies import Layout
from sim.policies.selection import always_selected, take_units, top_entries
from sim.scenarios.swarm import layout_for, run_lane

SINKS, WINDOW, BUDGET, VISIBLE = 4, 8, 20, 100


def test_hand_case_sinks_4_window_8_budget_20_takes_8_by_score():
    always = always_selected(VISIBLE, SINKS, WINDOW)
    assert always.tolist() == [0, 1, 2, 3, *range(92, 100)]  # 12 always selected
    # u0 (score 5): 10..14 -> 5 entries; u2 (score 4): sink 2 is already in, then
    # 30..34, of which only 30, 31, 32 fit (12 + 5 + 3 = 20): the cut; u1 (score 3) never
    members = [
        np.arange(10, 15),
        np.array([20, 21, 95, 22, 23]),
        np.array([2, 30, 31, 32, 33, 34]),
    ]
    chosen, extra = take_units(np.array([5.0, 3.0, 4.0]), members, BUDGET, always, VISIBLE)
    assert chosen.tolist() == [0, 2]
    assert extra.tolist() == [10, 11, 12, 13, 14, 30, 31, 32]
    assert len(np.union1d(always, extra)) == BUDGET
    # entries by score: the 8 highest not already selected, whatever the window holds
    scores = np.zeros(VISIBLE)
    scores[[5, 50, 93, 60, 61, 62, 63, 64, 65, 66, 1]] = [9, 8, 99, 7, 6, 5, 4, 3, 2, 1, 99]
    assert top_entries(scores, BUDGET, always).tolist() == [5, 50, 60, 61, 62, 63, 64, 65]


def test_take_units_never_exceeds_the_budget_and_fills_it_when_it_can():
    rng = np.random.default_rng(3)
    always = always_selected(VISIBLE, SINKS, WINDOW)
    for _ in range(50):
        members = [rng.choice(VISIBLE, size=rng.integers(1, 30), replace=False) for _ in range(12)]
        budget = int(rng.integers(0, 60))
        chosen, extra = take_units(rng.normal(size=12), members, budget, always, VISIBLE)
        covered = np.union1d(always, np.concatenate(members))
        selected = np.union1d(always, extra)
        assert len(selected) == len(always) + len(extra)  # extra never repeats always
        assert len(selected) == max(len(always), min(budget, len(covered)))
        taken = [members[c].tolist() for c in chosen]
        assert set(extra.tolist()) <= set().union(*taken)


def test_step_budget_is_the_oracles_count():
    lay = Layout(2, 1024, 512, 845, 256, 4, 0, 80.0, 0.15, sparsity=0.1)
    # traces.access.selection_budget at step t of an N-entry context: round(0.1 (N + t));
    # visible = N + t + 1
    assert lay.step_budget(8448 + 1) == 845 and lay.step_budget(8448 + 15 + 1) == 846
    assert dataclasses.replace(lay, sparsity=0.0).step_budget(8449) == 845
    assert dataclasses.replace(lay, sparsity=0.0).step_budget(100) == 100  # never > visible


@pytest.fixture(scope="module")
def small_default():
    """default-matched.yaml's workload, its variants and swarm-ablations.yaml's, at a 4K prefix
    (its 10% budget, 416, leaves room beyond the 260 sinks and window), one sequence,
    4 steps."""
    cfg = load_scenario("default-matched")
    base = dataclasses.replace(
        cfg.workload, context_tokens=4096, profile_steps=64, steps=4, batch=1
    )
    return base, cfg.variants + load_scenario("swarm-ablations").variants


def test_every_default_design_selects_exactly_the_oracles_budget(small_default):
    base, variants = small_default
    h20 = load_profile("h20-8ssd")
    prefix = base.context_tokens + base.profile_steps
    designs = set()
    for v in variants:
        p = dataclasses.replace(base, **dict(v.overrides))
        designs.add(p.design)
        lay = layout_for(p, h20, len(h20.ssd_names), prefix)
        lane = run_lane(p, lay, seed=5)
        for t, (dec, oracle) in enumerate(zip(lane.decisions, lane.oracle, strict=True)):
            budget = lay.step_budget(prefix + t + 1)
            assert budget > base.sink_tokens + base.local_window + 127  # InfLLM's pending too
            assert len(np.unique(dec.selected)) == len(dec.selected), (v.name, t)
            assert len(dec.selected) == budget == len(oracle), (v.name, t)
    assert {"swarm", "nocluster", "infllm", "pqcache"} <= designs


def _take_units_one_by_one(scores, members, budget, always, visible):
    """The rule of sim.policies.selection read literally: units in descending score
    (ties: lower id), each adding its not-yet-selected members in member order, the
    last cut at the budget."""
    k = max(budget - len(always), 0)
    taken = set(always.tolist())
    chosen, added = [], []
    for u in sorted(range(len(scores)), key=lambda u: (-scores[u], u)):
        if len(added) >= k:
            break
        for e in members[u].tolist():
            if len(added) < k and e not in taken:
                taken.add(e)
                added.append(e)
        chosen.append(u)
    return chosen, sorted(added)


def test_take_units_chunked_equals_the_one_by_one_rule():
    rng = np.random.default_rng(7)
    for _ in range(400):
        visible = int(rng.integers(12, 300))
        members = [
            rng.choice(visible, size=int(rng.integers(1, 12)), replace=False)
            for _ in range(int(rng.integers(1, 90)))
        ]
        scores = rng.integers(0, 5, len(members)).astype(float)  # many ties
        always = always_selected(visible, int(rng.integers(0, 4)), int(rng.integers(0, 20)))
        budget = int(rng.integers(0, visible + 5))
        chosen, extra = take_units(scores, members, budget, always, visible)
        ref_chosen, ref_extra = _take_units_one_by_one(scores, members, budget, always, visible)
        assert chosen.tolist() == ref_chosen
        assert extra.tolist() == ref_extra

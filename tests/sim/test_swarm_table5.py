"""Table 5's maintenance rules (seed 000 §8.3) and its distance measure.

Min-Size puts a token leaving the local window in the smallest cluster,
Min-Diff in the cluster whose medoid key is nearest, Swarm (Eq. 9) in the
clusters it was co-active with (sim/policies/swarm/cluster.py); the measure is
the placed members' mean Jaccard distance to their medoid over the offline
members' (sim/scenarios/swarm_report.py).
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hwprofiles import load_profile
from sim.config import ConfigError, load_scenario
from sim.policies.swarm.cluster import (
    maintenance_targets,
    min_diff_target,
    min_size_target,
)
from sim.policies.swarm.design import SwarmDesign, SwarmParams
from sim.scenarios.swarm import build_lane, layout_for
from sim.scenarios.swarm_report import (
    jaccard_pairs,
    maintenance_report,
    offline_distances,
    score_activity,
)
from tests.sim.test_swarm_cluster_online import DIM, QUERY, four_cluster_design


def test_min_size_takes_the_smallest_cluster_ties_to_the_lower_index():
    assert min_size_target(np.array([3, 1, 2, 1])) == 1
    assert min_size_target(np.array([2, 2, 2])) == 0


def test_min_diff_takes_the_nearest_medoid_key_ties_to_the_lower_index():
    medoids = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    # squared distances from (2, 2): 8, 5, 2
    assert min_diff_target(medoids, np.array([2.0, 2.0])) == 2
    # from (0, 5): 25, 10, 17 -> cluster 1
    assert min_diff_target(medoids, np.array([0.0, 5.0])) == 1
    # (0.5, 0.5) is 0.5 from both (0, 0) and (1, 1): the lower index
    assert min_diff_target(medoids, np.array([0.5, 0.5])) == 0


def test_the_rules_dispatch_and_refuse_an_unknown_one():
    co, sizes = Counter({2: 4, 0: 1}), np.array([5, 1, 3])
    keys, key = np.eye(3), np.array([0.0, 0.0, 0.9])
    # Eq. 9: active 4 steps, 4 with c2's medoid (d 0), 1 with c0's (d 3/4 > r)
    assert maintenance_targets("coactivation", co, 4, 0.5, 2, sizes, keys, key) == [2]
    assert maintenance_targets("min-size", co, 4, 0.5, 2, sizes, keys, key) == [1]
    assert maintenance_targets("min-diff", co, 4, 0.5, 2, sizes, keys, key) == [2]
    with pytest.raises(ValueError, match="maintenance rule"):
        maintenance_targets("nearest", co, 4, 0.5, 2, sizes, keys, key)


def test_a_bad_rule_is_one_line_naming_it(tmp_path: Path):
    with pytest.raises(ValueError, match="maintenance_rule must be one of"):
        SwarmParams(maintenance_rule="min_size")
    text = Path("sim/scenarios/swarm-maintenance.yaml").read_text()
    bad = text.replace("maintenance_rule: min-diff", "maintenance_rule: min-dif")
    (tmp_path / "bad.yaml").write_text(bad)
    with pytest.raises(ConfigError, match="maintenance_rule") as err:
        load_scenario(tmp_path / "bad.yaml")
    assert "bad.yaml" in str(err.value) and "\n" not in str(err.value)


# 8 prefix entries in 4 clusters {c, c+4}, medoid c with key 10 e_c; window 2, so the
# token generated at step t leaves at step t + 2 and is placed then
def _design(rule: str) -> SwarmDesign:
    return four_cluster_design(SwarmParams(maintenance_rule=rule))


# new tokens 8, 9, 10: keys 10 (e0 + e1 + e2), 9 e3 and 8 e1
NEW_KEYS = [QUERY, 9.0 * np.eye(DIM)[3], 8.0 * np.eye(DIM)[1]]


@pytest.mark.parametrize(
    ("rule", "placed"),
    [
        # every cluster holds 2: token 8 -> c0 (lowest index); then c0 holds 3, so
        # 9 -> c1; then c0, c1 hold 3, so 10 -> c2
        ("min-size", {8: [0], 9: [1], 10: [2]}),
        # squared distances of 8's key to 10 e_c: 200, 200, 200, 400 -> c0 (tie);
        # 9's (9 e3): 181, 181, 181, 1 -> c3; 10's (8 e1): 164, 4, 164, 164 -> c1
        ("min-diff", {8: [0], 9: [3], 10: [1]}),
    ],
)
def test_each_baseline_places_the_hand_worked_tokens(rule: str, placed: dict):
    d = _design(rule)
    for t in range(5):  # tokens 8, 9, 10 leave at steps 2, 3, 4
        d.step(t, QUERY, NEW_KEYS[t] if t < 3 else NEW_KEYS[2])
    got = {e: [c for c, m in enumerate(d.clustering.members) if e in m] for e in placed}
    assert got == placed
    assert d.totals == {"joins": 3, "new_clusters": 0}  # each joins one, none opens one


def test_swarm_places_the_hand_worked_token_by_coactivation():
    # token 8 scores 300 >= the lowest chosen medoid (c3, 0) at both window steps, as
    # does every medoid: d = 0 to all four; the two nearest (cap 2), ties to lower index
    d = _design("coactivation")
    for t in range(3):
        d.step(t, QUERY, NEW_KEYS[t])
    assert [c for c, m in enumerate(d.clustering.members) if 8 in m] == [0, 1]


def test_jaccard_pairs_by_hand():
    # 4 steps x 3 entries: e0 active at steps 0, 1, 2; e1 at 1, 2; e2 at 3
    act = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool))
    d = jaccard_pairs(act, np.array([1, 2, 1]), np.array([0, 0, 1]))
    # (1, 0): a 2, union 3 -> 1/3; (2, 0): a 0 -> 1; (1, 1): itself -> 0
    np.testing.assert_allclose(d, [1 / 3, 1.0, 0.0])
    members = [np.array([0, 1, 2]), np.array([2])]  # the singleton adds no pair
    np.testing.assert_allclose(offline_distances(members, act), [1 / 3, 1.0])


def test_score_activity_by_hand():
    # prefix 4 entries, window 1, no sinks; keys along one axis with scores q . k
    keys = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [0.5]])
    queries = np.array([[1.0], [1.0]])
    # step 0: visible 0..4, window {4}; the oracle picked 2, 3 on score (+ window 4):
    # threshold 3, so entries 2, 3, 4 are active (4 at 5 >= 3; 5 is not visible yet)
    # step 1: visible 0..5, window {5}; picked 3 on score: threshold 4 -> 3 and 4
    oracle = (np.array([2, 3, 4]), np.array([3, 4, 5]))
    act = score_activity(keys, queries, oracle, np.array([0, 2, 4, 5]), 4, 0, 1)
    assert act.tolist() == [[False, True, True, False], [False, False, True, False]]


@pytest.fixture(scope="module")
def runs():
    """default.yaml's workload at a 2K prefix, one sequence, window 16, 48 steps,
    each rule stepped on the same built lane: (design after, lane data, params)."""
    base = load_scenario("default").workload
    h20 = load_profile("h20-8ssd")
    out = {}
    for rule in ("coactivation", "min-size", "min-diff"):
        p = dataclasses.replace(
            base,
            context_tokens=2048,
            profile_steps=64,
            steps=48,
            batch=1,
            local_window=16,
            design_params={"maintenance_rule": rule},
        )
        prefix = p.context_tokens + p.profile_steps
        lay = layout_for(p, h20, len(h20.ssd_names), prefix)
        built = build_lane(p, lay, seed=5)
        d = copy.deepcopy(built.design)
        sizes = d.clustering.sizes.copy()
        initial = offline_distances(d.clustering.members, built.data.activations)
        for t in range(p.steps):
            d.step(t, built.data.queries[p.profile_steps + t], built.data.keys[prefix + t])
        out[rule] = (d, built.data, p, sizes, initial)
    return out


LEFT = range(2048 + 64, 2048 + 64 + 48 - 16)  # the 32 tokens that left the window


@pytest.mark.parametrize("rule", ["coactivation", "min-size", "min-diff"])
def test_every_entry_is_in_a_cluster_and_each_rule_keeps_its_bound(runs, rule: str):
    d, _, _, before, _ = runs[rule]
    d.clustering.check()  # every entry, prefix and placed, in at least one cluster
    rep = d.clustering.replication()
    placed = rep[list(LEFT)]
    if rule == "coactivation":  # Eq. 9 joins at most max_replicas (2), else opens one
        assert placed.min() >= 1 and placed.max() <= 2
    else:  # exactly one cluster each, no cluster opened
        assert (placed == 1).all() and len(d.clustering.members) == len(before)
    if rule == "min-size":  # water-filling: a cluster that grew was the smallest then
        after = d.clustering.sizes
        grew = after > before
        assert (after - before).sum() == len(LEFT)  # one member a placed token
        assert after[grew].max() <= after.min() + 1


def test_the_distance_ratio_is_the_placed_members_mean_over_the_offline_mean(runs):
    d, data, p, _, initial = runs["min-size"]
    rep = maintenance_report(d, data, p, initial)
    assert rep["maint_members"] == len(LEFT)
    # independently: each placed token's distance over the steps since it was made
    prefix = d.n_prefix
    q = data.queries[p.profile_steps : p.profile_steps + p.steps]
    ds = []
    for x in LEFT:
        (c,) = [c for c, m in enumerate(d.clustering.members) if x in m[1:]]
        m = int(d.clustering.members[c][0])
        act = score_activity(data.keys, q, data.oracle, np.array([m, x]), prefix, 4, 16)
        g = x - prefix
        ax, am = act[g:, 1], act[g:, 0]
        union = (ax | am).sum()
        ds.append(1.0 - (ax & am).sum() / union if union else 1.0)
    assert rep["maint_distance_ratio"] == pytest.approx(np.mean(ds) / initial.mean())
    total = (initial.sum() + np.sum(ds)) / (initial.size + len(ds))
    assert rep["all_distance_ratio"] == pytest.approx(total / initial.mean())
    assert 0.0 < rep["maint_distance_ratio"] <= 1.0 / initial.mean()  # distances <= 1

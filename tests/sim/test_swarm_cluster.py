"""Swarm's clustering (seed 000 §5.1 Algorithm 1, §6.2 Eq. 9): hand cases and properties."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.swarm.bench_cluster import planted_activations
from sim.policies.swarm.cluster import (
    ClusterParams,
    cluster,
    cluster_exact,
    clustering_quality,
    comembership_f1,
    join_targets,
)
from sim.policies.swarm.cooccur import (
    CoactivationIndex,
    choose_radius,
    coactivation,
    jaccard_distance,
    selection_counts,
)
from sim.policies.swarm.types import Clustering


def activations(rows: list[list[int]], n: int) -> sp.csr_matrix:
    """T x n boolean profile: row t selects the ids in ``rows[t]``."""
    X = np.zeros((len(rows), n), dtype=bool)
    for t, ids in enumerate(rows):
        X[t, ids] = True
    return sp.csr_matrix(X)


def both(X: sp.csr_matrix, params: ClusterParams) -> list[list[list[int]]]:
    """Members of the reference and of the scalable clustering (as lists)."""
    out = []
    for c in (cluster_exact(X, params), cluster(X, params)):
        c.check()
        out.append([m.tolist() for m in c.members])
    return out


# -- hand cases ------------------------------------------------------------------------


# groups {0,1,2}, {3,4,5}, {6,7,8}, each selected alone by two of T = 6 queries:
# A = f = 2 within a group (Jaccard d = 1 - 2/2 = 0), 0 across (d = 1); every density is 2
THREE_GROUPS = activations([[0, 1, 2]] * 2 + [[3, 4, 5]] * 2 + [[6, 7, 8]] * 2, 9)


@pytest.mark.parametrize("radius", [0.9, None])
def test_three_groups_give_three_clusters_medoid_first(radius):
    params = ClusterParams(radius=radius, target_size=3)
    for members in both(THREE_GROUPS, params):
        assert members == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert cluster(THREE_GROUPS, params).replication().tolist() == [1] * 9


def test_radius_from_knn_distances():
    # each entry's 2nd-nearest distance is 0 (its group): r is one ulp above 0
    assert choose_radius(THREE_GROUPS, target_size=3) == np.nextafter(0.0, 1.0)
    # 4th-nearest: 1 (other groups) for everyone -> r = 1 (clipped)
    assert choose_radius(THREE_GROUPS, target_size=5) == 1.0
    # T = 4, f = (4, 2, 1+..): kth distances by hand, see below
    X = activations([[0, 1], [0, 1], [0, 2], [0, 2, 3]], 4)
    # f = 4, 2, 2, 1; 3 is thin (f < 2).  d(0,1) = d(0,2) = 1 - 2/4 = 0.5, d(1,2) = 1.
    # nearest-neighbour distances: 0 -> 0.5, 1 -> 0.5, 2 -> 0.5; 2nd: 0 -> 0.5, 1 -> 1, 2 -> 1
    assert choose_radius(X, target_size=2) == np.nextafter(0.5, 1.0)
    assert choose_radius(X, target_size=3, quantile=0.0) == np.nextafter(0.5, 1.0)
    assert choose_radius(X, target_size=3, quantile=1.0) == 1.0
    assert choose_radius(X, target_size=2, min_activations=5) == 1.0  # nobody measurable


def test_jaccard_distance_by_hand():
    # 4 queries: 0 in all, 1 in the first two, 2 in the first only, 3 never
    X = activations([[0, 1, 2], [0, 1], [0], [0]], 4)
    A = coactivation(X).astype(np.int64)
    f = selection_counts(sp.csr_matrix(X))
    assert f.tolist() == [4, 2, 1, 0]
    d = jaccard_distance(A, f[:, None], f[None, :])
    assert d[0, 1] == pytest.approx(1 - 2 / 4)  # |{q0,q1}| / |{q0..q3}|
    assert d[1, 2] == pytest.approx(1 - 1 / 2)
    assert d[0, 2] == pytest.approx(1 - 1 / 4)
    assert d[3, 3] == 1.0 and d[0, 3] == 1.0  # never selected: never near anything
    assert np.diag(d)[:3].tolist() == [0.0, 0.0, 0.0]


def test_popular_entry_is_not_near_a_rare_one():
    # entry 0 is selected by all 10 queries; 1 and 2 together by two of them; 3, 4 by two others
    X = activations([[0, 1, 2]] * 2 + [[0, 3, 4]] * 2 + [[0]] * 6, 5)
    A = coactivation(X).astype(np.int64)
    f = selection_counts(sp.csr_matrix(X))
    d = jaccard_distance(A, f[:, None], f[None, :])
    assert d[0, 1] == pytest.approx(0.8)  # 1 - 2/10: under 1 - A/T it would be 0.8 too...
    assert d[1, 2] == 0.0  # ...but the rare pair is at 0, so the popular entry is farther
    c = cluster_exact(X, ClusterParams(radius=0.5))
    assert [m.tolist() for m in c.members] == [[1, 2], [3, 4], [0]]
    assert [m.tolist() for m in cluster(X, ClusterParams(radius=0.5)).members] == [
        [1, 2], [3, 4], [0]]  # fmt: skip


# bridge 6 is selected with {0,1,2} by two queries and with {3,4,5} by two others (T = 4):
# f = 2 for 0..5, 4 for 6: d = 0 inside a group, 1 - 2/4 = 0.5 between 6 and anyone,
# 1 between the groups.  Densities:
# 6 -> 6 neighbours, everyone else 3.  r = 0.6.
BRIDGE = activations([[0, 1, 2, 6]] * 2 + [[3, 4, 5, 6]] * 2, 7)


def test_bridge_entry_is_replicated():
    # medoid 6 takes 0 (d 0.5), 1, 2 (mean d 0.25) and rejects 3 (mean d (0.5 + 3 * 1) / 4 = 0.875);
    # medoid 3 (lowest id among the uncovered, all of density 3) takes 4, 5 and 6 again
    for members in both(BRIDGE, ClusterParams(radius=0.6)):
        assert members == [[6, 0, 1, 2], [3, 4, 5, 6]]


@pytest.mark.parametrize("params", [ClusterParams(radius=0.6, replicate=False),
                                    ClusterParams(radius=0.6, max_replicas=1)])  # fmt: skip
def test_bridge_entry_without_replicas(params):
    for members in both(BRIDGE, params):
        assert members == [[6, 0, 1, 2], [3, 4, 5]]
    assert cluster(BRIDGE, params).replication().tolist() == [1] * 7


# 0 is selected with {1, 2} twice and with 3 twice (T = 4): f = 4, 2, 2, 2;
# d(0,1) = d(0,2) = d(0,3) = 1 - 2/4 = 0.5, d(1,2) = 0, d(3,1) = d(3,2) = 1.  r = 0.6.
# Densities: 0 -> 3, 1, 2 -> 2, 3 -> 1.
TRIANGLE = activations([[0, 1, 2]] * 2 + [[0, 3]] * 2, 4)


def test_expansion_rejects_what_medoid_only_admits():
    # 2 joins {0, 1} at (0.5 + 0) / 2; 3 is within r of the medoid (0.5) but its
    # Eq. 5 distance to {0, 1, 2} is
    # (0.5 + 1 + 1) / 3 = 0.83 >= r: Swarm rejects it (then it seeds its own
    # cluster and takes 0 as a replica); Medoid Only takes every candidate.
    for members in both(TRIANGLE, ClusterParams(radius=0.6)):
        assert members == [[0, 1, 2], [3, 0]]
    for members in both(TRIANGLE, ClusterParams(radius=0.6, medoid_only=True)):
        assert members == [[0, 1, 2, 3]]


def test_expansion_averages_over_all_members():
    # T = 5, f = 5, 5, 3, 0, 2: d(0,1) = 0, d(0,2) = d(1,2) = 1 - 3/5 = 0.4,
    # d(0,4) = d(1,4) = 1 - 2/5 = 0.6, d(2,4) = 1.  With r = 0.75, 4 joins {0, 1, 2}:
    # (0.6 + 0.6 + 1) / 3 = 0.73 < r, though d(2,4) > r.  3 (never selected) is thin.
    X = activations([[0, 1, 2]] * 3 + [[0, 1, 4]] * 2, 5)
    for members in both(X, ClusterParams(radius=0.75)):
        assert members == [[0, 1, 2, 4], [3]]


def test_max_cluster_caps_each_cluster():
    X = activations([[0, 1, 2, 3, 4, 5]] * 2, 6)  # one group, d = 0 everywhere
    for members in both(X, ClusterParams(radius=0.5, max_cluster=4, max_replicas=None)):
        assert members == [[0, 1, 2, 3], [4, 0, 1, 2], [5, 0, 1, 2]]
    # default cap of 2 copies: 0, 1, 2 are full after medoid 4, so 5 takes 3 and 4
    for members in both(X, ClusterParams(radius=0.5, max_cluster=4)):
        assert members == [[0, 1, 2, 3], [4, 0, 1, 2], [5, 3, 4]]
    for members in both(X, ClusterParams(radius=0.5, max_cluster=4, replicate=False)):
        assert members == [[0, 1, 2, 3], [4, 5]]


def test_entry_never_selected_is_a_singleton():
    X = activations([[0, 1], [0, 1]], 3)
    for members in both(X, ClusterParams(radius=0.5)):
        assert members == [[0, 1], [2]]


def test_dense_reference_refuses_large_layers():
    X = sp.csr_matrix((2, 20_001), dtype=bool)
    with pytest.raises(ValueError, match="20000"):
        cluster_exact(X, ClusterParams(radius=0.5))
    with pytest.raises(ValueError, match="20000"):
        coactivation(X)


@pytest.mark.parametrize(
    "kw", [{"radius": 0.0}, {"radius": 1.5}, {"target_size": 1}, {"max_cluster": 0},
           {"max_replicas": 0}, {"density_probes": 0}, {"radius_quantile": 1.5},
           {"min_activations": 0}],
)  # fmt: skip
def test_params_out_of_range(kw):
    with pytest.raises(ValueError):
        ClusterParams(**kw)


# -- §6.2 maintenance (Eq. 9) ------------------------------------------------------------

TWO = Clustering([np.array([0, 1, 2]), np.array([3, 4, 5])], radius=0.6, n_entries=6)


def _co(window: list[list[int]], entry: int, clustering: Clustering) -> tuple[Counter, int]:
    """Eq. 9's counts from a window: the steps ``entry`` was active, and of them how
    many selected each cluster's medoid."""
    active = [step for step in window if entry in step]
    co: Counter = Counter()
    for step in active:
        co.update(c for c, m in enumerate(clustering.medoids) if m in step)
    return co, len(active)


@pytest.mark.parametrize(
    ("window", "joins"),
    [
        ([[0, 6], [0, 6], [0, 6], [3]], [0]),  # active 3 steps, all with medoid 0: d = 0
        ([[0, 3, 6], [0, 3, 6], [0], [3]], [0, 1]),  # 2 steps, both medoids each: d = 0, 0
        ([[0, 6], [3], [3], [0]], [0]),  # 1 step, with medoid 0: d = 0 (d = 1 to medoid 3)
        ([[0, 6], [6], [6], [3]], []),  # 3 steps, 1 with medoid 0: d = 2/3 >= 0.6
        ([[1, 2, 6]] * 4, []),  # members other than the medoid do not count
    ],
)
def test_new_entry_joins_clusters_of_coactivated_medoids(window, joins):
    """Eq. 9 online: d = 1 - n(e, m_c) / n(e) over the steps e was active (r = 0.6)."""
    co, n = _co(window, 6, TWO)
    assert join_targets(co, n, TWO.radius, None) == joins


def test_new_entry_radius_cap_and_never_active():
    co, n = _co([[0, 6], [0, 6], [6], [3, 6]], 6, TWO)  # d = 1/3 to medoid 0, 2/3 to 3
    assert (co, n) == (Counter({0: 2, 1: 1}), 4)
    assert join_targets(co, n, 0.6, None) == [0]
    assert join_targets(co, n, 0.3, None) == []  # 1/3 is not below 0.3
    assert join_targets(co, n, 0.8, None) == [0, 1]
    assert join_targets(co, n, 0.8, 1) == [0]  # the nearest one
    assert join_targets(Counter(), 0, 0.6, None) == []  # never active: a singleton


# -- quality --------------------------------------------------------------------------


def test_quality_of_three_groups():
    q = clustering_quality(cluster(THREE_GROUPS, ClusterParams(radius=0.9)), THREE_GROUPS)
    assert q["intra_coact"] == pytest.approx(2 / 6)
    # 6 queries of 3 selections: sum_t (k^2 - k) = 36 over N (N - 1) T = 432 pairs x queries
    assert q["random_coact"] == pytest.approx(36 / 432)
    assert q["lift"] == pytest.approx(4.0)
    assert q["medoid_hit"] == pytest.approx(1.0)
    assert (q["clusters"], q["mean_size"], q["mean_replication"], q["coverage"]) == (3, 3, 1, 1)


def test_comembership_f1_by_hand():
    a = Clustering([np.array([0, 1, 2])], 0.5, 3)
    b = Clustering([np.array([0, 1]), np.array([2])], 0.5, 3)
    assert comembership_f1(a, a) == 1.0
    assert comembership_f1(a, b) == pytest.approx(2 * 1 / (3 + 1))  # pairs {01,02,12} vs {01}


# -- properties -------------------------------------------------------------------------


@st.composite
def profiles(draw):
    T = draw(st.integers(1, 24))
    n = draw(st.integers(1, 40))
    p = draw(st.floats(0.05, 0.7))
    seed = draw(st.integers(0, 2**32 - 1))
    X = np.random.default_rng(seed).random((T, n)) < p
    params = ClusterParams(
        radius=draw(st.one_of(st.none(), st.floats(0.05, 1.0))),
        target_size=draw(st.integers(2, 8)),
        replicate=draw(st.booleans()),
        medoid_only=draw(st.booleans()),
        max_cluster=draw(st.integers(1, 12)),
        max_replicas=draw(st.one_of(st.none(), st.integers(1, 3))),
    )
    return sp.csr_matrix(X), params


@settings(max_examples=150, deadline=None)
@given(profiles())
def test_scalable_equals_reference_when_densities_are_exact(case):
    X, params = case
    ref, fast = cluster_exact(X, params), cluster(X, params)
    assert fast.radius == ref.radius
    assert [m.tolist() for m in fast.members] == [m.tolist() for m in ref.members]
    assert [m.tolist() for m in cluster(X, params).members] == [m.tolist() for m in fast.members]


@settings(max_examples=100, deadline=None)
@given(profiles())
def test_invariants_of_the_reference(case):
    X, params = case
    c = cluster_exact(X, params)
    c.check()
    A = coactivation(X).astype(np.int64)
    f = selection_counts(X)
    ok = f >= params.min_activations
    near = (c.radius > jaccard_distance(A, f[:, None], f[None, :])) & ok[:, None] & ok[None, :]
    np.fill_diagonal(near, False)
    rho = near.sum(axis=1)
    lonely = ~ok | (rho == 0)  # grouped by position after Algorithm 1, not by it
    covered = lonely.copy()
    assert (c.sizes <= params.max_cluster).all()
    for mem in c.members[: len(c.members) - _thin_clusters(c, lonely)]:
        m = mem[0]
        assert not covered[m]  # a medoid is taken from the entries in no cluster yet
        assert rho[m] == rho[~covered].max()  # ... with the highest density (Eq. 4)
        assert near[m, mem[1:]].all()  # every member lies within r of its medoid
        covered[mem] = True
    rep = c.replication()
    cap = params.replica_cap
    if cap is not None:
        assert (rep <= cap).all()


def _thin_clusters(c: Clustering, lonely: np.ndarray) -> int:
    """How many clusters are position groups of lonely entries (they come last)."""
    return sum(1 for m in c.members if lonely[m].all())


def test_scalable_long_candidate_queues_match_reference():
    # groups of 300 force several expansion windows (128) and runs (64); max_cluster 40
    # makes the cached heads of candidate queues (160 ids) run out and be redone
    rng = np.random.default_rng(3)
    X = planted_activations(900, 200, 300, rng, group_size=300, member_prob=0.8)
    for max_cluster, max_replicas in ((1000, None), (40, None), (40, 2)):
        params = ClusterParams(radius=0.8, max_cluster=max_cluster, max_replicas=max_replicas)
        ref, fast = cluster_exact(X, params), cluster(X, params)
        assert [m.tolist() for m in fast.members] == [m.tolist() for m in ref.members]


@pytest.mark.parametrize("skew", [0.0, 0.5])
def test_estimated_densities_stay_close_to_reference(skew):
    # 10% of the eligible entries probed: measured F1 ~0.99 on such layers (bench_cluster)
    rng = np.random.default_rng(0)
    X = planted_activations(2048, 256, 205, rng, group_size=16, popularity_skew=skew)
    params = ClusterParams(target_size=16)
    ref = cluster_exact(X, params)
    few = dataclasses.replace(params, radius=ref.radius, density_probes=200)
    index = CoactivationIndex(X, ref.radius, params.min_activations)
    assert len(index.eligible) > 200  # densities really are estimated
    fast = cluster(X, few, np.random.default_rng(1))
    fast.check()
    assert comembership_f1(ref, fast) >= 0.9


def test_densities_exact_for_probes_only():
    X = planted_activations(600, 128, 60, np.random.default_rng(1), group_size=10)
    index = CoactivationIndex(X, choose_radius(X, 10))
    full = index.densities(10**6)
    assert full.exact.all()
    A = coactivation(X).astype(np.int64)
    f = selection_counts(X)
    d = jaccard_distance(A, f[:, None], f[None, :])
    np.fill_diagonal(d, 1.0)
    ok = index.eligible_mask
    rho = ((d < index.radius) & ok[None, :]).sum(axis=1) * ok
    assert full.value.tolist() == rho.tolist()
    some = index.densities(50, np.random.default_rng(0))
    probed = some.exact & index.eligible_mask
    assert probed.sum() == 50
    assert (some.value[probed] == full.value[probed]).all()
    assert (~index.eligible_mask <= some.exact).all()  # ineligible: exactly 0

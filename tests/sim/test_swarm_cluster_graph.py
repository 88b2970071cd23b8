"""The exact r-neighbour graph (:mod:`sim.policies.swarm.cograph`) against brute force."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies.swarm.cluster import ClusterParams, cluster, cluster_exact
from sim.policies.swarm.cograph import _band_ends, neighbour_graph
from sim.policies.swarm.cooccur import (
    CoactivationIndex,
    coactivation,
    jaccard_distance,
    selection_counts,
)


def test_size_band_by_hand():
    # s = 0.5: J <= f_i / f_j, so f_j must stay below 2 f_i: 2 -> {2, 3}, 3 -> {3, 5},
    # 5 and 7 -> to the end
    assert _band_ends(np.array([2.0, 3.0, 5.0, 7.0]), 0.5, 4).tolist() == [2, 3, 4, 4]
    # f_j = 2 f_i exactly (J <= 1/2, never > 1/2) is kept as a candidate (the band is
    # widened against rounding); the exact test rejects it (next test)
    assert _band_ends(np.array([2.0, 4.0]), 0.5, 2).tolist() == [2, 2]
    assert _band_ends(np.array([2.0, 3.0]), 0.0, 2).tolist() == [2, 2]  # r = 1: all


def test_pair_on_the_band_edge_is_not_a_neighbour():
    # f = (2, 4), A = 2: J = 2 / 4 = 1/2, d = 1/2; r = 1/2 excludes it, one ulp more admits it
    X = sp.csr_matrix(np.array([[1, 1], [1, 1], [0, 1], [0, 1]], dtype=bool))
    for r, expect in ((0.5, []), (np.nextafter(0.5, 1.0), [1])):
        index = CoactivationIndex(X, r)
        assert index.build_graph(10**6)
        assert index.neighbours(0).tolist() == expect
    # the band (f = 2, 4 < 2 / (1 - r) = 4.000..., diagonal cells included) holds 3
    # cells, over a cap of 0; one neighbour pair is over a cap of 0 kept: no graph
    # either way (the caller's row path)
    index = CoactivationIndex(X, np.nextafter(0.5, 1.0))
    assert not index.build_graph(0) and index.graph is None
    f = selection_counts(X)
    assert neighbour_graph(index._dense, index.eligible, f, index.radius, 2, 10, 0) is None
    assert neighbour_graph(index._dense, index.eligible, f, index.radius, 2, 10, 1) is not None


@st.composite
def profiles(draw):
    T = draw(st.integers(1, 30))
    n = draw(st.integers(1, 60))
    p = draw(st.floats(0.05, 0.8))
    seed = draw(st.integers(0, 2**32 - 1))
    radius = draw(st.floats(0.02, 1.0))
    X = np.random.default_rng(seed).random((T, n)) < p
    return sp.csr_matrix(X), radius, draw(st.integers(1, 3))


@settings(max_examples=150, deadline=None)
@given(profiles())
def test_graph_rows_are_the_brute_force_queues(case):
    X, r, fmin = case
    A = coactivation(X).astype(np.int64)
    f = selection_counts(X)
    d = jaccard_distance(A, f[:, None], f[None, :])
    ok = f >= fmin
    index = CoactivationIndex(X, r, fmin)
    assert index.build_graph(10**9)
    degree = index.graph_densities().value
    for i in range(X.shape[1]):
        want = np.flatnonzero((d[i] < r) & ok & (np.arange(len(f)) != i)) if ok[i] else []
        want = sorted(want, key=lambda j: (d[i, j], j))  # nearest first, ties: lower id
        assert index.neighbours(i).tolist() == [int(j) for j in want]
        assert degree[i] == len(want)


@settings(max_examples=60, deadline=None)
@given(profiles())
def test_row_path_and_graph_path_both_equal_the_reference(case):
    X, r, fmin = case
    params = ClusterParams(radius=r, min_activations=fmin, target_size=3, max_cluster=8)
    ref = [m.tolist() for m in cluster_exact(X, params).members]
    for pairs in (1, 10**9):  # 1: no band fits, the row-wise path with probes
        p = dataclasses.replace(params, graph_pairs=pairs)
        assert [m.tolist() for m in cluster(X, p).members] == ref


def test_counts_by_hand_across_two_words():
    # 70 queries: the packed vectors take two uint64 words.  Entry 0 is selected by
    # every query (f = 70), entry 1 by queries 60..69 (f = 10, straddling the word
    # boundary at 64), entry 2 by queries 0, 1, 64, 65 (f = 4).
    X = np.zeros((70, 3), dtype=bool)
    X[:, 0] = True
    X[60:70, 1] = True
    X[[0, 1, 64, 65], 2] = True
    index = CoactivationIndex(sp.csr_matrix(X), 0.5)
    got = index.counts(np.array([0, 1]), np.array([1, 2, 0]))
    assert got.tolist() == [[10, 4, 70], [10, 2, 10]]  # A_12 = |{64, 65}| = 2
    assert jaccard_distance(2, 10, 4) == 1.0 - 2.0 / 12.0


@settings(max_examples=60, deadline=None)
@given(profiles())
def test_counts_equal_the_blas_coactivation(case):
    X, r, fmin = case
    index = CoactivationIndex(X, r, fmin)
    el = index.eligible
    assert np.array_equal(index.counts(el, el[::-1]), coactivation(X)[np.ix_(el, el[::-1])])

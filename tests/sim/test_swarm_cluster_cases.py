"""Swarm's Algorithm 1 on co-activation matrices small enough to check by hand.

Distances read as d_ij = 1 - A_ij / T (Eqs. 2-3): with T = 4 observations an
always-together pair has d = 0, a never-together pair d = 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.policies.swarm.cluster import ClusterParams, cluster, cluster_exact


def activations(rows: list[list[int]], n: int) -> np.ndarray:
    x = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        x[i, r] = True
    return x


def sets(clustering) -> list[set[int]]:
    return sorted((set(m.tolist()) for m in clustering.members), key=min)


# three groups, each always co-activated, groups never together
GROUPS = activations([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 2]], 9)


@pytest.mark.parametrize("fn", [cluster_exact, cluster])
def test_three_disjoint_groups_are_three_clusters(fn):
    c = fn(GROUPS, ClusterParams(radius=0.8))  # in-group d = 0.5 or 0.75, across 1
    c.check()
    assert sets(c) == [{0, 1, 2}, {3, 4, 5}, {6, 7, 8}]
    assert (c.replication() == 1).all()
    for m in c.members:  # the medoid is listed first and belongs to its cluster
        assert m[0] in set(m.tolist())


# entry 2 is co-activated with {0, 1} and with {3, 4}; those two never meet
BRIDGE = activations([[0, 1, 2], [0, 1, 2], [2, 3, 4], [2, 3, 4]], 5)


@pytest.mark.parametrize("fn", [cluster_exact, cluster])
def test_bridge_entry_is_replicated_into_both_clusters(fn):
    c = fn(BRIDGE, ClusterParams(radius=0.6))
    c.check()
    holding = [s for s in sets(c) if 2 in s]
    assert len(holding) == 2  # a replica in each cluster
    assert {0, 1} <= holding[0] | holding[1] and {3, 4} <= holding[0] | holding[1]
    assert c.replication()[2] == 2


@pytest.mark.parametrize("fn", [cluster_exact, cluster])
def test_no_replica_puts_every_entry_in_one_cluster(fn):
    c = fn(BRIDGE, ClusterParams(radius=0.6, replicate=False))
    c.check()
    assert (c.replication() == 1).all()


def test_scalable_equals_exact_on_planted_groups():
    rng = np.random.default_rng(0)
    n, groups = 240, [np.arange(g, g + 12) for g in range(0, 240, 12)]
    rows = []
    for _ in range(200):
        active = rng.choice(len(groups), size=3, replace=False)
        noise = rng.choice(n, size=6, replace=False)
        rows.append(
            sorted(set(np.concatenate([groups[a] for a in active]).tolist()) | set(noise.tolist()))
        )
    x = activations(rows, n)
    params = ClusterParams(radius=0.95)
    exact, fast = cluster_exact(x, params), cluster(x, params, np.random.default_rng(1))
    assert sets(exact) == sets(fast)

"""Matched recall replays copies of a built design: a copy must share no mutable state."""

from __future__ import annotations

import copy

import numpy as np

from sim.policies.cache import LRUCache, ScoreCache
from sim.policies.swarm.placement import place
from sim.policies.swarm.types import Clustering


def test_placement_copy_is_independent():
    cl = Clustering([np.array([0, 1, 2]), np.array([3, 1])], 0.5, 4)
    pl = place(cl, 2)
    before = (pl.disk.copy(), pl.slot.copy(), pl.slots_used.copy(), [list(c) for c in pl._crep])
    dup = copy.deepcopy(pl)
    dup.add(4, 0)  # a new token joins cluster 0 in the copy
    dup.new_cluster(5)
    assert pl.n_entries == 4 and pl.n_clusters == 2
    assert np.array_equal(pl.disk, before[0]) and np.array_equal(pl.slot, before[1])
    assert np.array_equal(pl.slots_used, before[2]) and pl._crep == before[3]
    assert dup.n_entries == 6 and dup.slots_used.sum() == pl.slots_used.sum() + 2


def test_clustering_copy_is_independent():
    cl = Clustering([np.array([0, 1]), np.array([2])], 0.5, 3)
    dup = copy.deepcopy(cl)
    dup.members[0][0] = 2
    dup.members.append(np.array([3]))
    assert cl.members[0].tolist() == [0, 1] and len(cl.members) == 2


def test_cache_copies_are_independent():
    score = ScoreCache(4, [2, 2, 2], [3.0, 2.0, 1.0], 80.0, 1.0)
    score.fill(range(3))
    dup = copy.deepcopy(score)
    dup.touch([2, 2])
    dup.resize(0, 1)
    assert score.cached() == [0, 1] and score.used == 4 and score.freq[2] == 1.0
    lru = LRUCache(2, {0: 1, 1: 1, 2: 1})
    lru.touch([0, 1])
    dup_lru = copy.deepcopy(lru)
    dup_lru.touch([2])
    assert lru.cached() == [0, 1] and dup_lru.cached() == [1, 2]

"""Swarm's online joins (§6.2, Eq. 9) are held to the offline replica cap."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

from sim.policies import Layout
from sim.policies.swarm.cluster import join_targets
from sim.policies.swarm.design import SwarmDesign, SwarmParams
from sim.policies.swarm.types import Clustering


def test_join_targets_keep_the_cap_nearest_by_hand():
    # n = 4 active steps; co-active with c0 4x (d 0), c1 and c2 3x (d 1/4), c3 once (3/4)
    co = Counter({3: 1, 2: 3, 1: 3, 0: 4})
    assert join_targets(co, 4, 0.5, None) == [0, 1, 2]  # c3 is outside r
    assert join_targets(co, 4, 0.5, 2) == [0, 1]  # c1 ties c2 at 1/4: lower index
    assert join_targets(co, 4, 0.5, 1) == [0]
    assert join_targets(co, 4, 0.8, 3) == [0, 1, 2]  # c3 (3/4) is in r but 4th nearest
    assert join_targets(co, 4, 0.2, 2) == [0]  # only d = 0 < 0.2
    assert join_targets(Counter(), 0, 0.5, 2) == []  # never active


# 8 prefix entries in 4 clusters {c, c+4}, medoid c with key 10 e_c; a new token
# with key 10 (e0 + e1 + e2) under the query 10 (e0 + e1 + e2) scores 300, above
# every chosen medoid; the budget takes all four clusters, so the lowest chosen
# score is c3's 0 and the token is co-active with all four medoids at both steps
# (d = 0 to each): uncapped it would join all four
DIM = 8
CENT = 10.0 * np.eye(DIM)[:4]
QUERY = CENT[:3].sum(axis=0)


def four_cluster_design(params: SwarmParams) -> SwarmDesign:
    """8 prefix entries in 4 clusters {c, c+4}, medoid c with key 10 e_c, window 2
    (tests/sim/test_swarm_table5.py builds on it too)."""
    lay = Layout(
        n_ssd=2,
        entry_bytes=1024,
        key_bytes=512,
        budget=12,
        local_window=2,
        sink_tokens=2,
        dram_cache_entries=0,
        ssd_latency_us=80.0,
        ssd_entry_us=0.15,
    )
    keys = CENT[np.arange(8) % 4]
    members = [np.array([c, c + 4], dtype=np.int64) for c in range(4)]
    acts = sp.csr_matrix(np.tile(np.eye(4, dtype=bool)[:, np.arange(8) % 4], (2, 1)))
    d = SwarmDesign(params)
    d.build(acts, keys, lay, np.random.default_rng(0), clustering=Clustering(members, 0.5, 8))
    return d


@pytest.mark.parametrize(
    ("params", "joined"), [(SwarmParams(), [0, 1]), (SwarmParams(replicate=False), [0])]
)
def test_a_token_coactive_with_three_medoids_joins_at_most_max_replicas(params, joined):
    d = four_cluster_design(params)
    quiet = 1e-3 * np.ones(DIM)
    d.step(0, QUERY, QUERY)  # token 8: active with every medoid at steps 0 and 1 (d = 0)
    d.step(1, QUERY, quiet)
    dec = d.step(2, QUERY, quiet)  # 8 leaves the window: joins the cap's nearest
    assert dec.info["joins"] == len(joined) and dec.info["new_clusters"] == 0
    assert [c for c in range(4) if 8 in d.clustering.members[c]] == joined
    assert len(d.placement.replicas(8)) == len(joined)

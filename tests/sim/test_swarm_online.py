"""Swarm's SSD placement, entry-bucket retrieval and online design on hand cases."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import Layout, get_design
from sim.policies.swarm.design import ABLATIONS, SwarmDesign, SwarmParams, join_radius
from sim.policies.swarm.placement import place
from sim.policies.swarm.retrieval import assign, optimal_makespan, schedule
from sim.policies.swarm.types import Clustering

EB = 1024  # entry bytes in the design tests


def clustering(*members: list[int], radius: float = 0.8) -> Clustering:
    ms = [np.array(m, dtype=np.int64) for m in members]
    return Clustering(ms, radius, int(max(max(m) for m in members)) + 1)


def where(pl, entry: int) -> list[tuple[int, int]]:
    return pl.replicas(entry)


# -- placement (§5.2 Tier 2, Eq. 7) -------------------------------------------


def test_round_robin_sizes_3_2_4_on_4_ssds():
    # p=0: c0 on disks 0,1,2; p=3: c1 on 3,0; p=5: c2 starts at 5 mod 4 = 1: 1,2,3,0
    pl = place(clustering([0, 1, 2], [3, 4], [5, 6, 7, 8]), 4)
    expect = [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (0, 2)]
    assert [where(pl, e) for e in range(9)] == [[x] for x in expect]
    assert pl.start == [0, 3, 1]
    assert pl.slots_used.tolist() == [3, 2, 2, 2]


def test_no_balance_puts_each_cluster_whole_on_one_disk():
    # c0 -> disk 0 (slots 0..2), c1 -> disk 1 (0..1), c2 -> disk 2 (0..3)
    pl = place(clustering([0, 1, 2], [3, 4], [5, 6, 7, 8]), 4, balance=False)
    expect = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert [where(pl, e) for e in range(9)] == [[x] for x in expect]
    assert pl.start == [0, 1, 2]
    assert pl.slots_used.tolist() == [3, 2, 4, 0]
    # a new member stays on its cluster's disk; a new singleton takes the next disk
    assert pl.add(9, 1) == (1, 2)
    assert pl.new_cluster(10) == 3 and pl.replicas(10) == [(3, 0)]


def test_replicas_land_where_their_clusters_put_them():
    # c0 from disk 0: 0,1,2 -> d0,d1,d2; c1 from 3: 3 -> d3, 0 -> d0;
    # c2 from 5 mod 4 = 1: 4,1,0 -> d1,d2,d3
    pl = place(clustering([0, 1, 2], [3, 0], [4, 1, 0]), 4)
    assert where(pl, 0) == [(0, 0), (0, 1), (3, 1)]
    assert where(pl, 1) == [(1, 0), (2, 1)]
    assert pl.replication().tolist() == [3, 2, 1, 1, 1]
    assert pl.cluster_replicas(2).tolist() == [pl.indptr[4], pl.indptr[1] + 1, pl.indptr[0] + 2]


def test_add_goes_to_the_clusters_next_disk_and_singletons_follow_the_pointer():
    pl = place(clustering([0, 1, 2], [3, 0], [4, 1, 0]), 4)
    assert pl.add(5, 1) == (1, 2)  # c1 starts at 3 with 2 members: disk (3+2) mod 4
    assert pl.size[1] == 3
    assert pl.add(5, 0) == (3, 2)  # the same token may join several clusters
    assert where(pl, 5) == [(1, 2), (3, 2)]
    assert pl.new_cluster(6) == 3 and where(pl, 6) == [(0, 2)]  # pointer 8 -> disk 0
    with pytest.raises(ValueError):
        pl.add(2, 0)  # entries are appended in id order


# -- retrieval (§6.1, Eq. 8) ---------------------------------------------------

# 4 disks; c0..c2 fill slots 0..2 of every disk; c3 (from disk 0) adds replicas
# of 0, 4, 8 on disks 1, 2, 3, whose first replicas are all on disk 0.
REPL = clustering([0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 0, 4, 8])


def test_greedy_spreads_replicated_entries_and_matches_the_optimum():
    pl = place(REPL, 4)
    b = assign(np.array([0, 4, 8]), pl, "balanced")
    # 0 -> d0 (tie d0/d1, lowest index), 4 -> d2 (d0 has 1), 8 -> d3
    assert [s.tolist() for s in b.slots] == [[0], [], [3], [3]]
    assert b.rounds == 1 == optimal_makespan(np.array([0, 4, 8]), pl)
    first = assign(np.array([0, 4, 8]), pl, "first")
    assert [s.tolist() for s in first.slots] == [[0, 1, 2], [], [], []]
    assert first.rounds == 3


def test_policies_on_one_cluster_with_replicas():
    pl = place(REPL, 4)
    bal = schedule([3], pl, REPL.members, "balanced")
    assert [s.tolist() for s in bal.slots] == [[3], [3], [3], [3]]  # 12 alone on d0 first
    assert bal.rounds == 1 == optimal_makespan(REPL.members[3], pl)
    static = schedule([3], pl, REPL.members, "static")
    assert [s.tolist() for s in static.slots] == [[3, 0, 1, 2], [], [], []]
    assert static.rounds == 4
    assert schedule([3], pl, REPL.members, "first").rounds == 4
    own = schedule([3], pl, REPL.members, "balanced", dedup=False)
    assert [s.tolist() for s in own.slots] == [[3], [3], [3], [3]]


def test_dedup_saves_exactly_the_duplicates():
    pl = place(REPL, 4)
    dd = schedule([0, 1, 2, 3], pl, REPL.members, "balanced")
    nd = schedule([0, 1, 2, 3], pl, REPL.members, "balanced", dedup=False)
    st_ = schedule([0, 1, 2, 3], pl, REPL.members, "static", dedup=True)  # static never dedups
    assert dd.n_reads == 13 and dd.duplicates == 0
    assert nd.n_reads == 16 and nd.duplicates == 3
    assert st_.n_reads == 16 and st_.duplicates == 3
    assert nd.n_reads - dd.n_reads == nd.duplicates
    assert dd.rounds == optimal_makespan(np.arange(13), pl) == 4


def test_resident_entries_are_not_read():
    pl = place(REPL, 4)
    resident = np.zeros(13, dtype=bool)
    resident[[12, 4]] = True
    b = schedule([3], pl, REPL.members, "balanced", resident=resident)
    assert sorted(np.concatenate(b.entries).tolist()) == [0, 8]
    assert b.rounds == 1


def test_one_ssd_every_policy_one_bucket():
    pl = place(REPL, 1)
    bal = schedule([0, 3], pl, REPL.members, "balanced")
    first = schedule([0, 3], pl, REPL.members, "first")
    assert len(bal.slots) == 1
    assert first.slots[0].tolist() == [0, 1, 2, 3, 4, 8, 12]
    # balanced picks among the chosen clusters' replicas: 0 in c0 (slot 0) or c3 (13),
    # a tie in entries, the first placed; 4 and 8 only in c3 (slots 14, 15), not c1/c2
    assert bal.slots[0].tolist() == [0, 1, 2, 3, 14, 15, 12]
    assert bal.entries[0].tolist() == [0, 1, 2, 3, 4, 8, 12]
    assert bal.rounds == 7
    static = schedule([0, 3], pl, REPL.members, "static")
    assert static.n_reads == 8 and static.rounds == 8 and static.duplicates == 1


@settings(max_examples=60, deadline=None)
@given(
    n_ssd=st.integers(1, 4),
    clusters=st.lists(
        st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=1, max_size=5
    ),
    pick=st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
)
def test_greedy_reads_every_entry_once_from_a_real_replica(n_ssd, clusters, pick):
    covered = set().union(*map(set, clusters))
    clusters = clusters + [[e] for e in range(8) if e not in covered]
    cl = clustering(*clusters)
    pl = place(cl, n_ssd)
    chosen = [c for c in pick if c < len(clusters)]
    b = schedule(chosen, pl, cl.members)
    want = sorted(set().union(*(clusters[c] for c in chosen))) if chosen else []
    assert sorted(np.concatenate(b.entries).tolist()) == want
    for k in range(n_ssd):
        for e, s in zip(b.entries[k].tolist(), b.slots[k].tolist(), strict=True):
            assert (k, s) in pl.replicas(e)
    assert b.rounds >= optimal_makespan(np.array(want, dtype=np.int64), pl)


# -- the design on a planted setup ---------------------------------------------

N, K, DIM = 64, 4, 8  # entry e is in cluster e % 4, whose medoid is entry c
CENTROIDS = 10.0 * np.eye(DIM)[:K]
PLANTED = clustering(*[list(range(c, N, K)) for c in range(K)])


def layout(n_ssd=3, budget=None, window=4, cache=0) -> Layout:
    """Budget (sinks and window included, as every design counts it): by default
    room for the 2 sinks, the window and one planted cluster's 15 non-resident
    members (16 members, one of them a sink or in the window)."""
    return Layout(
        n_ssd=n_ssd,
        entry_bytes=EB,
        key_bytes=EB // 2,
        budget=2 + window + 15 if budget is None else budget,
        local_window=window,
        sink_tokens=2,
        dram_cache_entries=cache,
        ssd_latency_us=80.0,
        ssd_entry_us=0.15,
    )


def planted_activations(rows_per_cluster=(10, 10, 10, 10)) -> sp.csr_matrix:
    rows = [c for c, r in enumerate(rows_per_cluster) for _ in range(r)]
    x = np.zeros((len(rows), N), dtype=bool)
    for i, c in enumerate(rows):
        x[i, c::K] = True
    return sp.csr_matrix(x)


def build(params=None, lay=None, acts=None) -> SwarmDesign:
    rng = np.random.default_rng(0)
    keys = CENTROIDS[np.arange(N) % K] + 1e-3 * rng.standard_normal((N, DIM))
    d = SwarmDesign(params)
    acts = acts if acts is not None else planted_activations()
    d.build(acts, keys, lay or layout(), rng, clustering=PLANTED)
    return d


def quiet_key(t: int) -> np.ndarray:
    """A new token's key that no query activates."""
    return 1e-3 * np.random.default_rng(100 + t).standard_normal(DIM)


def covered(ext: np.ndarray) -> list[int]:
    """Entry offsets the (offset, length) ranges cover, each range in order."""
    return [o for off, n in ext.tolist() for o in range(off, off + n, EB)]


def check_decision(d: SwarmDesign, dec) -> None:
    n_reads = sum(len(covered(e)) for e in dec.ssd_extents)
    assert dec.read_bytes == n_reads * EB
    for k, ext in enumerate(dec.ssd_extents):
        assert (ext[:, 1] % EB == 0).all() and (ext[:, 0] % EB == 0).all()
        assert (ext.sum(axis=1) // EB <= d.placement.slots_used[k]).all()
        # runs of consecutive slots are one range each: ranges never touch
        assert (ext[1:, 0] > ext[:-1].sum(axis=1)).all()
    if d.params.dedup and d.params.retrieval != "static":
        assert dec.dram_entries + n_reads == dec.selected.size


def test_query_picks_the_top_medoid_and_reads_its_members_from_their_disks():
    d = build()
    dec = d.step(0, CENTROIDS[2], quiet_key(0))
    check_decision(d, dec)
    c2 = np.arange(2, N, K)
    assert dec.info["chosen_clusters"] == 1
    assert dec.selected.tolist() == sorted({*c2.tolist(), 0, 1, 61, 62, 63, 64})
    assert dec.dram_entries == 6  # sinks 0, 1 and window 61..64 (62 is in c2)
    # c0 (from disk 0) puts 6, 5, 5 members on disks 0, 1, 2 and c1 (from 16 mod 3 = 1)
    # 5, 6, 5, so c2 (from 32 mod 3 = 2) finds 11, 11, 10 slots taken: member i
    # (entry 2 + 4i) is on disk (2 + i) mod 3 at slot base[disk] + i // 3
    base = [11, 11, 10]
    for k in range(3):
        i = [i for i in range(15) if (2 + i) % 3 == k]  # member 15 (entry 62) is resident
        assert covered(dec.ssd_extents[k]) == [(base[k] + j // 3) * EB for j in i]
        assert len(dec.ssd_extents[k]) == 1  # consecutive slots: one range
    assert dec.rounds == 1  # one range per disk, no transfer limit: one I/O each, one round
    assert dec.score_flops == 2 * DIM * K and dec.score_bytes == K * EB // 2
    assert d.index_bytes() == K * EB // 2 + 8 * K


def test_clusters_taken_in_descending_medoid_score():
    # always 6 (0, 1, 61..64); c1 adds 14 (1 is a sink, 61 in the window), c3 15 (63)
    d = build(lay=layout(budget=6 + 14 + 15))
    dec = d.step(0, CENTROIDS[1] + 0.5 * CENTROIDS[3], quiet_key(0))
    check_decision(d, dec)
    always = {0, 1, 61, 62, 63, 64}
    c1_c3 = set(range(1, N, K)) | set(range(3, N, K))
    assert set(dec.selected.tolist()) - always == c1_c3 - always
    assert dec.info["chosen_clusters"] == 2


def test_one_ssd_reads_everything_from_ssd_0():
    d = build(lay=layout(n_ssd=1))
    dec = d.step(0, CENTROIDS[2], quiet_key(0))
    check_decision(d, dec)
    assert len(dec.ssd_extents) == 1
    assert covered(dec.ssd_extents[0]) == [(32 + i) * EB for i in range(15)]
    assert dec.ssd_extents[0].tolist() == [[32 * EB, 15 * EB]]  # c2's run: one range
    assert dec.rounds == 1  # the range is one I/O (the layout sets no transfer limit)


def test_score_cache_keeps_the_profiled_hot_cluster_lru_keeps_the_recent_one():
    acts = planted_activations((10, 1, 1, 1))  # c0's medoid was active 10 times, others once
    lay = layout(cache=16)
    score = build(SwarmParams(cache="score"), lay, acts)
    lru = build(SwarmParams(cache="lru"), lay, acts)
    assert score.cache.cached() == [0] and lru.cache.cached() == []
    reads = {"score": [], "lru": []}
    for t, c in enumerate([2, 2, 0, 2]):
        for name, d in (("score", score), ("lru", lru)):
            dec = d.step(t, CENTROIDS[c], quiet_key(t))
            check_decision(d, dec)
            reads[name].append(dec.info["read_entries"])
    # c2 has 16 members, c0 16; the window holds 62 (c2) until step 3, the sink 0 (c0);
    # at step 3 c2's 16 non-resident members meet a budget of 21 - 6 always-selected
    # = 15: the cluster is cut at its 15th (the budget rule every design follows)
    # score: c2 (f 1 -> 2 -> 3) never beats c0 (f 10 -> 9 -> 8), so c0 stays cached
    assert reads["score"] == [15, 15, 0, 15]
    # lru: c2 enters after step 0, c0 replaces it at step 2
    assert reads["lru"] == [15, 0, 15, 15]
    assert score.cache.cached() == [0] and lru.cache.cached() == [2]


def test_new_token_coactive_with_a_medoid_joins_its_cluster_on_the_next_disk():
    d = build(lay=layout(window=2))
    # Jaccard offline radius 0.8 -> the same bound on the conditional measure (join_radius)
    assert d.r_join == join_radius(0.8, planted_activations()) == pytest.approx(0.8)
    decs = [d.step(0, CENTROIDS[0], 1.01 * CENTROIDS[0])]  # token 64: scores 101 >= 100
    decs.append(d.step(1, CENTROIDS[0], quiet_key(1)))  # token 65: never active
    # room for c0 grown by token 64: always 4 (0, 1, 65, 66) + 16 (a budget that
    # grows with the context, one entry more than steps 0-1's 4 + 15)
    d.layout = dataclasses.replace(d.layout, budget=20)
    # per-disk slots after placement: c0 (from 0) 6,5,5; c1 (from 1) 5,6,5;
    # c2 (from 2) 5,5,6; c3 (from 48 mod 3 = 0) 6,5,5 -> 22, 21, 21
    decs.append(d.step(2, CENTROIDS[0], quiet_key(2)))  # 64 leaves the window
    assert decs[2].info["joins"] == 1 and decs[2].info["new_clusters"] == 0
    assert d.placement.replicas(64) == [(1, 21)]  # c0's next disk: (0 + 16) mod 3
    assert d.clustering.members[0][-1] == 64
    assert EB * 21 in covered(decs[2].ssd_extents[1])  # read from there at once
    decs.append(d.step(3, CENTROIDS[0], quiet_key(3)))  # 65 leaves: a singleton cluster
    assert decs[3].info["new_clusters"] == 1 and decs[3].info["clusters"] == K + 1
    assert d.placement.replicas(65) == [(1, 22)]  # global pointer 64 -> disk 1
    assert d.clustering.members[K].tolist() == [65]
    assert d.index_bytes() == (K + 1) * EB // 2 + 8 * (K + 1)
    for dec in decs:
        check_decision(d, dec)


@pytest.mark.parametrize(
    ("cache", "capacity", "kept"),
    [("score", 17, [0]), ("score", 16, []), ("lru", 17, [0]), ("lru", 16, [])],
)
def test_a_cached_cluster_that_grows_is_kept_while_it_fits(cache, capacity, kept):
    d = build(SwarmParams(cache=cache), layout(window=2, cache=capacity))
    d.step(0, CENTROIDS[0], 1.01 * CENTROIDS[0])  # lru: c0 enters here; score: cached at build
    d.step(1, CENTROIDS[0], quiet_key(1))
    assert d.cache.cached() == [0]
    dec = d.step(2, CENTROIDS[0], quiet_key(2))  # token 64 joins c0: 17 entries
    assert dec.info["joins"] == 1
    assert d.cache.cached() == kept and d.cache.used == 17 * len(kept)
    assert d.cache.used <= capacity


def test_without_maintenance_a_leaving_token_is_its_own_cluster():
    d = build(SwarmParams(maintenance=False), layout(window=2))
    d.step(0, CENTROIDS[0], 1.01 * CENTROIDS[0])
    d.step(1, CENTROIDS[0], quiet_key(1))
    dec = d.step(2, CENTROIDS[0], quiet_key(2))
    assert dec.info["joins"] == 0 and dec.info["new_clusters"] == 1
    assert d.clustering.members[K].tolist() == [64]


@pytest.mark.parametrize("name", ["swarm", *ABLATIONS])
def test_every_registered_variant_runs_the_planted_steps(name):
    d = get_design(name)
    assert isinstance(d, SwarmDesign) and d.name == name
    for k, v in ABLATIONS.get(name, {}).items():
        assert getattr(d.params, k) == v
    rng = np.random.default_rng(0)
    keys = CENTROIDS[np.arange(N) % K] + 1e-3 * rng.standard_normal((N, DIM))
    d.build(planted_activations(), keys, layout(cache=16), rng, clustering=PLANTED)
    for t in range(8):
        dec = d.step(t, CENTROIDS[t % K], keys[t])
        check_decision(d, dec)


def test_steps_must_run_in_order():
    d = build()
    with pytest.raises(ValueError):
        d.step(1, CENTROIDS[0], quiet_key(1))


def test_build_with_the_clusterer_recovers_the_planted_clusters():
    # profiling activates each planted cluster 10 of 40 times: d = 0.75 inside, 1 across,
    # so with r = 0.8 Algorithm 1 finds the four clusters (medoids 0..3: density ties -> id)
    rng = np.random.default_rng(0)
    keys = CENTROIDS[np.arange(N) % K] + 1e-3 * rng.standard_normal((N, DIM))
    d = SwarmDesign(SwarmParams(radius=0.8))
    d.build(planted_activations(), keys, layout(), rng)
    assert [m.tolist() for m in d.clustering.members] == [m.tolist() for m in PLANTED.members]
    dec = d.step(0, CENTROIDS[2], quiet_key(0))
    check_decision(d, dec)
    assert dec.info["read_entries"] == 15

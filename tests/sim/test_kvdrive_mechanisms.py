"""KVDrive's mechanisms (seed 003 §4, §5, §7.2) on hand-sized instances."""

import numpy as np
import pytest

from sim.policies.kvdrive.gpucache import WindowCache
from sim.policies.kvdrive.index import build_index, chunk_means
from sim.policies.kvdrive.knapsack import exhaustive_mckp, greedy_mckp, value, window_profile
from sim.policies.kvdrive.packing import PackedLayout

A, B, C = 0, 1, 2
# per step: the entry attention selects (top-1) and every entry's current score
TRACE = [
    (A, {A: 0.9, B: 0.5, C: 0.1}),
    (B, {A: 0.8, B: 0.9, C: 0.1}),
    (C, {A: 0.8, B: 0.1, C: 0.9}),
    (A, {A: 0.9, B: 0.2, C: 0.3}),
]


def _hits(policy: str) -> list[bool]:
    cache = WindowCache(2, policy)
    out = []
    for t, (sel, scores) in enumerate(TRACE):
        score = lambda ids, s=scores: np.array([s[int(i)] for i in ids])  # noqa: E731
        out.append(bool(cache.access(t, np.array([sel]), score)[0]))
    return out


def test_lookahead_beats_lru_on_a_hand_trace():
    # capacity 2.  Steps 0-1 fill {A, B}.  Step 2 selects C: the cache must drop one.
    # LRU drops A (last used at step 0); lookahead drops B (score 0.1 now, A's is 0.8).
    # Step 3 selects A: a hit only for lookahead.  Hits by hand: LRU 0 of 4, LA 1 of 4.
    assert _hits("lru") == [False, False, False, False]
    assert _hits("lookahead") == [False, False, False, True]


def test_the_steps_selection_is_never_evicted():
    cache = WindowCache(2, "lookahead")
    cache.warm(np.array([7, 8]))
    hit = cache.access(0, np.array([1, 2]), lambda ids: np.where(ids < 5, -1.0, 1.0))
    # both selected entries score lowest, yet they are in use: 7 and 8 go
    assert not hit.any() and cache.ids.tolist() == [1, 2]
    assert len(cache) == cache.capacity


def test_cache_never_exceeds_capacity_and_counts_misses():
    rng = np.random.default_rng(0)
    cache = WindowCache(10, "lru")
    fetched = 0
    for t in range(50):
        sel = np.unique(rng.integers(0, 30, 6))
        hit = cache.access(t, sel, np.zeros_like)
        fetched += int((~hit).sum())
        assert len(cache) <= 10 and set(sel.tolist()) <= set(cache.ids.tolist())
    assert fetched <= 50 * 6


def test_greedy_knapsack_against_exhaustive_by_hand():
    # two heads, windows {0, 1}: A's step gains 2 for 1 byte (ratio 2), B's 5 for 3 (1.67)
    benefit = np.array([[0.0, 2.0], [0.0, 5.0]])
    cost = np.array([[0.0, 1.0], [0.0, 3.0]])
    # budget 4 falls on a move boundary: greedy takes A then B, optimal (7)
    assert value(benefit, cost, greedy_mckp(benefit, cost, 4))[0] == 7.0
    assert value(benefit, cost, exhaustive_mckp(benefit, cost, 4))[0] == 7.0
    # budget 3: greedy takes A (ratio 2) and then B no longer fits: 2, optimum is B alone: 5
    assert greedy_mckp(benefit, cost, 3).tolist() == [1, 0]
    assert exhaustive_mckp(benefit, cost, 3).tolist() == [0, 1]


def _concave(rng, groups, k):
    gains = np.sort(rng.uniform(0.1, 1.0, (groups, k - 1)), axis=1)[:, ::-1]  # decreasing ratio
    steps = rng.uniform(1.0, 3.0, (groups, k - 1))
    cost = np.concatenate([np.zeros((groups, 1)), np.cumsum(steps, axis=1)], axis=1)
    benefit = np.concatenate([np.zeros((groups, 1)), np.cumsum(gains * steps, axis=1)], axis=1)
    return benefit, cost, gains * steps


@pytest.mark.parametrize("seed", range(20))
def test_greedy_within_one_move_of_optimal_on_concave_curves(seed):
    rng = np.random.default_rng(seed)
    benefit, cost, moves = _concave(rng, 4, 4)
    budget = rng.uniform(0.0, cost[:, -1].sum())
    g = greedy_mckp(benefit, cost, budget)
    opt = value(benefit, cost, exhaustive_mckp(benefit, cost, budget))[0]
    got, spent = value(benefit, cost, g)
    assert spent <= budget + 1e-9
    assert got <= opt + 1e-9
    assert got >= opt - moves.max() - 1e-9  # LP-relaxation bound (module doc)


def test_window_profile_benefit_grows_with_the_window():
    # a head that re-selects {0..3} and {4..7} alternately: window 1 (4 entries) refetches
    # every step, window 2 (8 entries) keeps both after the first two steps
    sels = [np.arange(4) + 4 * (t % 2) for t in range(6)]
    benefit, cost = window_profile(sels, [0, 1, 2], 4, 100)
    assert benefit.tolist() == [0.0, 0.0, 24.0 - 8.0]
    assert cost.tolist() == [0.0, 400.0, 800.0]


def test_packing_adjacent_entries_are_one_extent_a_gap_makes_two():
    members = [np.array([0, 1, 2, 3, 8, 9, 10, 11]), np.array([4, 5, 6, 7])]
    lay = PackedLayout(members, 12, n_ssd=1)
    # centroid 0's members are scattered in position but packed into slots 0..7
    one = lay.extents(members[0], 64)
    assert [e.tolist() for e in one] == [[[0, 8 * 64]]]
    gap = lay.extents(np.array([0, 1, 9, 10, 11]), 64)  # slot 2..4 missing
    assert gap[0].tolist() == [[0, 128], [5 * 64, 3 * 64]]


def test_packing_balances_centroids_over_ssds_and_appends():
    members = [np.arange(0, 6), np.arange(6, 8), np.arange(8, 12)]
    lay = PackedLayout(members, 12, n_ssd=2)
    assert lay.centroid_disk.tolist() == [0, 1, 1]  # ssd1 has fewer slots after c0
    assert lay.used.tolist() == [6, 6]
    lay.append(12, 1)
    assert (lay.disk[12], lay.slot[12]) == (1, 6)


def test_hierarchical_index_members_are_whole_chunks():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(103, 8)).astype(np.float32)
    idx = build_index(keys, chunk_size=4, chunks_per_centroid=3, rng=rng)
    assert idx.n_chunks == 26 and idx.n_centroids <= 9
    assert np.allclose(chunk_means(keys, 4)[25], keys[100:].mean(axis=0))
    every = np.sort(np.concatenate(idx.members))
    assert every.tolist() == list(range(103))
    for c, m in enumerate(idx.members):  # each member's chunk is labelled c
        assert np.all(idx.chunk_label[m // 4] == c)
    flops, nbytes = idx.score_cost(key_bytes=16)
    assert flops == 2 * 8 * idx.n_centroids and nbytes == 16 * idx.n_centroids

"""The Swarm paper's baselines (No Cluster, InfLLM blocks, PQCache k-means):
hand-checked layouts and selections, and invariants every design keeps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.policies import Layout, StepDecision, get_design
from sim.policies.baselines.nocluster import Stripe
from sim.policies.baselines.pqcache import kmeans
from sim.policies.selection import always_selected
from sim.registry import RegistryError

EB, KB = 1000, 400  # entry bytes, key bytes: round numbers for hand-checked offsets


def layout(n_ssd: int = 4, budget: int = 64, window: int = 8, sinks: int = 2, cache: int = 0):
    return Layout(
        n_ssd=n_ssd,
        entry_bytes=EB,
        key_bytes=KB,
        budget=budget,
        local_window=window,
        sink_tokens=sinks,
        dram_cache_entries=cache,
        ssd_latency_us=80.0,
        ssd_entry_us=0.15,
    )


def no_activity(n: int, rows: int = 4) -> sp.csr_matrix:
    return sp.csr_matrix((rows, n), dtype=bool)


def built(name: str, keys, lay: Layout, acts=None, seed: int = 0, **params):
    design = get_design(name, **params)
    acts = no_activity(len(keys)) if acts is None else acts
    design.build(acts, np.asarray(keys, np.float32), lay, np.random.default_rng(seed))
    return design


def entries_read(extents: np.ndarray) -> int:
    return int(extents[:, 1].sum()) // EB


# -- No Cluster ---------------------------------------------------------------


def test_stripe_places_chunks_round_robin_by_hand():
    s = Stripe(chunk=256, n_ssd=4)
    # chunk 1 (256..511) is the first chunk of disk 1: entry 300 is its 44th slot
    assert (int(s.disk(300)), int(s.slot(300))) == (1, 300 - 256)
    assert (int(s.disk(5)), int(s.slot(5))) == (0, 5)
    assert (int(s.disk(1023)), int(s.slot(1023))) == (3, 255)
    # decode tokens continue the round-robin: chunk 4 is disk 0's second chunk
    assert (int(s.disk(1024)), int(s.slot(1024))) == (0, 256)
    assert (int(s.disk(1100)), int(s.slot(1100))) == (0, 256 + 76)
    assert s.slots_used(1024).tolist() == [256, 256, 256, 256]
    assert s.slots_used(1100).tolist() == [332, 256, 256, 256]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 9), st.integers(1, 5), st.integers(0, 200))
def test_stripe_is_a_bijection_onto_allocated_slots(chunk: int, n_ssd: int, placed: int):
    s = Stripe(chunk, n_ssd)
    pos = np.arange(placed)
    disk, slot = s.disk(pos), s.slot(pos)
    used = s.slots_used(placed)
    for k in range(n_ssd):
        assert sorted(slot[disk == k].tolist()) == list(range(used[k]))


def test_nocluster_reads_the_selected_entry_at_its_stripe_offset():
    keys = np.zeros((1024, 4), np.float32)
    keys[300, 0] = 5.0
    lay = layout(n_ssd=4, window=8, sinks=2, budget=2 + 8 + 1)  # room for one entry
    nc = built("nocluster", keys, lay, chunk_entries=256)
    dec = nc.step(0, np.array([1.0, 0, 0, 0], np.float32), np.zeros(4, np.float32))
    assert 300 in dec.selected
    assert [e.tolist() for e in dec.ssd_extents] == [[], [[(300 - 256) * EB, EB]], [], []]
    assert dec.read_bytes == EB and dec.rounds == 1
    assert dec.dram_entries == 10  # 2 sinks + 8 window (the new token included)
    assert nc.index_bytes() == 0


def test_nocluster_selection_is_the_oracle_top_k():
    rng = np.random.default_rng(3)
    n, d = 1024, 16
    keys = rng.standard_normal((n, d)).astype(np.float32)
    lay = layout(n_ssd=4, budget=100, window=16, sinks=4)
    nc = built("nocluster", keys, lay)
    all_keys = keys
    for t in range(5):
        q, new = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d)
        dec = nc.step(t, q, new.astype(np.float32))
        all_keys = np.vstack([all_keys, new.astype(np.float32)])
        visible = n + t + 1
        always = always_selected(visible, 4, 16)
        scores = all_keys @ q
        scores[always] = -np.inf
        oracle = np.union1d(always, np.argsort(-scores)[: 100 - len(always)])
        assert np.array_equal(dec.selected, oracle)  # recall 1
        assert dec.score_flops == 2 * d * visible and dec.score_bytes == visible * KB


def test_nocluster_prefetch_loads_every_nonresident_entry_once():
    n, chunk, lay = 1000, 64, layout(n_ssd=3, window=16, sinks=4, budget=50)
    rng = np.random.default_rng(0)
    nc = built("nocluster", rng.standard_normal((n, 8)), lay, chunk_entries=chunk)
    dec = nc.step(0, rng.standard_normal(8).astype(np.float32), np.zeros(8, np.float32))
    s = Stripe(chunk, 3)
    where = {(int(s.disk(p)), int(s.slot(p))): p for p in range(n + 1)}
    loaded = [
        where[(k, (off + i) // EB)]
        for k, ext in enumerate(dec.prefetch_extents)
        for off, length in ext.tolist()
        for i in range(0, length, EB)
    ]
    nonresident = np.setdiff1d(np.arange(n + 1), always_selected(n + 1, 4, 16))
    assert sorted(loaded) == nonresident.tolist()  # each exactly once
    total = sum(int(e[:, 1].sum()) for e in dec.prefetch_extents)
    assert total == len(nonresident) * EB
    assert max(int(e[:, 1].max()) for e in dec.prefetch_extents) <= chunk * EB  # one per chunk
    lazy = built("nocluster", rng.standard_normal((n, 8)), lay, load_for_scoring=False)
    assert lazy.step(0, np.ones(8, np.float32), np.zeros(8, np.float32)).prefetch_extents is None


# -- InfLLM -------------------------------------------------------------------


def test_infllm_representatives_are_the_most_active_tokens():
    # block 0 = tokens 0..7; activity counts 0,3,1,3,0,5,0,0 -> 5 first, then the
    # tie 1 vs 3 goes to the lower position
    rows = [[1, 3, 5], [1, 3, 5], [1, 2, 3, 5], [5], [5], [9, 12], [12]]
    acts = sp.csr_matrix(
        (np.ones(sum(map(len, rows)), bool), np.concatenate(rows), np.cumsum([0, *map(len, rows)])),
        shape=(len(rows), 16),
    )
    keys = np.zeros((16, 2), np.float32)
    keys[5], keys[1], keys[2] = [3, 0], [1, 0], [100, 0]  # token 2 is no representative
    keys[12], keys[9] = [-1, 0], [-2, 0]
    inf = built("infllm", keys, layout(n_ssd=1), acts, block_tokens=8, representatives=2)
    assert [r.tolist() for r in inf.reps] == [[5, 1], [12, 9]]
    # a block scores the max over its representatives, never its other tokens
    assert inf.block_scores(np.array([1, 0], np.float32)).tolist() == [3.0, -1.0]
    assert inf.index_bytes() == 2 * 2 * KB


def _one_hot_block_trace():
    """1024 tokens, blocks of 128; token 657 (block 5) is the only one that matters."""
    keys = np.zeros((1024, 4), np.float32)
    keys[657, 0] = 10.0
    acts = sp.csr_matrix(np.isin(np.arange(1024), [657])[None, :].repeat(3, axis=0))
    return keys, acts, np.array([1.0, 0, 0, 0], np.float32)


def test_infllm_reads_a_whole_block_as_one_extent():
    keys, acts, q = _one_hot_block_trace()
    lay = layout(n_ssd=4, window=16, sinks=4, budget=4 + 16 + 128, cache=0)  # one block's room
    inf = built("infllm", keys, lay, acts, block_tokens=128)
    assert inf.n_blocks == 8 and inf.index_bytes() == 8 * 4 * KB
    dec = inf.step(0, q, np.zeros(4, np.float32))
    # block 5 lives on disk 5 % 4 = 1 at slot (5 // 4) * 128: one 128-entry I/O
    assert [e.tolist() for e in dec.ssd_extents] == [[], [[128 * EB, 128 * EB]], [], []]
    # read amplification: one needed token costs the whole block
    assert set(range(640, 768)) <= set(dec.selected.tolist())
    assert dec.read_bytes == 128 * EB and dec.rounds == 1
    assert dec.info["blocks_read"] == 1.0


def test_infllm_lru_cache_turns_the_second_read_into_a_hit():
    keys, acts, q = _one_hot_block_trace()
    lay = layout(n_ssd=4, window=16, sinks=4, budget=4 + 16 + 128, cache=128)
    inf = built("infllm", keys, lay, acts, block_tokens=128)
    first = inf.step(0, q, np.zeros(4, np.float32))
    second = inf.step(1, q, np.zeros(4, np.float32))
    assert first.read_bytes == 128 * EB and second.read_bytes == 0
    assert second.info["cache_hits"] == 1.0 and second.rounds == 0
    assert second.dram_entries == 20 + 128


def test_infllm_decode_tokens_form_blocks_once_they_leave_the_window():
    lay = layout(n_ssd=2, window=4, sinks=0, budget=8)
    inf = built("infllm", np.zeros((16, 2)), lay, block_tokens=8, representatives=2)
    z = np.zeros(2, np.float32)
    for t in range(11):  # visible = 27: tokens 16..22 left the window, block incomplete
        dec = inf.step(t, z, z)
    assert inf.n_blocks == 2 and dec.info["pending"] == 7.0
    assert set(range(16, 27)) <= set(dec.selected.tolist())  # pending + window in DRAM
    inf.step(11, z, z)  # visible = 28: tokens 16..23 form block 2 (disk 0, slot 8)
    assert inf.n_blocks == 3 and inf.block_disk_slot(2) == (0, 8)
    assert inf.members[2].tolist() == list(range(16, 24))


# -- PQCache ------------------------------------------------------------------


def _planted(n_clusters: int = 8, size: int = 32, d: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = 100.0 * np.eye(d)[:n_clusters]
    truth = rng.permutation(np.repeat(np.arange(n_clusters), size))
    keys = centres[truth] + rng.normal(0.0, 0.1, (len(truth), d))
    return keys.astype(np.float32), truth, centres


def test_kmeans_recovers_planted_clusters():
    keys, truth, _ = _planted()
    for seed in range(5):
        _, labels = kmeans(keys, 8, np.random.default_rng(seed))
        # the same partition up to relabelling: labels <-> truth is one-to-one
        pairs = set(zip(truth.tolist(), labels.tolist(), strict=True))
        assert len(pairs) == 8 and len({p[1] for p in pairs}) == 8


def test_pqcache_clusters_partition_the_prefix_and_index_is_centroids():
    keys, truth, _ = _planted()
    pq = built("pqcache", keys, layout(n_ssd=2), target_size=32)
    assert pq.n_clusters == math.ceil(256 / 32) == 8
    assert np.array_equal(np.sort(np.concatenate(pq.members)), np.arange(256))
    assert pq.index_bytes() == 8 * KB
    for m in pq.members:
        assert len(set(truth[m].tolist())) == 1


def test_pqcache_takes_the_highest_scoring_centroids_first():
    keys, truth, centres = _planted()
    want = np.flatnonzero(truth == 3)
    room = len(np.setdiff1d(want, np.arange(253, 257)))  # cluster 3 beyond the window
    lay = layout(n_ssd=2, window=4, sinks=0, budget=4 + room)
    pq = built("pqcache", keys, lay, chunk_entries=16)
    q = (centres[3] + 0.5 * centres[6]).astype(np.float32)
    dec = pq.step(0, q, np.zeros(16, np.float32))
    assert np.array_equal(dec.selected, np.union1d(want, np.arange(253, 257)))
    # every selected cluster member read once, at its stripe slot; runs of
    # consecutive slots are one range each (maximal: no two ranges touch)
    s = Stripe(16, 2)
    nonres = np.setdiff1d(want, np.arange(253, 257))
    got = sorted(
        (k, slot)
        for k, e in enumerate(dec.ssd_extents)
        for off, n in e.tolist()
        for slot in range(off // EB, (off + n) // EB)
    )
    assert got == sorted(zip(s.disk(nonres).tolist(), s.slot(nonres).tolist(), strict=True))
    for e in dec.ssd_extents:
        assert (e[:, 1] % EB == 0).all() and (e[1:, 0] > e[:-1].sum(axis=1)).all()
    lay2 = layout(n_ssd=2, window=4, sinks=0, budget=4 + 33)  # one cluster is not enough
    dec2 = built("pqcache", keys, lay2).step(0, q, np.zeros(16, np.float32))
    assert set(truth[np.setdiff1d(dec2.selected, np.arange(253, 257))].tolist()) == {3, 6}


def test_pqcache_new_token_joins_its_nearest_centroid():
    keys, truth, centres = _planted()
    lay = layout(n_ssd=2, window=2, sinks=0, budget=8)
    pq = built("pqcache", keys, lay)
    c6 = int(np.flatnonzero([6 in set(truth[m].tolist()) for m in pq.members])[0])
    near6 = (centres[6] + 0.05).astype(np.float32)
    q = np.zeros(16, np.float32)
    pq.step(0, q, near6)  # token 256 enters the window
    pq.step(1, q, q)
    pq.step(2, q, q)  # visible 259, window 2: token 256 left it
    assert pq.members[c6][-1] == 256 and pq.sizes[c6] == 33
    assert pq.slots_used.tolist() == Stripe(256, 2).slots_used(257).tolist()


# -- every design ---------------------------------------------------------------

DESIGNS = {
    "nocluster": {"chunk_entries": 64},
    "infllm": {"block_tokens": 32, "representatives": 3},
    "pqcache": {"target_size": 16, "chunk_entries": 64},
}


def _run(name: str, n_ssd: int, seed: int = 0, steps: int = 60) -> tuple[object, list]:
    rng = np.random.default_rng(123)
    n, d = 600, 16
    keys = rng.standard_normal((n, d)).astype(np.float32)
    acts = sp.random(32, n, density=0.1, format="csr", random_state=1).astype(bool)
    lay = layout(n_ssd=n_ssd, budget=60, window=16, sinks=4, cache=100)
    design = built(name, keys, lay, acts, seed=seed, **DESIGNS[name])
    qs = rng.standard_normal((steps, d)).astype(np.float32)
    new = rng.standard_normal((steps, d)).astype(np.float32)
    return design, [design.step(t, qs[t], new[t]) for t in range(steps)]


@pytest.mark.parametrize("name", sorted(DESIGNS))
@pytest.mark.parametrize("n_ssd", [1, 3])
def test_every_design_reads_within_its_slots_and_accounts_every_entry(name: str, n_ssd: int):
    design, decisions = _run(name, n_ssd)
    used = design.slots_used  # only grows, so the final allocation bounds every step
    for t, dec in enumerate(decisions):
        assert isinstance(dec, StepDecision) and len(dec.ssd_extents) == n_ssd
        visible = 600 + t + 1
        assert set(always_selected(visible, 4, 16).tolist()) <= set(dec.selected.tolist())
        assert dec.selected.max() < visible
        assert dec.read_bytes == sum(int(e[:, 1].sum()) for e in dec.ssd_extents)
        # every selected entry is in DRAM or read exactly once from one SSD
        assert dec.dram_entries + dec.read_bytes // EB == len(dec.selected)
        for k, ext in enumerate(dec.ssd_extents):
            assert ((ext % EB) == 0).all() and (ext[:, 1] > 0).all()
            assert (ext[:, 0] + ext[:, 1] <= used[k] * EB).all()
            ends = ext[:, 0] + ext[:, 1]
            assert (ext[1:, 0] >= ends[:-1]).all()  # sorted, no overlap


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_every_design_same_seed_same_decisions(name: str):
    _, a = _run(name, 3, seed=7, steps=20)
    _, b = _run(name, 3, seed=7, steps=20)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.selected, y.selected)
        assert all(np.array_equal(e, f) for e, f in zip(x.ssd_extents, y.ssd_extents, strict=True))
        assert (x.dram_entries, x.rounds, x.info) == (y.dram_entries, y.rounds, y.info)


def test_params_are_checked_by_name():
    assert get_design("infllm", block_tokens=64).params.block_tokens == 64
    with pytest.raises(RegistryError, match="design_params.target_sise: unknown parameter"):
        get_design("pqcache", target_sise=16)
    with pytest.raises(ValueError):
        get_design("nocluster", chunk_entries=0)

"""KVDrive and its baselines as KV designs: each one's distinguishing mechanism."""

import numpy as np
import scipy.sparse as sp

from sim.policies import Layout, get_design
from sim.policies.baselines.quest import bound_scores, page_bounds

D = 8


def _layout(**kw) -> Layout:
    base = dict(
        n_ssd=2,
        entry_bytes=256,
        key_bytes=128,
        budget=40,
        local_window=8,
        sink_tokens=4,
        dram_cache_entries=0,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    return Layout(**{**base, **kw})


def _keys(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, D)).astype(np.float32)


def _no_activations(n):
    return sp.csr_matrix((1, n), dtype=bool)


def test_flexgen_reads_the_whole_layer_every_step():
    n, lay = 1000, _layout()
    design = get_design("flexgen", chunk_entries=64)
    keys = _keys(n + 3)
    design.build(_no_activations(n), keys[:n], lay, np.random.default_rng(0))
    for t in range(3):
        dec = design.step(t, keys[t], keys[n + t])
        visible = n + t + 1
        assert dec.read_bytes == visible * lay.entry_bytes  # the layer's whole KV
        assert len(dec.selected) == visible and dec.dram_entries == 0
        # each SSD holds its chunks in consecutive slots: one sequential range per SSD
        assert [len(e) for e in dec.ssd_extents] == [1, 1]
    assert design.ssd_bytes().sum() == (n + 3) * lay.entry_bytes


def test_quest_bound_is_an_upper_bound_and_finds_an_outlier_page():
    keys = _keys(64, 1) * 0.1
    keys[37] = 5.0  # one key in page 2 (tokens 32..47) matches an all-ones query strongly
    q = np.ones(D, dtype=np.float32)
    lo, hi = page_bounds(keys, 16)
    bound = bound_scores(q, lo, hi)
    exact = keys @ q
    for p in range(4):
        assert bound[p] >= exact[p * 16 : (p + 1) * 16].max() - 1e-5
    means = keys.reshape(4, 16, D).mean(axis=1) @ q
    # the mean (ShadowKV-style) dilutes the outlier 16-fold; the bound keeps it
    assert int(np.argmax(bound)) == 2 and bound[2] >= 40.0 - 1e-4
    assert means[2] < 3.0


def _kvdrive(eviction, n=2048, window=2, dram=0, **kw):
    lay = _layout(budget=4 + 8 + 64, dram_cache_entries=dram)
    design = get_design(
        "kvdrive", chunk_size=4, chunks_per_centroid=4, window=window, eviction=eviction, **kw
    )
    keys = _keys(n + 8, 3)
    act = sp.csr_matrix(np.random.default_rng(1).random((16, n)) < 0.05)
    design.build(act, keys[:n], lay, np.random.default_rng(0))
    return design, keys, lay, n


def test_kvdrive_accounts_hits_dram_and_ssd():
    design, keys, lay, n = _kvdrive("lookahead", dram=200)
    assert design.cache.capacity == 2 * 76 and len(design.cache) == 2 * 76  # warmed up
    rng = np.random.default_rng(5)
    for t in range(8):
        dec = design.step(t, rng.normal(size=D).astype(np.float32), keys[n + t])
        i = dec.info
        extra = len(dec.selected) - min(lay.sink_tokens, n) - lay.local_window
        assert i["gpu_hits"] + i["gpu_misses"] == extra
        assert i["gpu_misses"] == i["dram_hits"] + i["ssd_entries"] == i["h2d_entries"]
        assert dec.read_bytes == i["ssd_entries"] * lay.entry_bytes
        assert dec.score_flops == 2 * D * i["centroids"]  # centroids only, on the GPU
        assert len(design.cache) <= design.cache.capacity


def test_kvdrive_packs_a_centroid_into_few_ranges():
    design, keys, lay, n = _kvdrive("lookahead", window=0)
    c = int(np.argmax([len(m) for m in design.members]))
    ranges = design.packed.extents(design.members[c], lay.entry_bytes)
    assert sum(len(e) for e in ranges) == 1  # a whole centroid: one range on one SSD
    assert sum(int(e[:, 1].sum()) for e in ranges) == len(design.members[c]) * lay.entry_bytes


def test_a_bigger_window_fetches_less():
    fetched = {}
    for w in (0, 1, 3):
        design, keys, lay, n = _kvdrive("lookahead", window=w)
        rng = np.random.default_rng(9)
        base = rng.normal(size=D).astype(np.float32)
        fetched[w] = sum(
            design.step(t, base + 0.3 * rng.normal(size=D).astype(np.float32), keys[n + t]).info[
                "h2d_entries"
            ]
            for t in range(8)
        )
    assert fetched[0] >= fetched[1] >= fetched[3] and fetched[0] > fetched[3]


def test_kvdrive_dram_only_selects_the_same_and_reads_nothing_from_ssd():
    tiered, keys, lay, n = _kvdrive("lookahead", window=1)
    dram, _, _, _ = _kvdrive("lookahead", window=1, dram_only=True)
    assert not dram.ssd_bytes().any()
    rng = np.random.default_rng(4)
    for t in range(6):  # past the local window's edge: new tokens join DRAM too
        q = rng.normal(size=D).astype(np.float32)
        a, b = tiered.step(t, q, keys[n + t]), dram.step(t, q, keys[n + t])
        assert np.array_equal(a.selected, b.selected)
        assert b.read_bytes == 0 and b.info["ssd_entries"] == 0
        assert b.info["dram_hits"] == b.info["gpu_misses"] == a.info["gpu_misses"]
        assert a.info["ssd_entries"] > 0  # the tiered design does read these misses

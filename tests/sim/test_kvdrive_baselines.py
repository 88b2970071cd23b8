"""The seed-003 baselines: the one mechanism that distinguishes each."""

import numpy as np
import scipy.sparse as sp

from sim.policies import Layout, get_design
from sim.policies.baselines.magicpig import simhash

D = 8


def _layout(**kw) -> Layout:
    base = dict(
        n_ssd=2,
        entry_bytes=256,
        key_bytes=128,
        budget=4 + 8 + 32,
        local_window=8,
        sink_tokens=4,
        dram_cache_entries=0,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    return Layout(**{**base, **kw})


def _built(name, n=512, seed=0, **params):
    keys = np.random.default_rng(seed).normal(size=(n + 4, D)).astype(np.float32)
    design = get_design(name, **params)
    act = sp.csr_matrix((16, n), dtype=bool)
    design.build(act, keys[:n], _layout(), np.random.default_rng(0))
    return design, keys, n


def test_original_attends_everything_and_moves_nothing():
    design, keys, n = _built("original")
    for t in range(3):
        dec = design.step(t, keys[t], keys[n + t])
        assert len(dec.selected) == n + t + 1 == dec.info["hbm_entries"]  # whole KV resident
        assert dec.read_bytes == 0 and dec.info["h2d_entries"] == 0


def test_shadowkv_copies_values_only_and_keeps_outliers_whole():
    design, keys, n = _built("shadowkv", chunk_size=8, rank=4, outlier_frac=0.25)
    lay = design.layout
    assert design.resident.sum() == 8 * round(0.25 * n / 8)  # whole outlier chunks
    dec = design.step(0, keys[1], keys[n])
    extra = len(dec.selected) - 12
    fetched = dec.info["h2d_entries"]
    assert fetched + dec.info["outlier_hits"] == extra
    assert dec.info["h2d_bytes"] == fetched * lay.entry_bytes / 2  # V only: K is rebuilt
    assert dec.read_bytes == 0
    # the outliers are the chunks whose keys agree least with their landmark
    k = keys[:n]
    cos = [
        np.mean(
            (k[c * 8 : c * 8 + 8] @ design.landmarks[c])
            / np.linalg.norm(k[c * 8 : c * 8 + 8], axis=1)
            / np.linalg.norm(design.landmarks[c])
        )
        for c in range(n // 8)
    ]
    assert set(design.outliers.tolist()) == set(np.argsort(cos)[: len(design.outliers)].tolist())


def test_magicpig_a_key_equal_to_the_query_collides_everywhere_and_stays_on_the_cpu():
    design, keys, n = _built("magicpig", bits=6, tables=20)
    q = keys[100].copy()
    hits = design.collisions(q)
    assert hits[100] == 20  # same signs against every plane
    assert np.all(hits <= 20)
    dec = design.step(0, q, keys[n])
    assert 100 in dec.selected
    assert dec.info["h2d_entries"] == 0  # no KV over PCIe
    assert dec.info["cpu_attn_entries"] == len(dec.selected) - 12
    codes = simhash(keys[:3], design.planes)
    assert codes.shape == (3, 20) and codes.max() < 2**6


def test_retroinfer_buffers_whole_clusters():
    design, keys, n = _built("retroinfer", cluster_size=16, estimate_clusters=3, window=4)
    q = keys[7]
    first = design.step(0, q, keys[n])
    # every chosen cluster is copied whole on the first step (more than the selection
    # when the last cluster is cut at the budget); the same query again hits them all
    assert first.info["h2d_entries"] >= first.info["gpu_misses"] > 0
    assert first.info["gpu_hits"] == 0
    again = design.step(1, q, keys[n + 1])
    assert again.info["h2d_entries"] == again.info["gpu_misses"] == 0
    assert again.info["gpu_hits"] == len(again.selected) - 12
    # the estimation zone costs compute only: 4 d FLOPs per estimated cluster
    assert again.score_flops == 2 * D * len(design.centroids) + 4 * D * 3


def test_retroinfer_clusters_segment_by_segment():
    # 512 prefix keys in segments of 200: 200, 200, 112 keys -> at most 13 + 13 + 7
    # clusters of 16 (k-means drops empty ones), and no cluster mixes two segments
    design, keys, n = _built("retroinfer", cluster_size=16, segment_tokens=200)
    seg_of = [np.unique(m // 200) for m in design.members]
    assert all(len(s) == 1 for s in seg_of)
    per_seg = np.bincount([int(s[0]) for s in seg_of], minlength=3)
    assert 0 < per_seg[0] <= 13 and 0 < per_seg[1] <= 13 and 0 < per_seg[2] <= 7
    assert sorted(np.concatenate(design.members).tolist()) == list(range(n))
    whole, _, _ = _built("retroinfer", cluster_size=16, segment_tokens=0)
    assert any(len(np.unique(m // 200)) > 1 for m in whole.members)  # one k-means: mixes


def test_quest_holds_its_kv_in_dram_and_copies_whole_pages_beyond_sinks_and_window():
    """Seed 003 Table 1: Quest's tiering is DRAM.  Nothing is read from SSD; the host
    holds every visible entry's K and V; the copy is the chosen pages' entries beyond
    the 4 sinks and 8 local tokens, which stay on the GPU."""
    design, keys, n = _built("quest", page_size=16)
    lay = design.layout
    assert design.index_bytes() == 2 * (n // 16) * lay.key_bytes  # min and max per page
    dec = design.step(0, keys[3], keys[n])
    assert dec.read_bytes == 0 and not np.any(design.ssd_bytes())
    assert design.host_bytes() == (n + 1) * lay.entry_bytes  # 513 entries x 256 B
    extra = len(dec.selected) - 12  # sinks 0-3 and the 8 newest tokens are always selected
    assert dec.info["h2d_entries"] == extra == dec.dram_entries - 12
    # whole pages fill the budget of 44: 32 entries beyond the 12 come as two pages
    assert extra == 32
    pages = {int(e) // 16 for e in np.setdiff1d(dec.selected, np.r_[0:4, n - 7 : n + 1])}
    assert len(pages) == 2

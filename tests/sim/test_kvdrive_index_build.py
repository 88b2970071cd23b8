"""KVDrive's fast (two-level) index build against the flat k-means: the
centroids partition the chunks, the group shares are worked out by hand, well
separated clusters are found exactly, and selection recall stays within 0.05
of the exact build's on a small run."""

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.policies.kvdrive.index import apportion, build_index, tree_kmeans
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.matched import mean_recall
from sim.scenarios.swarm import build_lanes, replay_lane


def test_apportion_by_largest_remainder_by_hand():
    # k=6 over sizes 5,3,2,1: shares 2.73, 1.64, 1.09, 0.55 -> floors 2,1,1,0, the
    # last raised to 1 (every group keeps a centroid) = 5; one left goes to the
    # largest remainder (0.73, group 0)
    assert apportion(np.array([5, 3, 2, 1]), 6).tolist() == [3, 1, 1, 1]
    # no group gets more centroids than members, none fewer than 1
    assert apportion(np.array([1, 1, 10]), 12).tolist() == [1, 1, 10]
    assert apportion(np.array([4, 4]), 2).tolist() == [1, 1]


def test_fast_build_centroids_cover_every_chunk_exactly_once():
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(40_000, 16)).astype(np.float32)
    idx = build_index(keys, 4, 8, np.random.default_rng(0), build="tree")
    assert idx.n_chunks == 10_000
    assert 1 < idx.n_centroids <= 1250  # ceil(10,000 / 8), empty clusters dropped
    # every chunk has one centroid and every centroid has a chunk
    assert idx.chunk_label.shape == (10_000,)
    assert np.bincount(idx.chunk_label, minlength=idx.n_centroids).min() >= 1
    # the members partition the token positions: each position once, whole chunks
    flat = np.concatenate(idx.members)
    assert np.array_equal(np.sort(flat), np.arange(40_000))
    for c in (0, idx.n_centroids // 2, idx.n_centroids - 1):
        chunks = np.flatnonzero(idx.chunk_label == c)
        want = (chunks[:, None] * 4 + np.arange(4)).ravel()
        assert np.array_equal(idx.members[c], want)
        # a centroid is the mean of its chunks' mean keys (the last Lloyd update)
        mean = idx.chunk_keys[chunks].mean(axis=0)
        np.testing.assert_allclose(idx.centroids[c], mean, rtol=1e-4, atol=1e-5)


def test_two_levels_find_well_separated_clusters_exactly():
    """16 tight blobs far apart, 50 points each: 4 coarse groups hold whole blobs,
    each group gets as many centroids as it holds blobs (its share of 16 is
    50 x blobs / 800 x 16), and each centroid is one blob."""
    rng = np.random.default_rng(5)
    centres = 100.0 * rng.normal(size=(16, 8))
    blob = np.repeat(np.arange(16), 50)
    x = (centres[blob] + 0.01 * rng.normal(size=(800, 8))).astype(np.float32)
    c, labels = tree_kmeans(x, 16, np.random.default_rng(0), leaf=4)
    assert len(c) == 16
    for b in range(16):  # one label per blob, a different one for every blob
        assert len(np.unique(labels[blob == b])) == 1
    assert len(np.unique(labels)) == 16
    np.testing.assert_allclose(c[labels], centres[blob], atol=0.05)


@pytest.mark.parametrize("trace", ["positional", "smollm2-fitted"])
def test_fast_build_recall_within_005_of_the_exact_build(trace):
    """12K prefix: 3,076 chunks, 385 centroids (> LEAF, so the two-level build
    runs): the mean recall at the oracle's budget moves by at most 0.05."""
    l20 = load_profile("l20-server")
    recall = {}
    for build in ("exact", "tree"):
        p = KVDriveParams(
            context_tokens=12288,
            batch=2,
            steps=4,
            profile_steps=16,
            layers=2,
            trace=trace,
            design_params={"index_build": build},
        )
        _, layout, built = build_lanes(p, l20, 0)
        assert built[(0, 0)].design.index.n_centroids == 385  # ceil(12,304 / 4 / 8)
        recall[build] = mean_recall(replay_lane(b, p, layout) for b in built.values())
    assert 0.2 < recall["exact"] < 1.0
    assert abs(recall["tree"] - recall["exact"]) <= 0.05

"""The steady-state arithmetic of analysis/kvdrive_steady.py and the unit a
baseline's lookahead scores by, on hand-made counts and designs."""

from types import SimpleNamespace

import numpy as np
import pytest

from analysis.kvdrive_steady import blocks, steady
from sim.scenarios.kvdrive_table3 import unit_labels, unit_scores


def test_blocks_and_the_steady_state_by_hand():
    # 16 steps at 8 of 16 hits, then 32 at 12 of 16: blocks 50 / 75 / 75%
    hits = np.array([8.0] * 16 + [12.0] * 32)
    misses = np.array([8.0] * 16 + [4.0] * 32)
    assert blocks(hits, misses) == pytest.approx([0.5, 0.75, 0.75])
    pooled, slope = steady(hits, misses)  # the warm-up block left out
    assert pooled == pytest.approx(0.75) and slope == pytest.approx(0.0)


def test_a_rising_rate_has_a_positive_slope():
    hits = np.array([4.0] * 16 + [8.0] * 16 + [12.0] * 16)
    misses = 16.0 - hits
    pooled, slope = steady(hits, misses)
    assert pooled == pytest.approx(20 / 32) and slope == pytest.approx(0.25)  # 50 -> 75%


def test_units_are_pages_chunks_or_clusters():
    quest = SimpleNamespace(params=SimpleNamespace(page_size=4))
    shadow = SimpleNamespace(params=SimpleNamespace(chunk_size=2))
    retro = SimpleNamespace(params=SimpleNamespace(), members=[np.array([0, 3]), np.array([1])])
    assert unit_labels(quest, 6).tolist() == [0, 0, 0, 0, 1, 1]
    assert unit_labels(shadow, 5).tolist() == [0, 0, 1, 1, 2]
    assert unit_labels(retro, 4).tolist() == [0, 1, 2 + 2, 0]  # token 2 in no cluster


def test_a_unit_scores_as_its_mean_key_or_its_page_bound():
    keys = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    q = np.array([1.0, 1.0], dtype=np.float32)
    shadow = SimpleNamespace(params=SimpleNamespace(chunk_size=2))
    # chunks {0, 1}: q.k 1 and 3, mean 2; {2, 3}: 2 and -2, mean 0
    assert unit_scores(shadow, keys, unit_labels(shadow, 4), q).tolist() == [2, 2, 0, 0]
    quest = SimpleNamespace(params=SimpleNamespace(page_size=2))
    # page {2, 3}: channel 0 in [0, 0], channel 1 in [-2, 2]: bound 0 + 2 = 2
    assert unit_scores(quest, keys, unit_labels(quest, 4), q).tolist() == [3, 3, 2, 2]

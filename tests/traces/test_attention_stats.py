"""Attention statistics on hand-made traces whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from traces import attention_stats as st
from traces.access import AccessMeta, AccessTrace


def make_trace(rows: list[list[int]], scores=None, context=20, params=(), heads=1) -> AccessTrace:
    """One layer, ``heads`` heads, no sinks or window: rows are (step, head)-major."""
    steps = len(rows) // heads
    meta = AccessMeta("toy", context, 1, heads, steps, 0.2, 0, 0, "test", 0, params)
    offsets = np.cumsum([0] + [len(r) for r in rows])
    flat = np.concatenate([np.sort(r) for r in rows]).astype(np.int32)
    sc = None if scores is None else np.concatenate(scores)
    trace = AccessTrace(meta, offsets, flat, sc)
    trace.validate()
    return trace


def test_two_entries_always_together_have_jaccard_one() -> None:
    # entries 3 and 7 together in 6 of 8 steps; 11 alone in 4 of them
    rows = [[3, 7, 11], [3, 7], [3, 7, 11], [1], [3, 7, 11], [3, 7], [3, 7, 11], [2]]
    X = st.dense_activations(make_trace(rows))
    c = st.coactivation(X, st.StatsParams(sample=10, min_joint=2))
    assert c["candidates"] == 3  # 1 and 2 are selected once: not candidates
    jac = c["jaccard"].reshape(3, 2)  # rows: 3, 7, 11; columns: the two others
    assert jac[0, 0] == 1.0  # 3 with 7
    assert jac[0, 1] == pytest.approx(4 / 6)  # 3 with 11: 4 joint of 6 + 4 - 4
    assert c["p_pairs"].reshape(3, 2)[0, 0] == pytest.approx(6 / 8)  # A_37 / T
    assert list(c["partners"]) == [2, 2, 2]  # all pairs at Jaccard >= 0.5


def test_strong_partners_need_min_joint() -> None:
    rows = [[3, 7], [3, 7], [1], [2]]
    X = st.dense_activations(make_trace(rows))
    assert list(st.coactivation(X, st.StatsParams(min_joint=3))["partners"]) == [0, 0]
    assert list(st.coactivation(X, st.StatsParams(min_joint=2))["partners"]) == [1, 1]


def test_groups_beat_the_permutation_null() -> None:
    rng = np.random.default_rng(1)
    groups = np.arange(100).reshape(10, 10)  # 10 groups of 10 entries
    rows = [list(groups[g]) for g in rng.integers(0, 10, size=200)]
    s = st.coactivation_summary(st.dense_activations(make_trace(rows, context=120)))
    assert s["partners_mean"] == 9  # every entry: the 9 others of its group
    assert s["null_partners_mean"] < 1  # permuted in time, groups dissolve
    assert s["best_jaccard"] == 1.0


def test_overlap_next_disjoint_is_zero_and_identical_is_one() -> None:
    X = st.dense_activations(make_trace([[1, 2], [3, 4], [3, 4], [3, 5]]))
    assert list(st.overlap_next(X)) == [0.0, 1.0, 0.5]


def test_window_reload_of_alternating_sets() -> None:
    rows = [[1, 2], [3, 4]] * 6  # A B A B ...: one step back misses, two steps back hold it
    out = st.window_reload(st.dense_activations(make_trace(rows)), windows=(0, 1, 2, 3))
    assert out[0] == (1.0, 0.0)
    assert out[1] == (1.0, 1.0)  # nothing reused; window = one budget
    assert out[2] == (0.0, 2.0)  # all reused; window = two budgets
    assert out[3] == (0.0, 2.0)


def test_topm_next_ranks_by_score() -> None:
    rows = [[1, 2, 3, 4], [1, 5, 6, 7]]
    scores = [np.array([0.9, 0.1, 0.1, 0.1]), np.array([0.4, 0.3, 0.2, 0.1])]
    out = st.topm_next(make_trace(rows, scores), 0, 0, fractions=(0.25, 1.0))
    assert out[0.25] == 1.0  # step 0's top 1 (entry 1) is selected at step 1
    assert out[1.0] == 0.25  # 1 of its 4 entries is


def test_attention_mass_of_a_capture() -> None:
    params = (("aggregation", "sum-softmax"), ("heads_per_kv_head", 2))
    meta = AccessMeta("toy", 8, 1, 1, 1, 0.5, 2, 1, "capture", 0, params)
    # visible 0..8; forced: sink 0, window 7 8; plus 4
    trace = AccessTrace(meta, [0, 4], [0, 4, 7, 8], np.array([0.2, 0.6, 0.4, 0.4]))
    trace.validate()
    sel, forced = st.attention_mass(trace, 0, 0)
    assert sel == pytest.approx(1.6 / 2, abs=1e-3)  # float16 scores
    assert forced == pytest.approx(1.0 / 2, abs=1e-3)


def test_heterogeneity_layer_share() -> None:
    df = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "x": [1.0, 1.0, 3.0, 3.0]})
    h = st.heterogeneity(df, ["x"])
    assert h.loc["x", "layer_share_of_variance"] == 1.0
    assert h.loc["x", "min"] == 1.0 and h.loc["x", "max"] == 3.0


def test_cross_stability_of_identical_and_shifted_tables() -> None:
    a = pd.DataFrame({"layer": [0, 1, 2], "head": [0, 0, 0], "x": [0.1, 0.5, 0.9]})
    b = a.assign(x=a["x"] + 0.1)
    c = st.cross_stability(a, b, ["x"])
    assert c.loc["x", "pearson"] == pytest.approx(1.0)
    assert c.loc["x", "mean_abs_diff"] == pytest.approx(0.1)


def test_pair_persistence_of_stable_and_changing_pairs() -> None:
    stable = [[3, 7], [3, 7], [1], [3, 7], [3, 7], [2]] * 2
    out = st.pair_persistence(st.dense_activations(make_trace(stable)), 6, st.StatsParams())
    assert out["strong_pairs"] == 2  # (3, 7) and (7, 3)
    assert out["still_strong"] == 1.0
    changing = [[3, 7], [3, 7], [3, 7], [3, 7], [3, 9], [7, 8], [3, 9], [7, 8]]
    out = st.pair_persistence(st.dense_activations(make_trace(changing)), 4, st.StatsParams())
    assert out["still_strong"] == 0.0 and out["later_jaccard"] == 0.0


def test_per_head_covers_every_head() -> None:
    rows = [[1, 2], [3, 4], [1, 2], [3, 5], [1, 2], [3, 4]]  # (step, head)-major, 2 heads
    df = st.per_head(make_trace(rows, heads=2))
    assert list(zip(df["layer"], df["head"], strict=True)) == [(0, 0), (0, 1)]
    assert list(df["overlap_next"]) == [1.0, 0.5]

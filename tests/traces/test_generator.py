"""The latent-group access generator: selection arithmetic, determinism, structure, scale."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import traces.generator as generator_module
from traces import PRESETS, AccessGenerator, GeneratorParams, generate, trace_stats
from traces.access import forced_ids, selection_budget
from traces.generator import membership_pmf

# -- selection arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "steps", "sparsity", "window", "sink"),
    [(1000, 12, 0.1, 32, 4), (300, 5, 0.25, 0, 0), (200, 4, 0.1, 64, 8), (50, 30, 1.0, 3, 1)],
)
def test_selection_sizes_sinks_and_window(n, steps, sparsity, window, sink):
    gen = AccessGenerator(
        GeneratorParams(), n, steps, layers=2, sparsity=sparsity,
        local_window=window, sink_tokens=sink, seed=1,
    )  # fmt: skip
    trace = gen.trace()
    trace.validate()
    for layer in range(2):
        for t in range(steps):
            sel = trace.selection(t, layer)
            visible = n + t + 1
            forced = forced_ids(visible, sink, window)
            want = max(selection_budget(n, t, sparsity), len(forced))
            assert len(sel) == min(want, visible)
            assert np.isin(np.arange(min(sink, visible)), sel).all()
            assert np.isin(np.arange(max(0, visible - window), visible), sel).all()
            assert sel.dtype == np.int32 and (np.diff(sel) > 0).all() and sel[-1] < visible


def test_forced_larger_than_budget():
    # budget round(0.1 * 200) = 20 < 8 sinks + 64 window: exactly the forced ids
    gen = AccessGenerator(GeneratorParams(), 200, 3, local_window=64, sink_tokens=8)
    for t in range(3):
        assert np.array_equal(gen.oracle(t), forced_ids(201 + t, 8, 64))


def test_oracle_is_brute_force_top_k():
    n, steps, window, sink = 300, 6, 16, 2
    gen = AccessGenerator(
        GeneratorParams(), n, steps, sparsity=0.2, local_window=window, sink_tokens=sink, seed=5
    )
    keys, queries = gen.keys().astype(np.float64), gen.queries().astype(np.float64)
    trace = gen.trace()
    for t in range(steps):
        visible = n + t + 1
        scores = gen.scores(t)
        assert scores.shape == (visible,)
        np.testing.assert_allclose(scores, keys[:visible] @ queries[t], rtol=1e-12, atol=1e-12)
        forced = set(range(sink)) | set(range(visible - window, visible))
        rest = [i for i in range(visible) if i not in forced]
        k = selection_budget(n, t, 0.2) - len(forced)
        best = sorted(rest, key=lambda i: -scores[i])[:k]
        assert gen.oracle(t).tolist() == sorted(forced | set(best))
        assert np.array_equal(trace.selection(t), gen.oracle(t))


def test_chunked_trace_equals_per_step_oracle(monkeypatch):
    gen = generate("default", 2000, 9, layers=2, kv_heads=2, local_window=32, seed=2)
    whole = gen.trace(with_scores=True)
    # a chunk budget so small that every chunk holds one or two steps
    monkeypatch.setattr(generator_module, "_CHUNK_BYTES", 16 * 2009 * 2)
    calls = []
    chunked = gen.trace(with_scores=True, progress=lambda done, total: calls.append((done, total)))
    assert chunked == whole
    assert calls[-1] == (9 * 2 * 2, 9 * 2 * 2)
    assert len(calls) == 2 * 2 * 5
    for layer in range(2):
        for head in range(2):
            for t in range(9):
                assert np.array_equal(whole.selection(t, layer, head), gen.oracle(t, layer, head))
    # scores are q . k of the selected entries, stored as float16
    sel = whole.selection(4, 1, 1)
    row = (4 * 2 + 1) * 2 + 1
    got = whole.scores[whole.offsets[row] : whole.offsets[row + 1]].astype(np.float64)
    np.testing.assert_allclose(got, gen.scores(4, 1, 1)[sel], rtol=2e-3, atol=2e-3)


# -- determinism -----------------------------------------------------------------------------


def test_same_seed_same_trace_other_seed_or_layer_differs():
    def make(seed):
        return generate("default", 1500, 8, layers=2, local_window=32, seed=seed)

    a, b, c = make(3).trace(), make(3).trace(), make(4).trace()
    assert a == b
    assert not np.array_equal(a.indices, c.indices)
    g = make(3)
    assert np.array_equal(g.keys(0), make(3).keys(0))
    assert not np.array_equal(g.keys(0), g.keys(1))
    assert not np.array_equal(a.selection(0, 0), a.selection(0, 1))


def test_prefix_keys_do_not_depend_on_steps():
    short, long = (generate("default", 1000, s, seed=9) for s in (2, 50))
    assert np.array_equal(short.keys()[:1000], long.keys()[:1000])
    assert np.array_equal(short.memberships()[:1000].toarray(), long.memberships()[:1000].toarray())


# -- co-activation structure -----------------------------------------------------------------

N, T, WINDOW, SINK = 4096, 400, 64, 4


def sharing_pair_coactivation(gen: AccessGenerator, n_pairs: int = 20000, nulls: int = 30):
    """Mean P(i and j active) over pairs sharing a latent group, and its null distribution.

    Pairs are drawn uniformly from all pairs of prefix entries that share a group
    (entries always selected -- sinks and window -- are left out).  The null
    relabels entries by a random permutation: the same pair multiplicities, no
    relation to the groups.  Returns (observed, null mean, null std).
    """
    x = gen.trace().activations().tocsc()[:, SINK : N - WINDOW].astype(np.float32)
    m = gen.memberships()[SINK : N - WINDOW].tocsc()
    rng = np.random.default_rng(0)
    sizes = np.diff(m.indptr)
    pairs_per_group = sizes * (sizes - 1.0)
    groups = rng.choice(len(sizes), size=n_pairs, p=pairs_per_group / pairs_per_group.sum())
    first = rng.integers(0, sizes[groups])
    second = (first + rng.integers(1, sizes[groups])) % sizes[groups]
    a = m.indices[m.indptr[groups] + first]
    b = m.indices[m.indptr[groups] + second]

    def joint(i, j):
        return float(x[:, i].multiply(x[:, j]).sum()) / (T * len(i))

    null = []
    for _ in range(nulls):
        perm = rng.permutation(x.shape[1])
        null.append(joint(perm[a], perm[b]))
    return joint(a, b), float(np.mean(null)), float(np.std(null))


def test_default_entries_sharing_a_group_coactivate_far_above_chance():
    gen = generate("default", N, T, local_window=WINDOW, sink_tokens=SINK)
    observed, null, spread = sharing_pair_coactivation(gen)
    assert observed > 5 * null
    assert observed - null > 20 * spread


def test_unstructured_sharing_a_group_is_chance():
    gen = generate("unstructured", N, T, local_window=WINDOW, sink_tokens=SINK)
    observed, null, spread = sharing_pair_coactivation(gen)
    assert abs(observed - null) < 4 * spread
    assert abs(observed / null - 1) < 0.1


def test_weak_structure_lies_between():
    stats = {
        p: trace_stats(generate(p, N, T, local_window=WINDOW, sink_tokens=SINK).trace())
        for p in ("default", "weak", "unstructured")
    }
    chi2 = [stats[p]["coact_chi2"] for p in ("default", "weak", "unstructured")]
    assert chi2[0] > chi2[1] > chi2[2]
    assert stats["default"]["coact_chi2"] > 3 * stats["unstructured"]["coact_chi2"]


def test_slow_drift_keeps_selections_stable():
    def jaccard(drift):
        gen = generate("default", N, T, local_window=WINDOW, drift=drift)
        return trace_stats(gen.trace())["overlap_jaccard"]

    slow, fast = jaccard(0.01), jaccard(0.5)
    assert slow > fast + 0.2


def test_active_groups_drift():
    gen = generate("default", 2000, 2000, drift=0.1, active_groups=5, seed=1)
    active = gen.active()
    assert active.shape == (2000, 5)
    assert all(len(set(row)) == 5 for row in active)  # distinct groups in every mix
    changed = (active[1:] != active[:-1]).mean()
    assert changed == pytest.approx(0.1, abs=0.01)
    still = generate("default", 2000, 50, drift=0.0).active()
    assert (still == still[0]).all()


# -- memberships -----------------------------------------------------------------------------


def test_membership_counts_heavy_tail():
    gen = generate("default", 20000, 0, seed=0)
    counts = np.diff(gen.memberships().indptr)
    assert counts.min() >= 1
    assert counts.max() >= 10
    assert counts.mean() == pytest.approx(PRESETS["default"].memberships_mean, rel=0.05)
    assert gen.n_groups == round(20000 * 1.3 / 64)
    sizes = np.bincount(gen.memberships().indices, minlength=gen.n_groups)
    assert sizes.mean() == pytest.approx(counts.sum() / gen.n_groups)


def test_membership_pmf_mean_and_tail():
    pmf = membership_pmf(1.3, 2.0, 5000)
    k = np.arange(1, 5001)
    assert pmf.sum() == pytest.approx(1.0)
    assert (pmf * k).sum() == pytest.approx(1.3, rel=1e-9)
    survival = pmf[::-1].cumsum()[::-1]  # P(count >= k)
    assert survival[199] / survival[99] == pytest.approx(2.0**-2.0, rel=0.05)
    heavier = membership_pmf(3.0, 2.0, 5000)
    assert (heavier * k).sum() == pytest.approx(3.0, rel=1e-9)
    assert membership_pmf(1.0, 2.0, 10).tolist() == [1.0] + [0.0] * 9


def test_new_tokens_join_groups_or_not():
    with_groups = generate("default", 1000, 20, seed=1)
    without = generate("default", 1000, 20, seed=1, new_token_groups=False)
    assert (np.diff(with_groups.memberships().indptr)[1000:] >= 1).all()
    assert np.diff(without.memberships().indptr)[1000:].sum() == 0
    assert np.array_equal(with_groups.keys()[:1000], without.keys()[:1000])
    without.trace().validate()


def test_unstructured_keys_carry_no_group_signal():
    gen = generate("unstructured", 3000, 0, seed=2)
    m = gen.memberships()
    keys = gen.keys().astype(np.float64)
    centroid_of_members = (m.T @ keys) / np.maximum(np.diff(m.tocsc().indptr), 1)[:, None]
    # member keys of a group average to ~0 (noise only): |mean| ~ 1 / sqrt(size)
    big = np.diff(m.tocsc().indptr) >= 30
    norms = np.linalg.norm(centroid_of_members[big], axis=1)
    assert norms.max() < 0.5
    structured = generate("default", 3000, 0, seed=2)
    ks = structured.keys().astype(np.float64)
    norms_s = np.linalg.norm((m.T @ ks)[big] / np.diff(m.tocsc().indptr)[big, None], axis=1)
    assert norms_s.min() > 0.3


# -- API -------------------------------------------------------------------------------------


def test_generate_presets_and_overrides():
    assert {"default", "unstructured", "weak"} <= set(PRESETS)
    assert PRESETS["unstructured"].structure == 0.0
    assert PRESETS["weak"].structure == 0.4
    assert generate("weak", 100, 1).trace().meta.source == "generator:weak"
    gen = generate("default", 100, 1, drift=0.01)
    assert gen.params.drift == 0.01
    assert gen.trace().meta.source == "generator:default+drift=0.01"
    assert AccessGenerator(PRESETS["default"], 100, 1).trace().meta.source == "generator:default"
    with pytest.raises(KeyError, match="unknown access-trace preset"):
        generate("nope", 100, 1)
    with pytest.raises(TypeError, match="colour"):
        generate("default", 100, 1, colour=3)
    with pytest.raises(ValueError, match="structure"):
        GeneratorParams(structure=1.5)
    with pytest.raises(IndexError):
        gen.oracle(1)


# -- scale -----------------------------------------------------------------------------------


def test_million_token_context():
    tracemalloc.start()
    try:
        gen = generate("default", 1_000_000, 2, seed=0)
        trace = gen.trace()
        trace.validate()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert gen.keys().shape == (1_000_002, 64) and gen.keys().dtype == np.float32
    assert [len(trace.selection(t)) for t in range(2)] == [100_000, 100_000]
    assert peak < 1.5 * 2**30  # bounded memory: keys are 256 MB, scores go in chunks


def test_positional_part_changes_key_geometry_not_selections():
    base = AccessGenerator(PRESETS["default"], 2048, steps=8, seed=3)
    pos = AccessGenerator(PRESETS["positional"], 2048, steps=8, seed=3)
    tb, tp = base.trace(), pos.trace()  # queries are 0 on the extra columns
    assert np.array_equal(tb.offsets, tp.offsets) and np.array_equal(tb.indices, tp.indices)
    assert tp.meta.source == "generator:positional"
    kb, kp = base.keys(), pos.keys()
    assert kp.shape == (kb.shape[0], kb.shape[1] + 8)
    assert np.array_equal(kp[:, : kb.shape[1]], kb)
    extra = kp[:, kb.shape[1] :].astype(np.float64)
    assert np.mean((extra**2).sum(axis=1)) == pytest.approx(2.0, rel=0.1)  # its energy
    # neighbours in position are near in key space, far-apart tokens are not
    near = np.linalg.norm(extra[1:] - extra[:-1], axis=1).mean()
    far = np.linalg.norm(extra[1024:] - extra[:-1024], axis=1).mean()
    assert near < 0.05 * far

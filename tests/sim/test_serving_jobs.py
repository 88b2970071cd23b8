"""Store pieces worked out per layout pair equal the per-entry definition.

The reference is the entry-by-entry loop (every destination run of every
entry intersected with its source runs, bytes summed in that order): the
pieces must come in the same order, with the same bytes (exactly) and the
same ranges, for stores from the GPU and copies between tiers of several
devices whose entries are laid out differently.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.serving.policy.jobs import Piece, _layer_runs, load_pieces, store_pieces
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.layout import layer_stride


def reference(src, dst, entries, gpu: str) -> list[tuple[str, str, float, list]]:
    per: dict[tuple[str, str], float] = {}
    ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
    stride = layer_stride(dst.layer_bytes)
    for e in entries:
        src_runs = src.entries[e.key].runs if src is not None else ((-1, 0, dst.layers),)
        for (dd, d0, d1), slot in zip(e.runs, e.slots, strict=True):
            for sd, s0, s1 in src_runs:
                lo, hi = max(d0, s0), min(d1, s1)
                if hi > lo:
                    k = (src.devices[sd] if src is not None else gpu, dst.devices[dd])
                    per[k] = per.get(k, 0.0) + (hi - lo) * dst.layer_bytes
                    for layer in range(lo, hi):
                        at = slot + (layer - d0) * stride
                        ranges.setdefault(k, []).append((at, int(round(dst.layer_bytes))))
    return [(a, b, n, ranges[(a, b)]) for (a, b), n in per.items()]


@pytest.mark.parametrize("layer_bytes", [8192, 1000])  # a 4 KiB multiple, and not
@pytest.mark.parametrize("seed", [1, 2])
def test_store_pieces_equal_the_per_entry_loop(seed: int, layer_bytes: int) -> None:
    rng = np.random.default_rng(seed)
    layers = 32
    src = OffloadTier("cpu", ["m0", "m1"], [0.3, 0.7], [1e12, 1e12], layers, layer_bytes)
    dst = OffloadTier("ssd", ["s0", "s1", "s2"], [0.5, 0.2, 0.3], [1e12] * 3, layers, layer_bytes)
    for _ in range(20):
        keys = [int(k) for k in rng.choice(10**6, int(rng.integers(1, 30)), replace=False)]
        above = src.place(keys, None)  # sets of different sizes: different layouts
        rng.shuffle(above)
        half = above[: max(1, len(above) // 2)]
        below = dst.place([e.key for e in half], None)
        for a, b, entries in ((None, src, above), (src, dst, below), (None, dst, below)):
            pieces = store_pieces(a, b, entries, "gpu0")
            got = [(p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in pieces]
            assert got == reference(a, b, entries, "gpu0")
            assert all_ranges_are_length(pieces)
    pairs = {(src.entries[k].runs, e.runs) for k, e in dst.entries.items()}
    assert len(pairs) > 3  # the comparison saw several layout pairs


def test_one_device_tiers_store_pieces_equal_the_per_entry_loop() -> None:
    """Between one-device tiers (and from the GPU into one) the layout pair is
    known without reading the entries (every entry all layers on device 0):
    the pieces still equal the per-entry loop, whose source runs it reads
    off each entry, for entries placed by eviction and write-through alike."""
    rng = np.random.default_rng(5)
    layers, lb = 32, 4096.0
    cap = 40 * layers * lb  # 40 blocks: placing more evicts (keys placed where their victims were)
    src = OffloadTier("cpu", ["m0"], [1.0], [cap], layers, lb)
    dst = OffloadTier("ssd", ["s0"], [1.0], [2 * cap], layers, lb)
    for _ in range(12):
        keys = [int(k) for k in rng.choice(10**6, int(rng.integers(1, 30)), replace=False)]
        above = src.place(keys, None)
        src.complete_all(above)  # ready and evictable
        below = dst.place([e.key for e in above], None)
        dst.complete_all(below)
        for a, b, entries in ((None, src, above), (src, dst, below)):
            pieces = store_pieces(a, b, entries, "gpu0")
            got = [(p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in pieces]
            assert got == reference(a, b, entries, "gpu0")
    assert src.evictions > 0 and dst.evictions > 0  # renewed victims were among them


@pytest.mark.parametrize("seed", [3, 4])
def test_deferred_store_ranges_equal_the_per_entry_loop(seed: int) -> None:
    """A store piece whose ranges are made when first read (integral layer
    bytes) gives, before making them, the range count of the per-entry loop,
    and then that loop's ends, bytes (exactly) and ranges, even when the
    caller's list of entries changes after the call."""
    rng = np.random.default_rng(seed)
    src = OffloadTier("cpu", ["m0", "m1"], [0.3, 0.7], [1e12, 1e12], 32, 8192.0)
    dst = OffloadTier("ssd", ["s0", "s1", "s2"], [0.5, 0.2, 0.3], [1e12] * 3, 32, 8192.0)
    for _ in range(10):
        keys = [int(k) for k in rng.choice(10**6, int(rng.integers(2, 40)), replace=False)]
        above = src.place(keys, None)
        below = dst.place([e.key for e in above[: max(2, len(above) // 2)]], None)
        rng.shuffle(below)
        for a, b, entries in ((None, src, above), (src, dst, below)):
            want = reference(a, b, entries, "gpu0")
            given = list(entries)
            later = store_pieces(a, b, given, "gpu0")
            counts = [p.ranges for p in later]  # before any range is made
            assert counts == [len(w[3]) for w in want]
            assert sum(counts) == 32 * len(entries)  # every layer of every entry, once
            given.reverse()  # the caller's list changes before the ranges are read
            got = [(p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in later]
            assert got == want
            assert all(p.extents.dtype == np.int64 for p in later)


def all_ranges_are_length(pieces: list[Piece]) -> bool:
    """Every piece's ``length`` is the length of each of its ranges."""
    return all(p.length > 0 and bool((p.extents[:, 1] == p.length).all()) for p in pieces)


@pytest.mark.parametrize("layerwise", [False, True])
def test_load_pieces_name_the_length_of_their_ranges(layerwise: bool) -> None:
    """A load's pieces (per entry run, or per layer and device) carry the one
    length all their ranges have: a layer of an offload block, 1000 B."""
    tier = OffloadTier("ssd", ["s0", "s1"], [0.4, 0.6], [1e12, 1e12], 8, 1000)
    placed = tier.place(list(range(7)), None)
    pieces = load_pieces([(tier, e, 0, 1) for e in placed], "gpu0", layerwise)
    assert pieces and all_ranges_are_length(pieces)
    assert {p.length for p in pieces} == {1000}


def test_io_totals_from_the_common_length_equal_the_reduction() -> None:
    """:func:`transfers._totals` from ``length`` (Python ints) equals
    :func:`extent_totals` over the array, for I/O sizes below, at, above and
    not dividing the range length, and for one I/O per range."""
    from kvtier.contracts.plan import extent_totals
    from sim.serving.execute.transfers import _totals

    ext = np.array([[0, 12288], [65536, 12288], [8192, 12288]], dtype=np.int64)
    for iob in (0, 4096, 5000, 12288, 1 << 20):
        assert _totals(None, 3, 12288, iob) == extent_totals(ext, iob)
        assert _totals(ext, 3, 0, iob) == extent_totals(ext, iob)
    assert _totals(None, 3, 12288, 5000) == (3 * 12288, 9)  # ceil(12288 / 5000) = 3 per range


def test_non_layerwise_load_is_one_piece_per_device_of_every_hit() -> None:
    """Without layer-wise pipelining a load is one piece per device: its
    ranges are each hit's :meth:`OffloadTier.layer_extents` on that device,
    entry by entry in hit order, and its bytes their sum (7 entries over two
    devices of 8 layers, 1000 B per layer: 56 ranges, 56,000 B in all)."""
    tier = OffloadTier("ssd", ["s0", "s1"], [0.4, 0.6], [1e12, 1e12], 8, 1000.0)
    placed = tier.place(list(range(7)), None)
    pieces = load_pieces([(tier, e, 0, 1) for e in placed], "gpu0", False)
    assert [p.src for p in pieces] == ["s0", "s1"] and all(p.layer == -1 for p in pieces)
    for d, p in enumerate(pieces):
        runs = [(e, l0, l1) for e in placed for dd, l0, l1 in e.runs if dd == d]
        want = [tier.layer_extents(e, d, l0, l1) for e, l0, l1 in runs]
        assert np.array_equal(p.extents, np.concatenate(want))
        assert p.nbytes == float(p.extents[:, 1].sum())
    assert sum(p.nbytes for p in pieces) == 7 * 8 * 1000.0


@pytest.mark.parametrize("uniform", [True, False])
def test_layer_runs_are_one_range_per_layer(uniform: bool) -> None:
    """``_layer_runs`` (a broadcast add when every entry has as many layers,
    else repeat/cumsum) against the ranges written out one layer at a time:
    entry i's layer l at ``first[i] + l * stride``, each ``length`` long."""
    rng = np.random.default_rng(5 + uniform)
    first = rng.integers(0, 1 << 40, 300, dtype=np.int64)
    count = np.full(300, 32) if uniform else rng.integers(0, 33, 300)
    stride, length = 135168, 131072
    want = [
        (int(f) + layer * stride, length)
        for f, c in zip(first, count, strict=True)
        for layer in range(c)
    ]
    got = _layer_runs(first, count, stride, length)
    assert got.dtype == np.int64 and got.shape == (len(want), 2)
    assert [tuple(r) for r in got.tolist()] == want


@pytest.mark.parametrize("layerwise", [False, True])
@pytest.mark.parametrize("layout", ["one device", "pool", "two tiers"])
def test_uniform_load_pieces_equal_the_loops(
    layerwise: bool, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Load pieces (hits of one tier and one layout by broadcast) against the
    per-hit loops (``_device_pieces``, ``_layer_pieces``) on seeded random
    hits: the same pieces in the same order, bytes (exactly), layers, lengths
    and ranges; and the broadcast path did run where every hit has one layout."""
    import sim.serving.policy.jobs as jobs

    rng = np.random.default_rng(len(layout) + layerwise)
    a = OffloadTier("cpu", ["c0"], [1.0], [1e12], 8, 1000)
    b = OffloadTier("ssd", ["s1", "s0"], [0.4, 0.6], [1e12, 1e12], 8, 1000.0)
    tiers = {"one device": [a], "pool": [b], "two tiers": [a, b]}[layout]
    for t in tiers:  # slots scattered by drops
        placed = t.place(list(range(60)), None)
        t.complete_all(placed)
        for e in [e for e in placed if rng.random() < 0.3]:
            t.drop([e], None)
        t.place(list(range(100, 140)), None)
    calls = {"uniform": 0}
    real = jobs._uniform_pieces

    def counted(*args):
        calls["uniform"] += 1
        return real(*args)

    monkeypatch.setattr(jobs, "_uniform_pieces", counted)
    for _ in range(20):
        hits = []
        for j in range(int(rng.integers(1, 30))):
            t = tiers[int(rng.integers(len(tiers)))]
            keys = list(t.entries)
            hits.append((t, t.entries[keys[int(rng.integers(len(keys)))]], j, 1))
        loops = jobs._layer_pieces if layerwise else jobs._device_pieces
        got = [load_pieces(hits, "gpu0", layerwise), loops(hits, "gpu0")]
        assert len(got[0]) == len(got[1]) > 0
        for p, q in zip(*got, strict=True):
            assert (p.src, p.dst, p.nbytes, p.layer, p.length) == (
                q.src,
                q.dst,
                q.nbytes,
                q.layer,
                q.length,
            )
            assert p.extents.dtype == q.extents.dtype and np.array_equal(p.extents, q.extents)
    assert calls["uniform"] >= (20 if layout == "one device" else 1)

"""One entry's pieces from a template, and the plan they make.

Every victim paged-cpu-ssd's CPU tier demotes has its pieces made alone, as
does a store of one block: from a template per layout pair
(:mod:`sim.serving.policy.onepiece`).  The template gives exactly the
per-layer reference loop's pieces for entries of several layouts; in a
seeded eviction-heavy run, every op of the plan moves exactly the bytes its
byte ranges name, and the op records and the plan agree op for op.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.bench import mooncake_requests
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.policy import manager, onepiece
from sim.serving.policy.jobs import store_pieces
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.entry import Entry
from tests.sim.test_serving_jobs import reference


def _run(n: int, block: int, tiers: dict[str, float]) -> tuple[pa.Table, pa.Table, pa.Table]:
    profile = load_profile("h100-2dimm-2ssd")
    card = get_model("Llama-3.1-8B")
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=True)  # fmt: skip
    eng = build_engine(profile, card, get_design("paged-cpu-ssd", tiers), cfg,
                       mooncake_requests(n, block, 0))  # fmt: skip
    rec = eng.run(None)
    return rec.requests, rec.ops, eng.ops.plan()


SMALL = [(60, 16, {"cpu_gib": 0.2, "ssd_gib": 2.0}), (120, 256, {"cpu_gib": 0.3, "ssd_gib": 2.0})]


@pytest.mark.parametrize("n, block, tiers", SMALL)
def test_drains_plan_ops_move_the_bytes_their_ranges_name(monkeypatch, n, block, tiers) -> None:
    calls = [0]  # victims demoted
    real = manager.demotion_transfers

    def counted(decided):
        calls[0] += sum(len(news) for _t, _b, news, _p in decided)
        return real(decided)

    monkeypatch.setattr(manager, "demotion_transfers", counted)
    requests, ops, plan = _run(n, block, tiers)
    assert calls[0] > 10  # victims were demoted
    assert requests.num_rows == n and ops.num_rows == plan.num_rows
    assert ops.column("op_id").to_pylist() == plan.column("op_id").to_pylist()
    assert ops.column("bytes").to_pylist() == plan.column("bytes").to_pylist()
    ranges = 0
    for nbytes, ext in zip(plan.column("bytes").to_pylist(), plan.column("extents").to_pylist(),
                           strict=True):  # fmt: skip
        if ext:
            ranges += len(ext)
            assert sum(r["length"] for r in ext) == nbytes
            assert all(r["offset"] >= 0 and r["length"] > 0 for r in ext)
    # every demoted victim's ranges are written by some op (a job's victims share one)
    assert ranges >= calls[0]


@pytest.mark.parametrize("layer_bytes", [8192, 1000])  # a 4 KiB multiple, and not
def test_template_pieces_equal_the_per_layer_loop(layer_bytes: int) -> None:
    """One entry at a time, from the GPU and between tiers of several devices:
    the template's pieces equal :func:`reference` (order, bytes exactly,
    ranges)."""
    rng = np.random.default_rng(11)
    layers = 32
    src = OffloadTier("cpu", ["m0", "m1"], [0.3, 0.7], [1e12, 1e12], layers, layer_bytes)
    dst = OffloadTier("ssd", ["s0", "s1", "s2"], [0.5, 0.2, 0.3], [1e12] * 3, layers, layer_bytes)
    pairs = set()
    for _ in range(15):
        keys = [int(k) for k in rng.choice(10**6, int(rng.integers(1, 30)), replace=False)]
        above = src.place(keys, None)  # sets of different sizes: different layouts
        rng.shuffle(above)
        below = dst.place([e.key for e in above[: max(1, len(above) // 2)]], None)
        for a, b, entries in ((None, src, above), (src, dst, below), (None, dst, below)):
            for e in entries:
                got = store_pieces(a, b, [e], "gpu0")
                counts = [p.ranges for p in got]  # deferred: before any range is made
                want = reference(a, b, [e], "gpu0")
                assert counts == [len(w[3]) for w in want]
                rows = [
                    (p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in got
                ]
                assert rows == want
                for x in got:
                    assert x.layer == -1 and x.length == int(round(layer_bytes))  # all layers
                    assert x.extents.dtype == np.int64 and x.extents.flags.c_contiguous
                if a is not None:
                    pairs.add((src.entries[e.key].runs, e.runs))
    assert len(pairs) > 3  # several layout pairs, some cut into several parts


def test_template_of_a_device_with_two_runs() -> None:
    """An entry whose device 0 holds two runs (layers 0-9 and 20-31): its
    (gpu, s0) piece gathers both slots, in run order, as the reference does."""
    dst = OffloadTier("ssd", ["s0", "s1"], [0.5, 0.5], [1e12] * 2, 32, 4096.0)
    e = Entry(7, ((0, 0, 10), (1, 10, 20), (0, 20, 32)), (0, 1 << 20, 1 << 30), (0, 0), 0)
    got = store_pieces(None, dst, [e], "gpu0")
    rows = [(p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in got]
    assert rows == reference(None, dst, [e], "gpu0")
    assert [len(p.extents) for p in got] == [22, 10]  # s0: 10 + 12 layers; s1: 10
    assert got[0].extents[10, 0] == 1 << 30  # layer 20: the second run's slot


def _rounds(tier: OffloadTier, n: int) -> dict[tuple[int, ...], list[np.ndarray]]:
    """``n`` rounds of 4 entries placed, checked against the reference and
    dropped (the next round reuses their slots); each slots tuple's ranges."""
    seen: dict[tuple[int, ...], list[np.ndarray]] = {}
    for round_ in range(n):
        placed = tier.place([100 * round_ + i for i in range(4)], None)
        assert len(placed) == 4
        for e in placed:
            got = store_pieces(None, tier, [e], "gpu0")
            rows = [(p.src, p.dst, p.nbytes, [tuple(r) for r in p.extents.tolist()]) for p in got]
            assert rows == reference(None, tier, [e], "gpu0")
            seen.setdefault(e.slots, []).append(got[0].extents)
        tier.complete_all(placed)
        for e in placed:
            tier.drop([e], None)
    return seen


def test_kept_ranges_are_the_reference_ones_on_slot_reuse(monkeypatch) -> None:
    """Entries dropped and replaced reuse their slots: every new entry's
    ranges equal the per-layer reference; kept ones are the very arrays made
    for the first entry at those slots, read-only; with ``MADE`` = 2 a
    template stops keeping (a quarter of 2 look-ups did not hit) and makes
    them afresh, still the reference's."""
    seen = _rounds(OffloadTier("cpu", ["m0"], [1.0], [4 * 32 * 4096.0], 32, 4096.0), 3)
    assert len(seen) == 4  # four slots, reused round after round
    for arrays in seen.values():
        assert all(x is arrays[0] for x in arrays) and not arrays[0].flags.writeable
    monkeypatch.setattr(onepiece, "MADE", 2)
    seen = _rounds(OffloadTier("cpu", ["m0"], [1.0], [4 * 32 * 4096.0], 32, 4096.0), 3)
    assert len(seen) == 4 and all(arrays[2] is not arrays[1] for arrays in seen.values())

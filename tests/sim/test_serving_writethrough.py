"""A write-through's pinned entries made ready without being offered decide
exactly what completing, offering, then pinning them decides.

:func:`sim.serving.policy.writethrough.complete_through` against its definition
(``complete_all`` then :func:`write_through`, :func:`_by_definition`, put in
its place for a second run): whole LMCache runs
on small tiers (the CPU tier full, its LRU walk meeting entries pinned by
their copy to the SSD) give the same request and op records and the same
plan, column by column; and on a hand case the pinned sources are never
offered, the others are.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.bench import mooncake_requests
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.policy import writethrough
from tests.sim.test_serving_complete import _store, _write_through_manager


def _run(design: str, n: int, block: int, tiers: dict[str, float]) -> tuple[pa.Table, ...]:
    profile = load_profile("h100-2dimm-2ssd")
    card = get_model("Llama-3.1-8B")
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=True)  # fmt: skip
    eng = build_engine(profile, card, get_design(design, tiers), cfg,
                       mooncake_requests(n, block, 0))  # fmt: skip
    rec = eng.run(None)
    return rec.requests, rec.ops, eng.ops.plan()


def _by_definition(src, dst, entries, keys, rid, gpu_name):
    """What ``complete_through`` stands for: the store completed (its entries
    ready and offered), then the ones still held copied on below."""
    src.complete_all(entries)
    return writethrough.write_through(src, dst, entries, rid, gpu_name, keys)


CASES = [  # the second's SSD tier is small: some copies place only some keys
    ("lmcache", 80, 16, {"cpu_gib": 0.2, "ssd_gib": 0.5}),
    ("lmcache-lp-async", 120, 256, {"cpu_gib": 0.3, "ssd_gib": 0.2}),
]


@pytest.mark.parametrize("design, n, block, tiers", CASES)
def test_fast_write_through_changes_no_record(monkeypatch, design, n, block, tiers) -> None:
    """Both paths give identical records and plans; the fast one was taken
    (counted), on the small SSD tier for some stores whose keys were all
    placed below and some whose keys were not."""
    calls, partial = [0], [0]
    real = writethrough.complete_through

    def counted(src, dst, entries, keys, rid, gpu_name):
        assert keys == [e.key for e in entries]
        out = real(src, dst, entries, keys, rid, gpu_name)
        calls[0] += 1
        partial[0] += not out or len(out[0].olds) < len(entries)
        return out

    monkeypatch.setattr(writethrough, "complete_through", counted)
    fast = _run(design, n, block, tiers)
    assert calls[0] > 20
    if tiers["ssd_gib"] < tiers["cpu_gib"]:
        assert 0 < partial[0] < calls[0]
    monkeypatch.setattr(writethrough, "complete_through", _by_definition)
    slow = _run(design, n, block, tiers)
    for a, b in zip(fast, slow, strict=True):
        assert a.num_rows == b.num_rows > 0
        assert a.column_names == b.column_names
        for c in a.column_names:  # NaN (e.g. a request not done) equals NaN
            x, y = a.column(c).to_pylist(), b.column(c).to_pylist()
            assert all(u == v or (u != u and v != v) for u, v in zip(x, y, strict=True)), c


@pytest.mark.parametrize("definition", [False, True])
def test_pinned_sources_are_never_offered(monkeypatch, definition) -> None:
    """Keys 21 and 23 are in the SSD tier already: a store of 20..24 into
    the CPU tier pins 20, 22, 24 for their copy (count 1 either way).
    ``complete_through`` never offers them (``heaped`` -1) and offers 21 and
    23 at their stamps; its definition offers all five.  Once the copy ends
    all five are offered at their stamps either way."""
    if definition:
        monkeypatch.setattr(writethrough, "complete_through", _by_definition)
    mgr = _write_through_manager()
    cpu, ssd = mgr.tiers
    _s, store = _store(mgr, 0, [20, 21, 22, 23, 24])
    ssd.complete_all(ssd.place([21, 23], None))
    (wt,) = mgr.on_stored(store)
    es = [cpu.entries[k] for k in (20, 21, 22, 23, 24)]
    assert [e.ref_cnt for e in es] == [1, 0, 1, 0, 1]
    offered = [e.heaped == e.stamp for e in es]
    assert offered == ([True] * 5 if definition else [False, True, False, True, False])
    assert mgr.on_stored(wt) == []
    assert [e.ref_cnt for e in es] == [0] * 5
    assert [e.heaped == e.stamp for e in es] == [True] * 5

"""A waiting store skips the placements that cannot change anything.

:meth:`BlockManager.keys_added` and :meth:`~BlockManager.room_blocked`
let a store that waits for the first tier's demotions to drain skip
re-placing its keys when the outcome is known, and
:meth:`~BlockManager.fitting_prefix` lets it place only the keys that fit
when the others would wait anyway.  The invariant: a run where
``room_blocked`` always answers "look again" and ``fitting_prefix`` "place
it whole" (every waiting store re-placed whole at every drain, as before)
gives the same request and op records, column for column, on an
eviction-heavy paged-cpu-ssd run, and both shortcuts were taken there (else
the test would prove nothing).
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
from sim.serving.execute.stores import Offloader
from sim.serving.policy.manager import BlockManager


def _run(n: int, block: int, tiers: dict[str, float]) -> tuple[pa.Table, pa.Table]:
    profile = load_profile("h100-2dimm-2ssd")
    card = get_model("Llama-3.1-8B")
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=False)  # fmt: skip
    reqs = mooncake_requests(n, block, 0)
    eng = build_engine(profile, card, get_design("paged-cpu-ssd", tiers), cfg, reqs)
    rec = eng.run(None)
    return rec.requests, rec.ops


@pytest.mark.parametrize(
    "n, tiers, shared",
    [
        (150, {"cpu_gib": 0.3, "ssd_gib": 2.0}, True),
        (85, {"cpu_gib": 18.63, "ssd_gib": 186.26}, False),
    ],
)
def test_skipping_blocked_retries_changes_no_record(monkeypatch, n, tiers, shared) -> None:
    """``shared``: some waiting store's key is placed by another store there
    (the index marks it touched), seen on the small tiers."""
    real = BlockManager.room_blocked
    said = {True: 0, False: 0}

    def counted(self):
        out = real(self)
        said[out] += 1
        return out

    real_prefix = BlockManager.fitting_prefix
    cut = [0]

    def counted_prefix(self, n):
        m = real_prefix(self, n)
        cut[0] += 0 < m < n
        return m

    real_fresh = Offloader._fresh
    fresh = {True: 0, False: 0}

    def counted_fresh(self, w):
        out = real_fresh(self, w)
        fresh[out] += 1
        return out

    real_all = Offloader._all_fresh
    bulk = [0]

    def counted_all(self):
        out = real_all(self)
        bulk[0] += out
        return out

    monkeypatch.setattr(Offloader, "_all_fresh", counted_all)
    monkeypatch.setattr(BlockManager, "room_blocked", counted)
    monkeypatch.setattr(BlockManager, "fitting_prefix", counted_prefix)
    monkeypatch.setattr(Offloader, "_fresh", counted_fresh)
    fast = _run(n, 256, tiers)
    assert said[True] > 0  # the skip happened
    assert cut[0] > 0  # and so did placing a waiting store's fitting keys alone
    assert fresh[True] > 0  # the index let waiters skip
    assert bulk[0] > 0  # and a blocked drain skip all the later ones at once
    assert (fresh[False] > 0) == shared  # and marked those whose keys others placed
    monkeypatch.setattr(Offloader, "_fresh", lambda self, w: False)
    monkeypatch.setattr(Offloader, "_all_fresh", lambda self: False)
    touched = _run(n, 256, tiers)
    monkeypatch.setattr(BlockManager, "room_blocked", lambda self: False)
    monkeypatch.setattr(BlockManager, "fitting_prefix", lambda self, n: 0)
    slow = _run(n, 256, tiers)
    _same(fast, slow)
    _same(touched, slow)


def _same(fast: tuple[pa.Table, pa.Table], slow: tuple[pa.Table, pa.Table]) -> None:
    """The same request and op records, column for column."""
    for a, b in zip(fast, slow, strict=True):
        assert a.num_rows == b.num_rows > 0
        assert a.column_names == b.column_names
        for c in a.column_names:  # NaN (e.g. a request not done) equals NaN
            x = a.column(c).to_numpy(zero_copy_only=False)
            y = b.column(c).to_numpy(zero_copy_only=False)
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), c

"""Lower hits grouped per tier: runs of one tier taken whole, counts by hand."""

from __future__ import annotations

from sim.serving.policy.manager import _by_tier
from sim.serving.tiers.blocks import OffloadTier


def test_runs_of_tiers_group_in_hit_order_and_count_their_blocks() -> None:
    """Hits cpu, cpu, ssd, cpu (blocks 4, 4, 4, 2; the last group short):
    cpu's entries in hit order (a, b, d), ssd's (c); hits cpu 4+4+2 = 10,
    ssd 4, after the GPU's 3, tiers in the order first hit."""
    cpu = OffloadTier("cpu", ["dram0"], [1.0], [1e9], 4, 1.0)
    ssd = OffloadTier("ssd", ["ssd0"], [1.0], [1e9], 4, 1.0)
    a, b, c, d = object(), object(), object(), object()
    lower = [(cpu, a, 0, 4), (cpu, b, 4, 4), (ssd, c, 8, 4), (cpu, d, 12, 2)]
    hits = {"gpu": 3}
    got = _by_tier(lower, hits)  # type: ignore[arg-type]
    assert list(got) == [cpu, ssd]
    assert got[cpu] == [a, b, d] and got[ssd] == [c]
    assert list(hits.items()) == [("gpu", 3), ("cpu", 10), ("ssd", 4)]
    assert _by_tier([]) == {}

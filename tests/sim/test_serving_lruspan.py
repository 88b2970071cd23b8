"""The LRU walk's span: ``seq[i:end]`` started at ``i`` without stepping over
the items before it (an ``islice`` from ``i`` made each take on a long run
cost its cursor: quadratic in drains on paged-cpu-ssd)."""

from __future__ import annotations

from sim.serving.tiers.lru import _span


def test_span_is_the_slice_for_every_bound() -> None:
    seq = list(range(7))
    for i in range(8):
        for end in range(i, 9):
            assert list(_span(seq, i, end)) == seq[i:end]

"""Lower hits found in chunks are the hits a walk group by group finds.

:func:`sim.serving.policy.prefix.lower_hits` against its definition written out
per group (below, no chunks, no C-level maps) on seeded random tiers (ready,
not ready and in use entries), GPU sets, offsets ``j``, limits
and group sizes ``k``: the same hits (tier, entry, first block, blocks) and
the same block where the hit ends.
"""

from __future__ import annotations

import random

import pytest

from sim.serving.policy.prefix import lower_hits
from sim.serving.tiers.blocks import OffloadTier


def _by_group(tiers, on_gpu, k, hs, j, limit):
    """The definition: groups from ``j``, each ending at the end of its
    offload block (its key: that last block's hash), the last cut at
    ``limit``; a group hits in the first tier with a ready
    entry for its key unless one of its blocks is on the GPU; the first
    group that does not hit ends the hit (at its first block)."""
    if j >= limit or not tiers:
        return [], j
    first = (j // k) * k + k - 1
    lasts = list(range(first, min(limit + k - 1, len(hs)), k))
    if not lasts:
        return [], j
    out = []
    for g, last in enumerate(lasts):
        start, end = (j if g == 0 else last - k + 1), min(last + 1, limit)
        if any(on_gpu(hs[b]) for b in range(start, end)):
            return out, start
        tier = next((t for t in tiers if t.lookup(hs[last]) is not None), None)
        if tier is None:
            return out, start
        out.append((tier, tier.entries[hs[last]], start, end - start))
    return out, min(lasts[-1] + 1, limit)


def _first_in(keys: set[int]):
    """What :func:`lower_hits` asks of the GPU (:func:`first_cached`), of a set."""
    return lambda ks: next((i for i, h in enumerate(ks) if h in keys), -1)


@pytest.mark.parametrize("n_tiers", [2, 3])
@pytest.mark.parametrize("k", [1, 2, 4, 16])
def test_chunked_lower_hits_are_the_group_by_group_hits(k: int, n_tiers: int) -> None:
    """``n_tiers`` tiers holding mostly the same keys (a lower tier probed
    only from where the first stops serving must still serve the rest)."""
    rng = random.Random(k if n_tiers == 2 else 1000 + k)
    ended_inside = switched = 0
    for _case in range(300):
        n_blocks = rng.randint(1, max(600, 100 * k))
        hs = tuple(rng.randrange(1, 2**40) for _ in range(n_blocks))
        tiers = [OffloadTier(f"t{i}", ["d0"], [1.0], [1e12], 4, 1.0) for i in range(n_tiers)]
        hit_len = rng.randint(0, n_blocks)  # most groups up to here are held somewhere
        for b in range(k - 1, n_blocks, k):
            for t in tiers:
                if rng.random() < (0.97 if b < hit_len else 0.1):
                    (e,) = t.place([hs[b]], None)
                    state = rng.random()
                    if state < 0.95:
                        t.complete_all([e])
                        if state < 0.1:
                            t.pin(e)  # in use: still a hit
        gpu = {h for h in hs if rng.random() < 0.002 / k}
        j = rng.randint(0, n_blocks) if rng.random() < 0.5 else rng.randint(0, k)
        limit = rng.randint(0, n_blocks + 3)
        got = lower_hits(tiers, _first_in(gpu), k, hs, j, limit)
        want = _by_group(tiers, gpu.__contains__, k, hs, j, limit)
        assert got == want
        ended_inside += len(want[0]) > 40 and want[1] < min(limit, n_blocks)
        served = [t for t, *_ in want[0]]
        switched += tiers[0] in served and served[-1] is not tiers[0]
    assert ended_inside > (10 if n_tiers == 2 else 2)  # hits past the first chunk, ended early
    assert switched > 10  # a lower tier served groups after the first tier's

"""Per layer-head windows from the knapsack, applied under a GPU memory budget."""

import numpy as np
import scipy.sparse as sp

from sim.policies import Layout, get_design
from sim.policies.kvdrive.windows import allocate_windows

N, ENTRY = 64, 256


def _built(rows: list[list[int]]):
    lay = Layout(
        n_ssd=1,
        entry_bytes=ENTRY,
        key_bytes=ENTRY // 2,
        budget=4,
        local_window=0,
        sink_tokens=0,
        dram_cache_entries=0,
        ssd_latency_us=80.0,
        ssd_entry_us=0.04,
    )
    act = np.zeros((len(rows), N), dtype=bool)
    for i, r in enumerate(rows):
        act[i, r] = True
    design = get_design("kvdrive", chunk_size=4, chunks_per_centroid=2, window=1)
    keys = np.random.default_rng(0).normal(size=(N, 8)).astype(np.float32)
    design.build(sp.csr_matrix(act), keys, lay, np.random.default_rng(0))
    return design


def _pair():
    # head A re-selects {10..13} and {20..23} alternately: a 4-entry cache (window 1)
    # misses all 24, an 8-entry one (window 2) only the first 8; head B never repeats
    recurring = [list(range(10, 14)) if t % 2 == 0 else list(range(20, 24)) for t in range(6)]
    churning = [list(range(30 + 4 * t, 34 + 4 * t)) for t in range(6)]
    return _built(recurring), _built(churning)


def test_the_recurring_head_gets_the_window_the_churning_one_none():
    a, b = _pair()
    # window 2 of A costs 2 x 4 entries x 256 B x 3 (layers per modeled one) = 6144 B
    chosen = allocate_windows([a, b], budget_bytes=6144, repeat=3)
    assert chosen.tolist() == [2, 0]
    assert a.cache.capacity == 8 and b.cache.capacity == 0
    # warmed with the 8 entries the profile selected: the next step's selection hits
    assert sorted(a.cache.ids.tolist()) == list(range(10, 14)) + list(range(20, 24))


def test_a_budget_one_byte_short_leaves_every_head_at_zero():
    a, b = _pair()
    # window 1 saves nothing for A (0 of 24), window 2 does not fit: no move gains
    assert allocate_windows([a, b], budget_bytes=6143, repeat=3).tolist() == [0, 0]
    assert a.cache.capacity == b.cache.capacity == 0

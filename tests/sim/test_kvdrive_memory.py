"""GPU memory accounting: Original is out of memory exactly where its KV no longer fits."""

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.policies import StepDecision
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.kvdrive_memory import gpu_memory
from sim.scenarios.swarm import LaneResult

ENTRY = 2 * 8 * 128 * 2  # Llama-3-8B-1048K: K and V of 8 KV heads x 128 x bf16 per layer


def _lane(hbm_entries=None, cache=0.0, selected=10, index=0):
    info = {"cache_capacity": cache}
    if hbm_entries is not None:
        info["hbm_entries"] = float(hbm_entries)
    dec = StepDecision(selected=np.arange(selected), dram_entries=0, ssd_extents=[], info=info)
    return LaneResult([dec], [np.arange(1)], 0, index, np.zeros(1, dtype=np.int64))


@pytest.mark.parametrize("visible, oom", [(270_687, False), (270_688, True)])
def test_original_runs_out_of_hbm_where_its_kv_exceeds_it(visible, oom):
    # L20: 48 GiB = 51,539,607,552 B; weights 8.03e9 x 2 B = 16.06e9 B; the rest holds
    # 35,479,607,552 / (32 layers x 4096 B) = 270,687.9 tokens of one sequence's KV
    p = KVDriveParams(batch=1, design="original")
    need, got = gpu_memory(p, load_profile("l20-server"), {(0, 0): _lane(visible)}, ENTRY)
    assert need == pytest.approx(16.06e9 + 32 * visible * ENTRY)
    assert got is oom


def test_other_designs_count_cache_selection_and_index():
    p = KVDriveParams(batch=2, layers=8, layers_modeled=2)
    lanes = {
        (b, lm): _lane(cache=100.0, selected=50, index=1000) for b in range(2) for lm in range(2)
    }
    need, oom = gpu_memory(p, load_profile("l20-server"), lanes, ENTRY)
    # resident: 4 lanes x (100 cached entries x 4096 B + 1000 B of index), each lane
    # standing for the model's 32 layers / 2 modeled = 16 layers (memory charges every
    # layer, not the 8 timed); working set: one layer at a time, its 2 sequences x 50
    # selected entries x 4096 B
    assert need == pytest.approx(16.06e9 + 4 * 16 * (100 * ENTRY + 1000) + 2 * 50 * ENTRY)
    assert not oom


def test_prefetch_keeps_two_layers_working_sets():
    p = KVDriveParams(batch=1, layers_modeled=1, prefetch=True)
    need, _ = gpu_memory(p, load_profile("l20-server"), {(0, 0): _lane(selected=50)}, ENTRY)
    assert need == pytest.approx(16.06e9 + 2 * 50 * ENTRY)  # no cache, 2 layers live

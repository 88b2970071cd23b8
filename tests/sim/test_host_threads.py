"""Host threads reach the plan's CPU ops, and the executor times them by hand.

KVDrive's memmap -> pinned staging copy is torch's ``index_copy_`` on the
intra-op pool (the host's physical cores), the driver's pageable staging and
the hit/miss lookup one thread each (:mod:`sim.scenarios.host_threads`).  A
CPU op over B DRAM bytes on n threads takes B / min(n x per-core rate, DRAM
total) alone, and never holds more than the profile's cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import CPU
from sim.config import SwarmParams
from sim.executor import simulate
from sim.policies import StepDecision
from sim.scenarios.host_threads import (
    INDEX_COPY_GBPS,
    INDEX_COPY_RANGE_GBPS,
    SCAN_BF16_GBPS,
    SWARM,
    select_threads,
    stage_threads,
)
from sim.scenarios.kvdrive import assemble
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.swarm import LaneResult, layout_for, max_io_bytes
from sim.scenarios.swarm import _assemble as swarm_assemble

STAGED = 1_000  # entries staged in the one (step, layer)
LOOKED = 2_000  # entry ids the lookup streams (8 B each)


def _plan(profile, pageable: bool):
    """One step, one layer, one sequence: a GPU selection with no work, a lookup,
    no SSD read, ``STAGED`` entries staged then copied, attention."""
    p = KVDriveParams(context_tokens=4096, batch=1, steps=1, layers=1, profile_steps=0)
    empty = [np.zeros((0, 2), dtype=np.int64) for _ in profile.ssd_names]
    info = {
        "stage_entries": float(STAGED),
        "h2d_entries": float(STAGED),
        "lookup_entries": float(LOOKED),
        "blocking_h2d": float(pageable),
    }
    dec = StepDecision(np.arange(STAGED), STAGED, empty, info=info)
    zeros = np.zeros(len(profile.ssd_names), np.int64)
    lanes = {(0, 0): LaneResult([dec], [dec.selected], 0, 0, zeros, "gpu")}
    layout = layout_for(p, profile, len(profile.ssd_names), p.context_tokens)
    ssds = max_io_bytes(profile, tuple(profile.ssd_names))
    plan = assemble(p, profile, ssds, layout, lanes, {(0, 0): zeros}, p.context_tokens)
    return plan, layout.entry_bytes


def _cpu_op(ops, tag: str):
    row = ops[(ops["tag"] == tag) & (ops["dst"] == CPU)]
    assert len(row) == 1
    return row.iloc[0]


@pytest.mark.parametrize(("pageable", "threads"), [(False, 4), (True, 1)])
def test_the_staging_copy_carries_its_implementations_threads(make_profile, pageable, threads):
    tiny = make_profile(cores=4, core_mem_gbps=10.0)
    plan, _ = _plan(tiny, pageable)
    ops = plan.to_pandas()
    # memmap -> pinned: torch's pool, the 4 cores; pageable: the driver's one thread
    assert _cpu_op(ops, "stage")["threads"] == threads
    assert _cpu_op(ops, "lookup")["threads"] == KVDriveParams().lookup_threads == 1
    assert stage_threads(KVDriveParams(), tiny) == 4
    assert KVDriveParams().driver_staging_threads == 1


@pytest.mark.parametrize(
    ("cores", "pageable", "gbps"),
    [
        # index_copy_ at its measured 7.45 GB/s per thread (below the core's 10):
        (4, False, 4 * 7.45),  # 4 threads x 7.45 = 29.8 GB/s < tiny's 50 GB/s DRAM module
        (8, False, 50.0),  # 8 x 7.45 = 59.6 GB/s: the DRAM module's 50 GB/s caps it
        (4, True, 10.0),  # the driver's memcpy on one thread: the core's 10 GB/s
    ],
)
def test_staging_time_is_twice_the_bytes_over_threads_times_the_core_rate(
    make_profile, cores, pageable, gbps
):
    tiny = make_profile(cores=cores, core_mem_gbps=10.0)
    plan, entry = _plan(tiny, pageable)
    assert entry == 2 * 8 * 128 * 2  # Llama-3-8B: K and V, 8 KV heads x 128 dims x 2 B
    ops = simulate(plan, tiny).ops.to_pandas()
    stage = _cpu_op(ops, "stage")
    # a memcpy of S = 1,000 x 4,096 B reads S and writes S: 8.192 MB of DRAM traffic
    two_s = 2 * STAGED * 4096
    assert stage["end_s"] - stage["start_s"] == pytest.approx(two_s / (gbps * 1e9), rel=1e-9)
    # the h2d copy waits for it (and for the concurrent 2 S on the 50 GB/s DRAM bus)
    h2d = ops[ops["tag"] == "h2d"].iloc[0]
    assert h2d["start_s"] == pytest.approx(
        max(stage["end_s"], stage["start_s"] + two_s / 50e9), rel=1e-9
    )


def test_the_l20_staging_at_120k_by_hand():
    """l20-server: 48 cores x 25.6 GB/s = 1,228.8 GB/s, capped by its 8 channels of
    DDR5-4800 (8 x 38.4 = 307.2 GB/s).  At 120K x 4 (Llama, 16 steps) a step stages
    125,014,016 B of traffic over 8 layers (the sweep's ``dram_bus_mb_per_step``
    197.746688 less ``h2d_mb_per_step`` 72.732672): 15.63 MB a layer, 50.9 us on
    every core against 610 us on one."""
    l20 = load_profile("l20-server")
    assert stage_threads(KVDriveParams(), l20) == 48
    # index_copy_'s 7.45 GB/s per thread x 48 = 357.6 GB/s: the DRAM still caps it
    assert 48 * min(INDEX_COPY_GBPS, l20.cpu.core_mem_gbps) > 8 * 38.4
    dram = sum(m.gbps for m in l20.dram)
    assert dram == pytest.approx(8 * 38.4)
    two_s = 125_014_016 / 8
    many = two_s / (min(48 * l20.cpu.core_mem_gbps, dram) * 1e9)
    one = two_s / (l20.cpu.core_mem_gbps * 1e9)
    assert many == pytest.approx(50.87e-6, rel=1e-3)
    assert one == pytest.approx(610.4e-6, rel=1e-3)


@pytest.mark.parametrize(("batch", "threads"), [(1, 1), (4, 4), (16, 8)])
def test_swarm_scores_on_one_thread_per_sequence_up_to_the_cores(make_profile, batch, threads):
    p = SwarmParams(batch=batch)
    assert select_threads(p, make_profile(cores=8)) == threads
    # a scenario's own count wins; KVDrive's CPU selection defaults to one thread
    assert select_threads(SwarmParams(batch=batch, select_threads=3), make_profile()) == 3
    assert select_threads(KVDriveParams(batch=batch), make_profile(cores=8)) == 1


def _host_copy(op: str, rows: int, threads: int = 1) -> float:
    """analysis/host_copy.csv's traffic_gbps_min of ``op`` at ``rows`` x 4,096 B."""
    table = pd.read_csv(Path(__file__).parents[2] / "analysis" / "host_copy.csv")
    hit = table[
        (table["op"] == op)
        & (table["row_bytes"] == 4096)
        & (table["rows"] == rows)
        & (table["threads"] == threads)
    ]
    (gbps,) = hit["traffic_gbps_min"]
    return float(gbps)


def test_the_staging_rate_is_the_measured_index_copy():
    """The model's per-thread index_copy_ rate and its range are the CSV's numbers
    (analysis/measure_host_copy.py): scatter at 1,150 and 2,300 rows, copy at 2,300."""
    assert _host_copy("scatter", 1150) == INDEX_COPY_GBPS
    assert (_host_copy("scatter", 2300), _host_copy("copy", 2300)) == INDEX_COPY_RANGE_GBPS
    assert KVDriveParams().stage_gbps == INDEX_COPY_GBPS
    # and 1 -> 2 threads scales it (intra-op parallel): 1.9-2.0x at 1,150 rows
    assert 1.8 < _host_copy("scatter", 1150, 2) / INDEX_COPY_GBPS <= 2.0


def test_the_selection_rate_range_starts_at_the_measured_scan():
    """A CPU selection's per-thread rate ranges from a torch bf16 scan of 128K
    DRAM-resident keys on one thread (analysis/index_scan.csv, measured by
    analysis/measure_index_scan.py) to the profile's per-core rate, its value as given."""
    table = pd.read_csv(Path(__file__).parents[2] / "analysis" / "index_scan.csv")
    one = table[(table["dtype"] == "bf16") & (table["keys"] == 131072) & (table["threads"] == 1)]
    (gbps,) = one["gbps_min"]
    assert gbps == SCAN_BF16_GBPS
    (a,) = [a for a in SWARM if a.param == "select_gbps_per_thread"]
    h20 = load_profile("h20-8ssd")
    assert a.range_on(h20) == (gbps, h20.cpu.core_mem_gbps)
    assert a.value(SwarmParams(), h20) == h20.cpu.core_mem_gbps  # 0: the core's rate


def test_a_selection_rate_reaches_the_select_op(make_profile):
    """One layer, batch 2: the select op carries select_gbps_per_thread as its core_gbps, and
    its 2 GFLOP over 200 MB on 2 threads of 4 GB/s take max(10 ms, 25 ms) = 25 ms."""
    tiny = make_profile(cores=4, core_gflops=100.0, core_mem_gbps=10.0)
    p = SwarmParams(
        context_tokens=1000, batch=2, steps=1, profile_steps=0, layers=1, select_gbps_per_thread=4.0
    )
    empty = [np.zeros((0, 2), dtype=np.int64) for _ in tiny.ssd_names]
    dec = StepDecision(np.arange(300), 300, empty, score_flops=1e9, score_bytes=1e8)
    zeros = np.zeros(len(tiny.ssd_names), np.int64)
    lane = LaneResult([dec], [], 0, 0, zeros, score_device=CPU)
    lanes = {(0, 0): lane, (1, 0): lane}
    layout = layout_for(p, tiny, len(tiny.ssd_names), p.context_tokens)
    plan = swarm_assemble(p, tiny, max_io_bytes(tiny, tuple(tiny.ssd_names)), layout, lanes,
                          {k: zeros for k in lanes}, p.context_tokens)  # fmt: skip
    ops = simulate(plan, tiny).ops.to_pandas()
    sel = plan.to_pandas().query("tag == 'select'")
    assert list(sel["core_gbps"]) == [4.0] and list(sel["threads"]) == [2]
    row = ops[ops["tag"] == "select"].iloc[0]
    assert row["end_s"] - row["start_s"] == pytest.approx(max(2e9 / 200e9, 2e8 / 8e9), rel=1e-9)

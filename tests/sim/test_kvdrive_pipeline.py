"""The SFC pipeline (seed 003 §6.1) against a hand-drawn schedule, through the simulator."""

import numpy as np
import pandas as pd
import pytest

from sim.executor import simulate
from sim.hw.machine import Machine
from sim.models import decode_layer_cost, get_model
from sim.policies import StepDecision
from sim.scenarios.kvdrive import assemble
from sim.scenarios.kvdrive_kind import KVDriveParams, stage_busy_s
from sim.scenarios.swarm import LaneResult

MODEL = "Llama-3-8B-1048K"
N_H2D = 6000  # entries copied per sequence: 6000 x 4 KiB over the 25 GB/s gpu0.pcie


def _lanes(batch: int, unit_s: float, selected: int):
    """One lane per sequence whose select, lookup and copy each take ``unit_s`` alone
    on the tiny machine: 100 TFLOP/s GPU, 10 GB/s per core, 25 GB/s to the GPU."""
    dec = StepDecision(
        selected=np.arange(selected),
        dram_entries=selected,
        ssd_extents=[],
        score_flops=unit_s * 100e12,
        info={"lookup_entries": unit_s * 10e9 / 8, "h2d_entries": N_H2D},
    )
    lane = LaneResult([dec], [np.arange(selected)], 0, 0, np.zeros(2, dtype=np.int64), "gpu")
    return {(b, 0): lane for b in range(batch)}


@pytest.mark.parametrize("micro_batches, units", [(1, 9), (3, 5)])
def test_sfc_makespan_matches_the_hand_schedule(tiny, micro_batches, units):
    # unit u = one micro-batch's copy.  Sequential (1 micro-batch of 3 sequences):
    # select 3u, lookup 3u, copy 3u, then compute: 9u + C.  SFC with 3 micro-batches:
    #   GPU  | s0 | s1 | s2 |
    #   CPU  |    | l0 | l1 | l2 |
    #   PCIe |    |    | f0 | f1 | f2 | compute C
    # the last copy ends at 5u, so 5u + C.
    card = get_model(MODEL)
    unit = N_H2D * card.kv_bytes_per_token_layer / 25e9
    p = KVDriveParams(
        model=MODEL, context_tokens=1000, batch=3, steps=1, layers=1, micro_batches=micro_batches
    )
    prefix, selected = 1000 + p.profile_steps, 100
    lanes = _lanes(3, unit, selected)
    bases = {k: np.zeros(2, dtype=np.int64) for k in lanes}
    plan = assemble(p, tiny, {}, _layout(card), lanes, bases, prefix)
    rec = simulate(plan, tiny)
    visible = prefix + 1
    cost = decode_layer_cost(card, 3, visible, 3 * selected / (3 * visible))
    compute = Machine(tiny).gpu_seconds("gpu0", cost.flops, cost.hbm_bytes)
    makespan = float(rec.ops.column("end_s").to_numpy().max())
    assert makespan == pytest.approx(units * unit + compute, rel=1e-9)
    tags = rec.ops.column("tag").to_pylist()
    assert tags.count("select") == tags.count("lookup") == tags.count("h2d") == micro_batches


def _layout(card):
    class L:  # assemble reads only the entry size from the layout
        entry_bytes = card.kv_bytes_per_token_layer

    return L()


def test_stage_time_is_the_union_of_busy_intervals():
    # group (0, 0): two micro-batches' reads overlap on [1, 4]: busy 0..5 = 5 s, not 4 + 4;
    # a gap on [6, 7] adds 1.  Group (0, 1): one read of 2 s.  Copies never overlap: 1 + 1.
    ops = pd.DataFrame(
        {
            "step": [0, 0, 0, 0, 0, 0],
            "layer": [0, 0, 0, 1, 0, 0],
            "tag": ["kv_fetch", "kv_fetch", "kv_fetch", "kv_fetch", "h2d", "h2d"],
            "start_s": [1.0, 0.0, 6.0, 10.0, 5.0, 7.0],
            "end_s": [5.0, 4.0, 7.0, 12.0, 6.0, 8.0],
        }
    )
    busy = stage_busy_s(ops)
    assert busy["kv_fetch"] == pytest.approx(5.0 + 1.0 + 2.0)
    assert busy["h2d"] == pytest.approx(2.0)
    # an op inside another adds nothing
    inner = pd.DataFrame(
        {
            "step": [0, 0],
            "layer": [0, 0],
            "tag": ["x", "x"],
            "start_s": [0.0, 1.0],
            "end_s": [4.0, 2.0],
        }
    )
    assert stage_busy_s(inner)["x"] == pytest.approx(4.0)


def _no_select(lanes):
    for lane in lanes.values():
        lane.decisions[0].score_flops = 0.0
    return lanes


@pytest.mark.parametrize("prefetch, units, computes", [(False, 12, 2), (True, 9, 1)])
def test_previous_layer_prefetch_against_the_hand_schedule(tiny, prefetch, units, computes):
    # two layers, one micro-batch of 3 sequences, no selection op: lookup 3u, copy 3u.
    # Sequential: each layer waits for the previous compute: 2 x (6u + C) = 12u + 2C.
    # Prefetch (InfiniGen): layer 1 speculates on layer 0's input, so its lookup runs
    # right after layer 0's (3u..6u) and its copy right after layer 0's (6u..9u), under
    # layer 0's compute; layer 1 computes at 9u: 9u + C (C < 3u here).
    card = get_model(MODEL)
    unit = N_H2D * card.kv_bytes_per_token_layer / 25e9
    p = KVDriveParams(
        model=MODEL, context_tokens=1000, batch=3, steps=1, layers=2, prefetch=prefetch
    )
    prefix, selected = 1000 + p.profile_steps, 100
    lanes = _no_select(_lanes(3, unit, selected))
    bases = {k: np.zeros(2, dtype=np.int64) for k in lanes}
    rec = simulate(assemble(p, tiny, {}, _layout(card), lanes, bases, prefix), tiny)
    cost = decode_layer_cost(card, 3, prefix + 1, selected / (prefix + 1))
    compute = Machine(tiny).gpu_seconds("gpu0", cost.flops, cost.hbm_bytes)
    assert compute < 3 * unit
    makespan = float(rec.ops.column("end_s").to_numpy().max())
    assert makespan == pytest.approx(units * unit + computes * compute, rel=1e-9)

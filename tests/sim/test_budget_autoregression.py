"""Issue 12 point 5: decode is autoregressive.

Step t's selection scores step t's query, which exists only once step t-1's
last layer has produced the token; so every step's first op waits for the
previous step's last compute, and with no SSD reads the steps run one after
the other.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import SwarmParams
from sim.executor import simulate
from sim.models import decode_layer_cost, get_model
from sim.policies import StepDecision
from sim.scenarios.swarm import LaneResult, _assemble, layout_for, max_io_bytes, plan_swarm

SMALL = SwarmParams(
    context_tokens=4096, batch=2, steps=3, profile_steps=96, layers=2, local_window=64
)


def test_each_steps_first_select_depends_on_the_previous_token():
    h20 = load_profile("h20-8ssd")
    plan = plan_swarm(SMALL, h20, seed=0).plan.to_pandas().set_index("op_id")
    attn = plan[plan["tag"] == "attn"]
    for t in range(1, SMALL.steps):
        token = attn[(attn["step"] == t - 1) & (attn["layer"] == SMALL.layers - 1)].index
        first = plan[(plan["step"] == t) & (plan["layer"] == 0) & (plan["tag"] == "select")]
        assert len(token) == 1 and len(first) == 1
        assert int(token[0]) in list(first["depends_on"].iloc[0])


def test_without_ssd_reads_steps_are_strictly_sequential(tiny):
    rec, _, _ = _no_read_run(tiny, layers=2)
    ops = rec.ops.to_pandas()
    for t in range(1, 3):
        prev_end = ops[(ops["step"] == t - 1) & (ops["tag"] == "attn")]["end_s"].max()
        first_start = ops[ops["step"] == t]["start_s"].min()
        assert first_start >= prev_end - 1e-12


def test_makespan_is_the_sum_of_per_step_critical_paths(tiny):
    """One layer, one sequence, no SSD reads: each step is select -> copy ->
    attention, and the next step's select waits for that attention."""
    rec, p, n_sel = _no_read_run(tiny, layers=1)
    card, entry = get_model(p.model), get_model(p.model).kv_bytes_per_token_layer
    t_select = 1e9 / 100e12  # the select's 1 GFLOP at tiny's 100 TFLOPS
    t_copy = n_sel * entry / 25e9  # dram0 -> gpu0: gpu0.pcie 25 GB/s is the narrowest hop
    prefix = p.context_tokens + p.profile_steps
    total = 0.0
    for t in range(p.steps):
        visible = prefix + t + 1
        cost = decode_layer_cost(card, 1, visible, n_sel / visible)
        t_attn = max(cost.flops / 100e12, cost.hbm_bytes / 2000e9)  # tiny: 100 TFLOPS, 2 TB/s
        total += t_select + t_copy + t_attn
    ops = rec.ops.to_pandas()
    assert ops["end_s"].max() == pytest.approx(total, rel=1e-9)


def _no_read_run(tiny, layers: int):
    """A hand-made lane whose decisions read nothing from SSD: 300 entries selected
    (all in DRAM), 1 GFLOP of selection, 3 steps on the tiny machine."""
    p = dataclasses.replace(SMALL, batch=1, layers=layers, context_tokens=1000, profile_steps=0)
    n_sel, prefix = 300, p.context_tokens
    layout = layout_for(p, tiny, len(tiny.ssd_names), prefix)
    empty = [np.zeros((0, 2), dtype=np.int64) for _ in tiny.ssd_names]
    dec = StepDecision(
        selected=np.arange(n_sel), dram_entries=n_sel, ssd_extents=empty, score_flops=1e9
    )
    lane = LaneResult([dec] * p.steps, [], 0, 0, np.zeros(len(tiny.ssd_names), np.int64))
    lanes = {(0, 0): lane}
    bases = {(0, 0): np.zeros(len(tiny.ssd_names), np.int64)}
    ssds = max_io_bytes(tiny, tuple(tiny.ssd_names))
    plan = _assemble(p, tiny, ssds, layout, lanes, bases, prefix)
    assert not (plan.to_pandas()["kind"] == "read").any()
    return simulate(plan, tiny), p, n_sel

"""The per-flow and per-op shortcuts change no float.

* :data:`sim.engine.flownet.FAST`: a network with one active flow is
  re-rated and completed without the general loops and scans.  Seeded
  random flows, mostly alone on their network, some overlapping, some
  delayed: every flow's start and end time, the re-rating count and every
  resource's integrals are bit for bit those of the general paths (FAST off).
* A seeded eviction-heavy serving run (paged-cpu-ssd) gives the same
  request and op records and the same plan, column for column, with the
  one-flow shortcuts off.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import simpy

import sim.engine.flownet as flownet
from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.bench import mooncake_requests
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig

N_RES = 4


class CountingNetwork(flownet.FlowNetwork):
    """Counts re-ratings that met exactly one active flow (the shortcut's case)."""

    solo = 0

    def _rerate(self, _event: object = None) -> None:
        self.solo += len(self._fin) == 1
        super()._rerate(_event)


def _random_flows(seed: int) -> tuple[list[list[tuple]], list[float]]:
    """Groups of (start, delay, path, amount, cap) flows, and the capacities:
    each group runs on a network of its own from time 0 (so a finish time's
    last bit shows: the clock is no larger than the durations), with one
    flow (most groups), or two or three that overlap."""
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(1.0, 10.0, N_RES).tolist()
    groups = []
    for _ in range(120):
        group = []
        for _ in range(int(rng.choice([1, 1, 1, 2, 3]))):
            res = sorted({int(r) for r in rng.integers(0, N_RES, int(rng.integers(1, 3)))})
            path = [(r, float(rng.choice([1.0, 0.5, 2.0]))) for r in res]
            cap = math.inf if rng.random() < 0.6 else float(rng.uniform(0.5, 5.0))
            start = float(rng.choice([0.0, rng.uniform(0.0, 0.5)]))
            delay = float(rng.choice([0.0, rng.uniform(0.0, 0.3)]))
            group.append((start, delay, path, float(rng.uniform(0.1, 4.0)), cap))
        groups.append(group)
    return groups, capacity


def _run(
    groups, capacity, net_cls: type[flownet.FlowNetwork] = CountingNetwork, n_res: int = N_RES
) -> tuple[list[tuple[float, float]], list[flownet.FlowNetwork]]:
    """Every flow's (start, end), and each group's network (a ``net_cls``
    over ``n_res`` resources)."""
    times: list[tuple[float, float]] = []
    nets = []
    for specs in groups:
        env = simpy.Environment()
        net = net_cls(env, [f"r{i}" for i in range(n_res)], capacity)
        ends = [(math.nan, math.nan)] * len(specs)

        def done(flow: flownet.Flow, ends=ends) -> None:
            ends[flow.token] = (flow.start_s, flow.end_s)

        def starter(env, net, i, t, delay, path, amount, cap):
            yield env.timeout(t)
            net.start_after(delay, path, amount, done, cap, token=i)

        for i, spec in enumerate(specs):
            env.process(starter(env, net, i, *spec))
        env.run()
        times += ends
        nets.append(net)
    return times, nets


@pytest.mark.parametrize("seed", range(6))
def test_one_flow_shortcuts_equal_the_general_paths(monkeypatch, seed) -> None:
    groups, capacity = _random_flows(seed)
    fast_times, fast = _run(groups, capacity)
    monkeypatch.setattr(flownet, "FAST", False)
    ref_times, ref = _run(groups, capacity)
    n_flows = sum(len(g) for g in groups)
    assert sum(n.completed for n in fast) == sum(n.completed for n in ref) == n_flows
    solo, reratings = sum(n.solo for n in fast), sum(n.reratings for n in fast)
    assert n_flows // 2 < solo < reratings  # the shortcut's case was common, not the only one
    assert fast_times == ref_times  # every start and end, bit for bit
    for a, b, specs in zip(fast, ref, groups, strict=True):
        assert a.reratings == b.reratings
        assert a.busy_s == b.busy_s and a.work == b.work and a.peak == b.peak
        # work conserved (each resource moved the coef-weighted amounts that crossed it)
        for r in range(N_RES):
            moved = sum(x * c for _, _, path, x, _ in specs for q, c in path if q == r)
            assert a.work[r] == pytest.approx(moved, rel=1e-9, abs=1e-9)


def _serve() -> tuple[pa.Table, pa.Table, pa.Table]:
    profile = load_profile("h100-2dimm-2ssd")
    card = get_model("Llama-3.1-8B")
    block = 16
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=True)  # fmt: skip
    design = get_design("paged-cpu-ssd", {"cpu_gib": 0.2, "ssd_gib": 2.0})
    eng = build_engine(profile, card, design, cfg, mooncake_requests(40, block, 0))
    rec = eng.run(None)
    return rec.requests, rec.ops, eng.ops.plan()


def test_serving_run_is_the_same_with_the_general_paths(monkeypatch) -> None:
    lean = _serve()
    monkeypatch.setattr(flownet, "FAST", False)
    ref = _serve()
    assert lean[1].num_rows > 500  # many ops (730): SSD writes (metered), copies, compute
    assert set(lean[1].column("kind").to_pylist()) >= {"write", "copy", "compute"}
    for a, b in zip(lean, ref, strict=True):
        assert a.num_rows == b.num_rows > 0
        assert a.column_names == b.column_names
        for c in a.column_names:  # NaN (e.g. a request not done) equals NaN
            x, y = a.column(c).to_pylist(), b.column(c).to_pylist()
            assert all(u == v or (u != u and v != v) for u, v in zip(x, y, strict=True)), c

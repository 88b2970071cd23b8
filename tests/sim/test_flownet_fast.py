"""The flow network's rates and end times, by hand and against a plain fluid simulation.

* :class:`sim.engine.flownet.FlowNetwork` with one active flow at a time (a
  serving engine's usual case) and with a few overlapping: by hand, a capped
  flow alone (12 units at cap 3 on a 4/s link end at 4.0 after 2
  re-ratings) and a flow alone, then sharing two links, then alone again
  (end times, re-ratings, per-resource busy time, work and peak).  Seeded
  random flows, mostly alone on their network, some overlapping, some
  delayed: every start and end equals a plain fluid simulation written here
  (rates re-solved from scratch by progressive filling at every start and
  end), work is conserved, no resource is above capacity, and starting the
  same flows in the opposite order changes no end time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

import sim.engine.flownet as flownet

N_RES = 4


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
    groups, capacity, net_cls: type[flownet.FlowNetwork] = flownet.FlowNetwork, n_res: int = N_RES
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


def _by_hand(capacity, flows) -> tuple[list[tuple[float, float]], flownet.FlowNetwork]:
    """One network: flows (delay, path, amount, cap) all asked for at time 0."""
    times, nets = _run([[(0.0, *f) for f in flows]], capacity, n_res=len(capacity))
    return times, nets[0]


def test_one_capped_flow_alone_by_hand() -> None:
    # 12 units on a 4/s link, capped at 3/s: 3/s for 4 s; re-rated when it
    # starts and when it ends; the link 3/4 loaded while busy
    times, net = _by_hand([4.0], [(0.0, [(0, 1.0)], 12.0, 3.0)])
    assert times == [(0.0, 4.0)]
    assert net.reratings == 2 and net.completed == 1
    assert net.busy_s == [4.0] and net.work == [12.0] and net.peak == [0.75]


def test_alone_then_sharing_then_alone_by_hand() -> None:
    # A = 10/s, B = 4/s.  f0: 10 units on A at t=0; f1: 6 units on A and B from
    # t=0.5.  Alone f0 runs at 10 (5 units done by 0.5).  Shared: B saturates
    # first (f1 alone on it) at level 4, so f1 = 4 and f0 takes A's other 6:
    # f0's last 5 units take 5/6 s (ends 0.5 + 5/6); f1 has moved 4 x 5/6 = 10/3
    # of 6, and alone again runs at min(10, 4) = 4: 8/3 left take 2/3 s -> 2.0.
    times, net = _by_hand([10.0, 4.0], [(0.0, [(0, 1.0)], 10.0, math.inf),
                                        (0.5, [(0, 1.0), (1, 1.0)], 6.0, math.inf)])  # fmt: skip
    assert times == [(0.0, pytest.approx(0.5 + 5 / 6, rel=1e-15)), (0.5, pytest.approx(2.0))]
    # re-rated at the start, at f1's delayed start, at f0's end and at f1's end
    assert net.reratings == 4 and net.completed == 2
    assert net.busy_s == pytest.approx([2.0, 1.5], rel=1e-15)  # B busy from 0.5
    assert net.work == pytest.approx([16.0, 6.0], rel=1e-15)  # A: 10 + 6 units, B: 6
    assert net.peak == [1.0, 1.0]  # A full alone (10) and shared (6 + 4); B full


def _fair_rates(paths, caps, capacity) -> list[float]:
    """Max-min rates by progressive filling, plainly: every unfrozen flow rises by
    the largest step no resource and no cap forbids; flows on a full resource or
    at their cap freeze."""
    n = len(paths)
    rate, frozen = [0.0] * n, [False] * n
    while not all(frozen):
        live = [i for i in range(n) if not frozen[i]]
        step = min(caps[i] - rate[i] for i in live)
        for r in {r for i in live for r, _ in paths[i]}:
            used = sum(c * rate[i] for i in range(n) for q, c in paths[i] if q == r)
            weight = sum(c for i in live for q, c in paths[i] if q == r)
            step = min(step, (capacity[r] - used) / weight)
        for i in live:
            rate[i] += step
        for i in live:
            full = any(
                sum(c * rate[k] for k in range(n) for q, c in paths[k] if q == r)
                >= capacity[r] * (1 - 1e-12)
                for r, _ in paths[i]
            )
            if full or rate[i] >= caps[i] * (1 - 1e-12):
                frozen[i] = True
    return rate


def _fluid(specs, capacity) -> list[tuple[float, float]]:
    """Every flow's (start, end) by a plain fluid simulation: at each start or
    end, all active flows' rates from scratch (:func:`_fair_rates`); the clock
    moves to the next start or the next finish (flows within 1 ns of it finish
    with it, as the network's do)."""
    begin = [t + d for t, d, _, _, _ in specs]
    left = [amount for _, _, _, amount, _ in specs]
    out = [(math.nan, math.nan)] * len(specs)
    waiting = sorted(range(len(specs)), key=lambda i: begin[i])
    active: list[int] = []
    now = 0.0
    while waiting or active:
        while waiting and begin[waiting[0]] <= now:
            active.append(waiting.pop(0))
        rates = _fair_rates([specs[i][2] for i in active], [specs[i][4] for i in active], capacity)
        ttf = [left[i] / r for i, r in zip(active, rates, strict=True)]
        dt = min(ttf + ([begin[waiting[0]] - now] if waiting else []))
        still = []
        for i, r, t in zip(active, rates, ttf, strict=True):
            if t <= dt + 1e-9:
                out[i] = (begin[i], now + t)
            else:
                left[i] -= r * dt
                still.append(i)
        active = still
        now += dt
    return out


@pytest.mark.parametrize("seed", range(4))
def test_random_flows_equal_a_plain_fluid_simulation(seed) -> None:
    groups, capacity = _random_flows(seed)
    times, nets = _run(groups, capacity)
    want = [t for specs in groups for t in _fluid(specs, capacity)]
    n_flows = sum(len(g) for g in groups)
    assert sum(n.completed for n in nets) == n_flows == len(times)
    for (s, e), (ws, we) in zip(times, want, strict=True):
        assert s == ws and e == pytest.approx(we, rel=1e-9, abs=1e-9)
    for net, specs in zip(nets, groups, strict=True):
        assert max(net.peak) <= 1 + 1e-9  # no resource above capacity
        # work conserved (each resource moved the coef-weighted amounts that crossed it)
        for r in range(N_RES):
            moved = sum(x * c for _, _, path, x, _ in specs for q, c in path if q == r)
            assert net.work[r] == pytest.approx(moved, rel=1e-9, abs=1e-9)
    # the same flows started in the opposite order: the same end times
    back, _ = _run([g[::-1] for g in groups], capacity)
    k = 0
    for g in groups:
        for (s, e), (bs, be) in zip(times[k : k + len(g)], back[k : k + len(g)][::-1], strict=True):
            assert bs == s and be == pytest.approx(e, rel=1e-12, abs=1e-12)
        k += len(g)

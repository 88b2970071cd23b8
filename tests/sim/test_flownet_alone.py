"""Flows started alone (FlowNetwork.start_alone): end times by hand, no
re-rating, and the same end times as flows started through the re-rating."""

import math

import numpy as np
import pytest
import simpy

from sim.engine.flownet import FlowNetwork


def run(capacity, flows):
    """flows: (start_time, resource, amount, alone) on coef-1 paths, no cap ->
    (end times, network)."""
    env = simpy.Environment()
    net = FlowNetwork(env, [f"r{i}" for i in range(len(capacity))], capacity)
    ends = [math.nan] * len(flows)

    def starter(i, t, r, amount, alone):
        yield env.timeout(t)

        def done(f, i=i):
            assert math.isnan(ends[i]), "a flow ended twice"
            ends[i] = env.now
            assert f.end_s == env.now

        sig = net.intern([(r, 1.0)])
        (net.start_alone if alone else net.start_sig)(sig, amount, done)

    for i, (t, r, amount, alone) in enumerate(flows):
        env.process(starter(i, t, r, amount, alone))
    env.run()
    return ends, net


def test_a_lone_flow_ends_at_its_amount_over_the_capacity_without_a_rerating():
    # 10 units at 4/s: 2.5 s; nothing re-rated, the integrals and peak as for any flow
    ends, net = run([4.0], [(1.0, 0, 10.0, True)])
    assert ends == [1.0 + 10.0 / 4.0]
    assert net.reratings == 0
    assert net.completed == 1
    assert net.busy_s == [2.5]
    assert net.work == [10.0]
    assert net.peak == [1.0]
    assert net.flows == []


def test_lone_flows_back_to_back_sum_their_time():
    # one after another on one resource (an engine's iterations): 1 s, then 0.5 s
    ends, net = run([2.0], [(0.0, 0, 2.0, True), (1.25, 0, 1.0, True)])
    assert ends == [1.0, 1.75]
    assert net.busy_s == [1.5]
    assert net.work == [3.0]  # 1.5 s at 2 units/s
    assert net.reratings == 0


def test_a_flow_joining_a_lone_one_shares_its_resource_from_then_on():
    # f0: 2 units alone at 1/s from 0; f1 (0.5 units) joins at 1: both at 0.5/s,
    # f1 ends at 2 (f0 has 1 - 0.5 = 0.5 left), f0 alone again at 1/s: ends at 2.5
    ends, net = run([1.0], [(0.0, 0, 2.0, True), (1.0, 0, 0.5, False)])
    assert ends == [2.5, 2.0]
    assert net.busy_s == [2.5]
    assert net.work == [2.5]
    assert net.completed == 2


def test_a_lone_flow_joined_at_its_own_instant_is_rated_with_the_joiner():
    # both start at 0 on one resource (1/s): 0.5/s each, f1 (0.5 units) ends at 1,
    # f0 then has 1.5 left at 1/s: ends at 2.5; its own scheduled end (at 2) is stale
    ends, net = run([1.0], [(0.0, 0, 2.0, True), (0.0, 0, 0.5, True)])
    assert ends == [2.5, 1.0]
    assert net.busy_s == [2.5]
    assert net.completed == 2


def test_lone_flows_on_other_resources_leave_the_shared_ones_alone():
    # r0 shared by two flows (1 unit each at 0.5/s: both end at 2); a lone flow on
    # r1 (3 units at 1/s) starts and ends meanwhile without re-rating r0's flows
    ends, net = run([1.0, 1.0], [(0.0, 0, 1.0, False), (0.0, 0, 1.0, False),
                                 (0.5, 1, 1.0, True)])  # fmt: skip
    assert ends == [2.0, 2.0, 1.5]
    assert net.reratings == 2  # the start of r0's flows, their end
    assert net.busy_s == [2.0, 1.0]


def test_lone_flows_end_when_flows_started_through_the_rerating_would():
    # an engine-like mix: per resource a stream of flows, some overlapping (every
    # path coef 1 and no cap, so rates do not depend on the flows' order: 1/k for
    # k flows); started alone or through the re-rating, every end time is the same
    # float and the integrals agree
    rng = np.random.default_rng(7)
    flows = []
    for r in range(3):
        t = 0.0
        for _ in range(40):
            t += float(rng.exponential(0.3))
            flows.append((t, r, float(rng.uniform(0.01, 1.0))))
    alone, net_a = run([1.0] * 3, [(t, r, a, True) for t, r, a in flows])
    shared, net_s = run([1.0] * 3, [(t, r, a, False) for t, r, a in flows])
    assert not any(math.isnan(e) for e in shared)
    assert alone == shared
    assert net_a.completed == net_s.completed == len(flows)
    assert net_a.busy_s == pytest.approx(net_s.busy_s, rel=1e-12)
    assert net_a.work == pytest.approx(net_s.work, rel=1e-12)
    assert net_a.reratings < net_s.reratings


def test_flows_joining_lone_ones_end_when_all_started_through_the_rerating_would():
    # flows on two resources, half asking to start alone (those that find their
    # resource busy start as any flow; the others are joined by later ones, often
    # at the instant they start): every end time is the one the re-rating gives
    # when every flow is started through it (coef 1, no cap: rates 1/k)
    rng = np.random.default_rng(11)
    flows = []
    for r in range(2):
        t = 0.0
        for _ in range(60):
            gap = float(rng.exponential(0.5)) if rng.random() > 0.25 else 0.0
            t += gap  # a quarter start at the instant of the flow before
            flows.append((t, r, float(rng.uniform(0.05, 0.5)), bool(rng.integers(2))))
    mixed, net_m = run([1.0, 2.0], flows)
    shared, _ = run([1.0, 2.0], [(t, r, a, False) for t, r, a, _ in flows])
    assert not any(math.isnan(e) for e in mixed)
    assert mixed == shared
    assert net_m.completed == len(flows)
    assert net_m.flows == [] and all(f is None for f in net_m._alone)

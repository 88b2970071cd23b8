"""The simpy flow network: completion times by hand, and invariants."""

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.flownet import FlowNetwork


def run(capacity, flows):
    """flows: (start_time, path, amount, cap) -> list of end times."""
    env = simpy.Environment()
    net = FlowNetwork(env, [f"r{i}" for i in range(len(capacity))], capacity)
    ends = [math.nan] * len(flows)

    def starter(i, t, path, amount, cap):
        yield env.timeout(t)

        def done(f, i=i):
            ends[i] = env.now

        net.start(path, amount, done, cap=cap)

    for i, (t, path, amount, cap) in enumerate(flows):
        env.process(starter(i, t, path, amount, cap))
    env.run()
    return ends, net


def test_one_flow_one_link():
    ends, net = run([4.0], [(0.0, [(0, 1.0)], 10.0, math.inf)])
    assert ends == [pytest.approx(2.5)]
    assert net.busy_s[0] == pytest.approx(2.5)
    assert net.work[0] == pytest.approx(10.0)
    assert net.peak[0] == pytest.approx(1.0)


def test_n_flows_sharing_finish_together():
    ends, _ = run([10.0], [(0.0, [(0, 1.0)], 5.0, math.inf)] * 4)
    assert ends == pytest.approx([2.0] * 4)  # 20 units at 10/s


def test_late_joiner_rerates_both():
    # f0: 10 units alone at 10/s for 0.5 s (5 done), then shares 5/s each:
    # f0 finishes its other 5 at t=1.5; f1 then has 5 of 10 left at 10/s -> t=2.0
    ends, _ = run([10.0], [(0.0, [(0, 1.0)], 10.0, math.inf), (0.5, [(0, 1.0)], 10.0, math.inf)])
    assert ends == pytest.approx([1.5, 2.0])


def test_textbook_two_links_over_time():
    # A=10, B=4; f0 on A+B (8 units), f1 on A (8 units): f0 gets 4, f1 6.
    # f1 ends at 8/6 = 1.333; f0 has 8 - 4*1.333 = 2.667 left at 4/s -> 2.0
    ends, _ = run(
        [10.0, 4.0], [(0.0, [(0, 1), (1, 1)], 8.0, math.inf), (0.0, [(0, 1)], 8.0, math.inf)]
    )
    assert ends == pytest.approx([2.0, 4 / 3])


def test_flow_cap_binds():
    ends, _ = run([100.0], [(0.0, [(0, 1.0)], 10.0, 2.0)])
    assert ends == [pytest.approx(5.0)]


def test_bad_amounts_are_rejected():
    env = simpy.Environment()
    net = FlowNetwork(env, ["a"], [1.0])
    with pytest.raises(ValueError):
        net.start([(0, 1.0)], 0.0)
    with pytest.raises(ValueError):
        FlowNetwork(env, ["a"], [0.0])


scenario = st.lists(
    st.tuples(
        st.floats(0.0, 3.0),  # start time
        st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
        st.floats(0.1, 20.0),  # amount
        st.one_of(st.just(math.inf), st.floats(0.5, 20.0)),  # cap
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=150, deadline=None)
@given(scenario, st.lists(st.floats(1.0, 30.0), min_size=4, max_size=4))
def test_invariants(spec, capacity):
    flows = [(t, [(r, 1.0) for r in res], amount, cap) for t, res, amount, cap in spec]
    ends, net = run(capacity, flows)
    # every flow completes, never before its transfer could physically finish
    for (t, path, amount, cap), end in zip(flows, ends, strict=True):
        fastest = min([capacity[r] for r, _ in path] + [cap])
        assert end >= t + amount / fastest - 1e-9
    # bytes conserved: the work each resource did is the bytes that crossed it
    for r in range(4):
        expected = sum(amount for _, path, amount, _ in flows if any(q == r for q, _ in path))
        assert net.work[r] == pytest.approx(expected, rel=1e-6, abs=1e-6)
        # never above capacity
        assert net.peak[r] <= 1 + 1e-9
        # busy time is at least what the bytes need at full speed
        assert net.busy_s[r] >= expected / capacity[r] - 1e-9
    # same input, same result, bit for bit
    ends2, _ = run(capacity, flows)
    assert ends2 == ends


def test_delayed_start_equals_a_late_joiner():
    # as test_late_joiner_rerates_both, but f1 is queued by start_after(0.5) at t=0:
    # f0 alone at 10/s for 0.5 s, then 5/s each -> f0 ends 1.5, f1 at 2.0
    env = simpy.Environment()
    net = FlowNetwork(env, ["a"], [10.0])
    ends = {}
    f0 = net.start([(0, 1.0)], 10.0, lambda f: ends.setdefault("f0", env.now))
    net.start_after(0.5, [(0, 1.0)], 10.0, lambda f: ends.setdefault("f1", env.now))
    env.run()
    assert ends == pytest.approx({"f0": 1.5, "f1": 2.0})
    assert f0.start_s == 0.0
    assert net.work[0] == pytest.approx(20.0)  # both flows' units crossed the link
    assert net.busy_s[0] == pytest.approx(2.0)  # never idle from 0 to 2


def test_delayed_start_alone_waits_then_runs_at_capacity():
    # nothing active: the network's timer serves the start at 1.0; 8 units at 4/s -> 3.0
    env = simpy.Environment()
    net = FlowNetwork(env, ["a"], [4.0])
    ends = []
    net.start_after(1.0, [(0, 1.0)], 8.0, lambda f: ends.append((f.start_s, env.now)))
    env.run()
    assert ends == [pytest.approx((1.0, 3.0))]
    assert net.busy_s[0] == pytest.approx(2.0)  # idle during the delay
    with pytest.raises(ValueError):
        net.start_after(1.0, [(0, 1.0)], 8.0, cap=0.0)

"""The flow network's memoised, incremental re-rating against a full re-solve.

Random flows (seeded) start and end on a network of several loosely shared
resources, so a re-rating often meets a mix of flows not seen before and
re-solves only the components the started and ended flows touch.  After every
re-rating the rates the network gives its active flows must equal a full
progressive filling of them, and the work integrals must equal the bytes that
crossed each resource."""

import math

import numpy as np
import pytest
import simpy

import sim.engine.flownet as flownet
from sim.engine.flownet import FlowNetwork
from sim.engine.maxmin import maxmin_rates

N_RES = 8


class CheckedNetwork(FlowNetwork):
    """A network that compares its rates with a full re-solve after each re-rating."""

    checked = 0

    def _rerate(self, _event: object = None) -> None:
        super()._rerate(_event)
        if not self.flows:
            return
        paths = [self._paths[f.sig] for f in self.flows]
        caps = [self._caps[f.sig] for f in self.flows]
        full = maxmin_rates(paths, caps, self.capacity)
        assert self._rate == pytest.approx(full, rel=1e-9)
        self.checked += 1


def random_run(seed: int, n_flows: int = 60):
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    capacity = rng.uniform(1.0, 10.0, N_RES).tolist()
    net = CheckedNetwork(env, [f"r{i}" for i in range(N_RES)], capacity)
    specs = []
    for _ in range(n_flows):
        # mostly one or two resources out of a cluster of 3, so components stay small
        base = int(rng.integers(0, N_RES))
        k = int(rng.integers(1, 3))
        res = sorted({(base + int(d)) % N_RES for d in rng.integers(0, 3, k)})
        path = [(r, float(rng.choice([1.0, 0.5, 2.0]))) for r in res]
        cap = math.inf if rng.random() < 0.6 else float(rng.uniform(0.5, 5.0))
        start = float(rng.integers(0, 10)) * 0.5  # often several flows at one instant
        delay = float(rng.choice([0.0, rng.uniform(0.0, 0.5)]))
        specs.append((start, delay, path, float(rng.uniform(0.5, 10.0)), cap))

    def starter(t, delay, path, amount, cap):
        yield env.timeout(t)
        net.start_after(delay, path, amount, None, cap)

    for spec in specs:
        env.process(starter(*spec))
    env.run()
    return net, specs


@pytest.mark.parametrize("seed", range(12))
def test_incremental_rerating_equals_full_resolve(seed):
    net, specs = random_run(seed)
    assert net.completed == len(specs)
    assert net.checked > len(specs)  # every start and end re-rated and was checked
    assert net.solved  # the incremental path ran (mixes not seen before)
    # work conserved: each resource's integral is the coef-weighted amount that crossed it
    for r in range(N_RES):
        expected = sum(a * c for _, _, path, a, _ in specs for q, c in path if q == r)
        assert net.work[r] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_folding_a_full_memo_keeps_integrals_and_rates(monkeypatch):
    # a memo of at most 3 mixes is folded into the totals again and again: the
    # rates still equal a full re-solve, work is conserved, and busy time is the
    # same as with an unbounded memo
    net_big, specs = random_run(3)
    monkeypatch.setattr(flownet, "_MEMO_MAX", 3)
    net, _ = random_run(3)
    assert len(net._memo) <= 3
    for r in range(N_RES):
        expected = sum(a * c for _, _, path, a, _ in specs for q, c in path if q == r)
        assert net.work[r] == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert net.busy_s[r] == pytest.approx(net_big.busy_s[r], rel=1e-12, abs=1e-12)


def _two_links(join_at: float | None):
    """Links L0 (10/s) and L1 (4/s), and an unused L2 (so two links are not
    every resource); a1, a2 (10, 20 units) on L0 and b1, b2 (8, 16) on L1 from
    t=0; with ``join_at``, a flow j (6 units) over both links from then.  The
    network's state (rate, finish) per flow is read at t=0.5, 1.5 and 2.5."""
    env = simpy.Environment()
    net = FlowNetwork(env, ["L0", "L1", "L2"], [10.0, 4.0, 1.0])
    for name, r, amount in [("a1", 0, 10.0), ("a2", 0, 20.0), ("b1", 1, 8.0), ("b2", 1, 16.0)]:
        net.start([(r, 1.0)], amount, token=name)
    if join_at is not None:
        net.start_after(join_at, [(0, 1.0), (1, 1.0)], 6.0, token="j")
    seen = {}

    def look():
        for t in (0.5, 1.5, 2.5):
            yield env.timeout(t - env.now)
            state = {f.token: (net._rate[k], net._fin[k]) for k, f in enumerate(net.flows)}
            seen[t] = (state, net.solved)

    env.process(look())
    ends = {}
    for f in list(net.flows):
        f.on_done = lambda g: ends.__setitem__(g.token, g.end_s)
    env.run()
    return net, seen, ends


def test_a_change_in_one_component_leaves_the_other_unsolved():
    # by hand: L0 shares 10/s between a1 and a2 (5 each: a1 ends at 2, a2 then
    # alone at 10/s has 10 left, ends at 3); L1 shares 4/s between b1 and b2
    # (2 each: b1 ends at 4, b2 then alone at 4/s has 8 left, ends at 6).
    # a1's end re-solves a2 alone (1 flow); b1 and b2 keep rate and finish.
    net, seen, ends = _two_links(None)
    state, solved = seen[1.5]
    assert solved == 4  # t=0: both components, 2 flows each
    assert state == {"a1": (5.0, 2.0), "a2": (5.0, 4.0), "b1": (2.0, 4.0), "b2": (2.0, 8.0)}
    state, solved = seen[2.5]
    assert solved == 5  # a1's end re-solved a2 only
    assert state == {"a2": (10.0, 3.0), "b1": (2.0, 4.0), "b2": (2.0, 8.0)}
    # a2's end (t=3) leaves L0 empty: nothing to re-solve; b1's end re-solves b2
    assert net.solved == 6
    assert ends == {"a1": 2.0, "a2": 3.0, "b1": 4.0, "b2": 6.0}


def test_a_shared_link_joins_the_components():
    # j over both links from t=1 joins them: its start re-solves all five flows.
    # By progressive filling L1 saturates first, at 4/3 each for b1, b2, j;
    # L0's remaining 10 - 4/3 goes to a1 and a2 (13/3 each).  Then every
    # change on L0 reaches L1's flows through j, and back
    net, seen, ends = _two_links(1.0)
    assert seen[0.5][1] == 4
    state, solved = seen[1.5]
    assert solved == 4 + 5
    rates = {k: v[0] for k, v in state.items()}
    assert rates == pytest.approx(
        {"a1": 13 / 3, "a2": 13 / 3, "b1": 4 / 3, "b2": 4 / 3, "j": 4 / 3}
    )
    # a1 has 10 - 5 = 5 units left at t=1 and ends at 1 + 5 / (13/3) = 2.1538...:
    # the four others (a2, j, b1, b2: one component) are re-solved together
    assert ends["a1"] == pytest.approx(1 + 15 / 13)
    assert seen[2.5][1] == 4 + 5 + 4
    assert net.work[0] == pytest.approx(10 + 20 + 6)  # every unit crossed its links
    assert net.work[1] == pytest.approx(8 + 16 + 6)

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
import sim.engine.mixsolve as mixsolve
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
def test_incremental_rerating_equals_full_resolve(seed, monkeypatch):
    calls = []
    real = mixsolve.components

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(mixsolve, "components", counting)
    net, specs = random_run(seed)
    assert net.completed == len(specs)
    assert net.checked > len(specs)  # every start and end re-rated and was checked
    assert calls  # the incremental path ran (mixes of paths not seen before)
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

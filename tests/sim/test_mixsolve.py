"""Path-memoised re-solves (:mod:`sim.engine.mixsolve`) change no float.

* By hand: two flows share a 10-unit link.  With caps 6 and none the cap-free
  rates 5 / 5 stand (6 > 5 x (1 + 1e-12)) and come from the memo; with cap 3
  the cap binds (3 / 7) and the component is solved with its caps.
* Seeded random networks, each with many overlapping flows that carry their
  own caps (most far above any rate, some binding, some just above their
  fair share): every answer the solver gives is, bit for bit, a fresh
  progressive filling of the same flows (the whole mix when the changes
  touch every resource, else each touched component alone, the other flows
  keeping their rates), the memo spared progressive-filling runs, every
  flow's start and end equals the plain fluid simulation of
  tests/sim/test_flownet_fast.py, and each resource's peak is the largest
  load the mixes put on it, never above capacity.
* the test's ``changed_sigs`` (the flows that started or ended since the
  last mix, read off the mix's order, the checked network's reference) is the multiset difference
  that :class:`collections.Counter` gives, on seeded random mixes.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import sim.engine.flownet as flownet
import sim.engine.mixsolve as mixsolve
from sim.engine.maxmin import components, maxmin_rates
from tests.sim.test_flownet_fast import _fluid
from tests.sim.test_flownet_fast import _run as _run_on

N_RES = 5


def _solver_with_count(monkeypatch) -> tuple[mixsolve.MixSolver, list[int]]:
    calls = [0]

    def counted(paths, caps, capacity):
        calls[0] += 1
        return maxmin_rates(paths, caps, capacity)

    monkeypatch.setattr(mixsolve, "maxmin_rates", counted)
    return mixsolve.MixSolver([10.0]), calls


def test_caps_above_the_fair_share_use_the_cap_free_rates(monkeypatch) -> None:
    solver, calls = _solver_with_count(monkeypatch)
    path = ((0, 1.0),)
    p = solver.path_sig(path)
    first = solver.component((p, p), [path, path], [6.0, math.inf])
    assert first == [5.0, 5.0] and calls[0] == 1  # solved once, cap-free
    again = solver.component((p, p), [path, path], [8.0, 7.0])
    assert again == [5.0, 5.0] and calls[0] == 1  # from the memo: both caps above 5
    bound = solver.component((p, p), [path, path], [3.0, 7.0])
    assert bound == [3.0, 7.0] and calls[0] == 2  # cap 3 binds: solved with the caps


def _random_groups(seed: int) -> tuple[list[list[tuple]], list[float]]:
    """Networks of 30-60 flows each (start, delay, path, amount, cap) over a few
    shared paths, each flow with a cap of its own."""
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(1.0, 10.0, N_RES).tolist()
    paths = []
    for _ in range(6):
        res = sorted({int(r) for r in rng.integers(0, N_RES, int(rng.integers(1, 4)))})
        paths.append([(r, float(rng.choice([1.0, 0.5, 2.0]))) for r in res])
    groups = []
    for _ in range(8):
        group = []
        for _ in range(int(rng.integers(30, 60))):
            path = paths[int(rng.integers(0, len(paths)))]
            u = rng.random()
            cap = (
                float(rng.uniform(1e3, 1e4))  # never binds (an op's queue-depth bound)
                if u < 0.6
                else float(rng.uniform(0.2, 6.0))  # binds or sits near the fair share
                if u < 0.9
                else math.inf
            )
            start = float(rng.uniform(0.0, 20.0))
            delay = float(rng.choice([0.0, rng.uniform(0.0, 0.3)]))
            group.append((start, delay, path, float(rng.uniform(0.1, 4.0)), cap))
        groups.append(group)
    return groups, capacity


def _run(groups, capacity) -> tuple[list[tuple[float, float]], list[flownet.FlowNetwork]]:
    """Every flow's (start, end), and each group's plain network."""
    return _run_on(groups, capacity, flownet.FlowNetwork, N_RES)


def changed_sigs(last: tuple[int, ...], key: tuple[int, ...], rate: list[float]) -> list[int]:
    """Signatures of the flows that started or ended since the mix ``last``,
    read off the mixes alone (independently of the network's own bookkeeping):
    started ones still have rate 0 in ``key``; those with a rate are the flows
    of ``last`` still running, in their order there, so the ended ones are what
    a greedy walk of ``last`` does not match."""
    started = [s for s, r in zip(key, rate, strict=True) if not r]
    running = [s for s, r in zip(key, rate, strict=True) if r]
    j, n = 0, len(running)
    for s in last:
        if j < n and running[j] == s:
            j += 1
        else:
            started.append(s)
    return started


class _CheckedNetwork(flownet.FlowNetwork):
    """A network whose every re-solve is checked against fresh progressive
    fillings of the same flows (:func:`maxmin_rates`, not the memo's) under the
    incremental rule written plainly: the whole mix when the changes touch
    every resource, else each touched component (:func:`components` of the
    whole mix) alone, in mix order, the other flows keeping their rates."""

    checked = 0
    fresh = 0  # progressive fillings the answers would cost without the memo

    def _solve(self, key):
        old = list(self._rate)
        touched = {r for s in changed_sigs(self._key, key, old) for r, _ in self._paths[s]}
        fpaths = [self._paths[s] for s in key]
        fcaps = [self._caps[s] for s in key]
        mix, moved = super()._solve(key)
        if len(touched) >= len(self.capacity):
            want = maxmin_rates(fpaths, fcaps, self.capacity)
            self.fresh += 1
        else:
            want = list(old)
            for comp in components(fpaths):
                if any(not fpaths[i] or any(r in touched for r, _ in fpaths[i]) for i in comp):
                    sub = [fpaths[i] for i in comp], [fcaps[i] for i in comp]
                    self.fresh += 1
                    for i, rate in zip(comp, maxmin_rates(*sub, self.capacity), strict=True):
                        want[i] = rate
        assert mix.rates == want  # bit for bit
        assert all(want[k] == old[k] for k in set(range(len(key))) - set(moved))
        self.checked += 1
        return mix, moved


@pytest.mark.parametrize("seed", range(4))
def test_memoised_solves_are_fresh_solves(monkeypatch, seed) -> None:
    groups, capacity = _random_groups(seed)
    calls = [0]

    def counted(paths, caps, cap_):
        calls[0] += 1
        return maxmin_rates(paths, caps, cap_)

    monkeypatch.setattr(mixsolve, "maxmin_rates", counted)
    times, nets = _run_on(groups, capacity, _CheckedNetwork, N_RES)
    fresh = sum(n.fresh for n in nets)
    assert sum(n.checked for n in nets) > len(times)  # most starts and ends re-solved
    assert calls[0] < fresh  # the memo spared progressive-filling runs
    want = [t for specs in groups for t in _fluid(specs, capacity)]
    assert all(not math.isnan(e) for _, e in want)
    for (s, e), (ws, we) in zip(times, want, strict=True):
        assert s == ws and e == pytest.approx(we, rel=1e-9, abs=1e-9)
    for a in nets:
        # every peak is the largest load over capacity among the mixes seen (no
        # fold: the memo holds them all), loads shared between mixes or not
        for r in range(N_RES):
            ups = [m.loads.get(r, 0.0) / capacity[r] for m in a._memo.values()]
            assert a.peak[r] == max(ups) <= 1 + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_changed_sigs_is_the_multiset_difference(seed) -> None:
    # a mix of signatures (repeats included) loses flows anywhere and gains
    # some at the end (rate 0): the changed ones are the lost plus the new,
    # counted as a multiset (Counter arithmetic, computed independently)
    rng = np.random.default_rng(seed)
    last = tuple(int(s) for s in rng.integers(0, 4, int(rng.integers(0, 9))))
    keep = rng.random(len(last)) < 0.6
    new = [int(s) for s in rng.integers(0, 4, int(rng.integers(0, 3)))]
    key = tuple([s for s, k in zip(last, keep, strict=True) if k] + new)
    rate = [1.5] * int(keep.sum()) + [0.0] * len(new)
    got = changed_sigs(last, key, rate)
    lost = Counter(last) - Counter(s for s, k in zip(last, keep, strict=True) if k)
    assert Counter(got) == lost + Counter(new)
    assert sorted(got) == sorted(list(lost.elements()) + new)

"""Progressive filling: textbook cases by hand, and the max-min property."""

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.maxmin import Path, components, maxmin_rates

INF = math.inf


def test_one_flow_one_link():
    assert maxmin_rates([[(0, 1.0)]], [INF], [10.0]) == [10.0]


@pytest.mark.parametrize("n", [2, 3, 7])
def test_n_flows_share_equally(n):
    assert maxmin_rates([[(0, 1.0)]] * n, [INF] * n, [12.0]) == pytest.approx([12.0 / n] * n)


def test_textbook_two_links():
    # Bertsekas & Gallager: f0 crosses A and B, f1 only A, f2 only B.
    # A=10, B=4: B is shared by f0 and f2 -> 2 each; f1 takes A's rest, 8.
    rates = maxmin_rates([[(0, 1), (1, 1)], [(0, 1)], [(1, 1)]], [INF] * 3, [10.0, 4.0])
    assert rates == pytest.approx([2.0, 8.0, 2.0])


def test_flow_bounded_by_slowest_hop():
    assert maxmin_rates([[(0, 1), (1, 1), (2, 1)]], [INF], [10.0, 3.0, 7.0]) == [3.0]


def test_cap_frees_capacity_for_others():
    # f0 capped at 1 on a 10-wide link: f1 gets the remaining 9
    assert maxmin_rates([[(0, 1)], [(0, 1)]], [1.0, INF], [10.0]) == pytest.approx([1.0, 9.0])


def test_coefficients_time_share_a_device():
    # a device of capacity 1 (time); f0 alone would get 4 (coef 1/4), f1 alone 1 (coef 1).
    # max-min: equal rates r with r/4 + r/1 = 1 -> r = 0.8
    rates = maxmin_rates([[(0, 0.25)], [(0, 1.0)]], [INF, INF], [1.0])
    assert rates == pytest.approx([0.8, 0.8])


def test_flow_with_nothing_to_bound_it_is_an_error():
    with pytest.raises(ValueError, match="no resource"):
        maxmin_rates([[]], [INF], [])


flows = st.lists(
    st.tuples(
        st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True),
        st.one_of(st.just(INF), st.floats(0.1, 50.0)),
        st.floats(0.2, 3.0),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(flows, st.lists(st.floats(0.5, 100.0), min_size=5, max_size=5))
def test_maxmin_properties(spec, capacity):
    paths = [[(r, coef) for r in res] for res, _, coef in spec]
    caps = [cap for _, cap, _ in spec]
    rates = maxmin_rates(paths, caps, capacity)
    load = [0.0] * 5
    for path, rate in zip(paths, rates, strict=True):
        for r, c in path:
            load[r] += c * rate
    # feasibility: no resource above capacity, no flow above its cap
    for r in range(5):
        assert load[r] <= capacity[r] * (1 + 1e-9)
    for rate, cap in zip(rates, caps, strict=True):
        assert 0 < rate <= cap * (1 + 1e-9)
    # max-min: every flow is at its cap, or crosses a saturated resource on
    # which no other flow has a higher rate (it cannot grow without hurting a
    # flow that is no richer than itself)
    for i, (path, rate) in enumerate(zip(paths, rates, strict=True)):
        if rate >= caps[i] * (1 - 1e-9):
            continue
        ok = False
        for r, _ in path:
            if load[r] >= capacity[r] * (1 - 1e-9):
                others = [rates[j] for j, p in enumerate(paths) if any(q == r for q, _ in p)]
                if rate >= max(others) * (1 - 1e-9):
                    ok = True
        assert ok, f"flow {i} is neither capped nor bottlenecked"


def test_components_split_on_shared_resources():
    # f0 and f1 share r1; f2 is alone on r5, f3 on r7; f4 crosses no resource
    paths = [[(0, 1), (1, 1)], [(1, 1), (2, 1)], [(5, 1)], [(7, 1)], []]
    comps = sorted(sorted(c) for c in components(paths))
    assert comps == [[0, 1], [2], [3], [4]]


def maxmin_rates_incremental(
    paths: Sequence[Path],
    caps: Sequence[float],
    capacity: Sequence[float],
    rates: Sequence[float],
    touched: set[int],
) -> list[float]:
    """The incremental rule :meth:`sim.engine.flownet.FlowNetwork._solve` implements,
    written plainly: rates after flows started or ended, re-solving only what
    they affect.

    ``rates[i]`` is flow i's rate before the change (any value for a new flow);
    ``touched`` holds the resources of every flow that started or ended.  Each
    component (:func:`components`) that crosses a touched resource, or holds a
    flow with no resource, is re-solved by :func:`maxmin_rates`; every other
    flow keeps its rate, which is exact because components do not interact."""
    out = list(rates)
    for comp in components(paths):
        if any(not paths[i] or any(r in touched for r, _ in paths[i]) for i in comp):
            sub = maxmin_rates([paths[i] for i in comp], [caps[i] for i in comp], capacity)
            for i, rate in zip(comp, sub, strict=True):
                out[i] = rate
    return out


def _random_flows(rng, n, nres):
    paths, caps = [], []
    for _ in range(n):
        k = int(rng.integers(1, 4))
        res = rng.choice(nres, size=k, replace=False)
        paths.append([(int(r), float(rng.uniform(0.2, 2.0))) for r in res])
        caps.append(INF if rng.random() < 0.6 else float(rng.uniform(0.1, 5.0)))
    return paths, caps


@pytest.mark.parametrize("seed", range(40))
def test_incremental_equals_full_resolve(seed):
    rng = np.random.default_rng(seed)
    nres = 12
    capacity = rng.uniform(1.0, 10.0, size=nres).tolist()
    paths, caps = _random_flows(rng, int(rng.integers(2, 25)), nres)
    rates = maxmin_rates(paths, caps, capacity)
    # a flow ends and two start: the touched resources are theirs
    gone = int(rng.integers(len(paths)))
    touched = {r for r, _ in paths[gone]}
    del paths[gone], caps[gone], rates[gone]
    new_paths, new_caps = _random_flows(rng, 2, nres)
    for p in new_paths:
        touched |= {r for r, _ in p}
    paths += new_paths
    caps += new_caps
    rates += [0.0, 0.0]
    inc = maxmin_rates_incremental(paths, caps, capacity, rates, touched)
    full = maxmin_rates(paths, caps, capacity)
    assert inc == pytest.approx(full, rel=1e-9, abs=1e-12)
    # flows whose component was not touched kept their old rate exactly
    for comp in components(paths):
        if not any(r in touched for i in comp for r, _ in paths[i]):
            assert [inc[i] for i in comp] == [rates[i] for i in comp]

"""The pruned search finds exactly the exhaustive grid's Pareto fronts, with fewer simulations."""

from __future__ import annotations

from sim.capacity.evaluate import Question
from sim.capacity.executors import LocalExecutor
from sim.capacity.prices import add_costs, load_prices
from sim.capacity.search import Space, front_keys, search


def test_pruned_front_equals_exhaustive():
    q = Question(docs=4, context_tokens=65536)
    space = Space(("lmcache", "pool"), ("Samsung 9100 PRO 2 TB",), (1, 2, 3, 4), (1, 2), (32.0,))
    ex = LocalExecutor(2)
    pruned = search(q, space, ex)
    full = search(q, space, ex, prune=False)
    prices = load_prices()
    a, b = add_costs(pruned.rows, q.base, prices), add_costs(full.rows, q.base, prices)
    assert full.simulated == space.size == 16
    assert pruned.simulated < full.simulated  # reported: see the closing note
    assert front_keys(a, "cost_usd") == front_keys(b, "cost_usd")
    print(f"pruned {pruned.simulated} vs exhaustive {full.simulated} simulations")

"""The pruned search finds exactly the exhaustive grid's Pareto fronts, with fewer simulations."""

from __future__ import annotations

from sim.capacity.evaluate import Question
from sim.capacity.prices import add_costs, load_prices
from sim.capacity.search import Space, front_keys, pareto, search
from sim.parallel import LocalExecutor


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


def test_pruned_front_equals_exhaustive_with_a_gpu_dimension():
    """Llama-3.1-8B tensor parallel over 1, 4 or 8 of h20-8ssd's H20s: the GPU walk
    (counts started in order, stopped where more GPUs stop helping) keeps the fronts."""
    q = Question(base="h20-8ssd", docs=2, context_tokens=16384)
    pm = "Samsung PM9A3 3.84 TB U.2"
    space = Space(("lmcache", "pool"), (pm,), (1, 2, 4), (1,), (64.0,), (1, 4, 8))
    ex = LocalExecutor(2)
    pruned = search(q, space, ex)
    full = search(q, space, ex, prune=False)
    prices = load_prices()
    a, b = add_costs(pruned.rows, q.base, prices), add_costs(full.rows, q.base, prices)
    assert full.simulated == space.size == 18
    assert pruned.simulated < full.simulated
    assert front_keys(a, "cost_usd") == front_keys(b, "cost_usd")
    # every GPU count is on the cost-vs-TTFT front: more GPUs cost more and prefill faster
    assert set(pareto(b, "cost_usd", "ttft_p99_s")["gpus"]) == {1, 4, 8}
    print(f"pruned {pruned.simulated} vs exhaustive {full.simulated} simulations")

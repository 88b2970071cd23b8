"""An iteration's work (sim/serving/policy/costs.py) on the tiny cards of
tests/sim/test_models.py, worked by hand, and the same floats whatever the
calls before (the counts kept per batch shape are the ones computed afresh)."""

from __future__ import annotations

import pytest

from sim.models import decode_layer_cost, get_model, prefill_layer_cost
from sim.serving.policy.costs import IterationCost, iteration_cost, iteration_layer_cost
from tests.sim.test_models import TINY, TINY_MOE


def test_a_mixed_batch_by_hand() -> None:
    """TINY: 576 parameters a layer, 32 FLOPs a (query, key) pair, 16 KV bytes a
    token, weights 1,152 bytes.  A chunk of 4 tokens after 6 cached, a chunk of 3
    after none, decodes after 100 and 50 cached: 9 tokens; pairs 4 x 6 + 10 + 3 x 0
    + 6 + 101 + 51 = 192; KV tokens 10 + 3 + 101 + 51 = 165.  FLOPs 2 x 576 x 9 +
    32 x 192 = 16,512; HBM 1,152 + 165 x 16 = 3,792 bytes."""
    layer = iteration_layer_cost(TINY, [(4, 6), (3, 0)], [100, 50])
    assert (layer.flops, layer.hbm_bytes) == (16512.0, 3792.0)
    # the head for 3 outputs (the decodes and the 3-token chunk, its last): 2 x 80 x 3, 160
    _, head = iteration_cost(TINY, [(4, 6), (3, 0)], [100, 50], 3)
    assert (head.flops, head.hbm_bytes) == (480.0, 160.0)
    _, none = iteration_cost(TINY, [(4, 6)], [], 0)
    assert (none.flops, none.hbm_bytes) == (0.0, 0.0)


def test_one_model_object_gives_each_shape_its_own_weights_and_head() -> None:
    """TINY_MOE's weight bytes depend on the batch's tokens: 2 tokens touch 3.5
    experts (8 x (1 - 0.75^2)), 1 token 2: (256 + 3.5 x 96) x 2 = 1,184 and
    (256 + 2 x 96) x 2 = 896 bytes, plus the KV (decodes after 0 cached: 1 token
    each, 16 bytes); the head 2 x 80 FLOPs an output, 160 bytes.  The counts one
    object keeps are those of a fresh one, in any order of calls."""
    costs = IterationCost(TINY_MOE)
    two = costs.work([], [0, 0], 2)
    assert two[1] == pytest.approx(1184 + 32) and two[2:] == (320.0, 160.0)
    one = costs.work([], [0], 1)
    assert one[1] == pytest.approx(896 + 16) and one[2:] == (160.0, 160.0)
    assert costs.work([], [0, 0], 2) == IterationCost(TINY_MOE).work([], [0, 0], 2) == two
    assert costs.work([(3, 0)], [], 0)[2:] == (0.0, 0.0)  # a chunk not its prompt's last


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        IterationCost(TINY).work([], [], 0)


def test_a_lone_prefill_or_decode_batch_is_the_models_step_to_the_bit() -> None:
    """sim.models.cost counts a prefill's pairs in floats (causal_pairs) and a decode
    batch per sequence; the iteration's integer sums give the same floats exactly
    (Llama-3.1-8B: a 12,000-token chunk after 3,000 cached; 5 decodes after 9,000)."""
    card = get_model("Llama-3.1-8B")
    assert iteration_layer_cost(card, [(12000, 3000)], []) == prefill_layer_cost(card, 12000, 3000)
    assert iteration_layer_cost(card, [], [9000] * 5) == decode_layer_cost(card, 5, 9000)

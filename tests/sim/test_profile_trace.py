"""The design profiled on another sequence (seed 000 §5.1:
"Profiling is performed on a task-agnostic dataset") instead of the sequence's
own first queries; keys, decode queries and oracle stay the sequence's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwprofiles import load_profile
from sim.config import load_scenario
from sim.scenarios.matched import mean_recall
from sim.scenarios.swarm import build_lane, build_lanes, layout_for, replay_lane


@pytest.fixture(scope="module")
def lanes():
    base = dataclasses.replace(
        load_scenario("default").workload, context_tokens=4096, profile_steps=64, steps=4, batch=1
    )
    h20 = load_profile("h20-8ssd")
    out = {}
    for other in ("own", "positional"):
        p = dataclasses.replace(base, profile_trace=other)
        lay = layout_for(p, h20, len(h20.ssd_names), p.context_tokens + p.profile_steps)
        built = build_lane(p, lay, seed=5)
        out[other] = (built.data, replay_lane(built, p, lay))
    return out


def test_only_the_profile_changes(lanes):
    (own, _), (other, _) = lanes["own"], lanes["positional"]
    assert own.activations.shape == other.activations.shape
    assert (own.activations != other.activations).nnz > 0
    assert np.array_equal(own.keys, other.keys) and np.array_equal(own.queries, other.queries)
    assert all(np.array_equal(a, b) for a, b in zip(own.oracle, other.oracle, strict=True))


def test_another_synthetic_sequence_profiles_no_better_than_random_clusters(lanes):
    # the generator draws another sequence's latent groups independently: its
    # co-activations say nothing of this sequence's, so recall falls
    assert mean_recall([lanes["positional"][1]]) < mean_recall([lanes["own"][1]]) - 0.1


def test_an_unknown_profile_preset_is_named():
    p = dataclasses.replace(load_scenario("default").workload, profile_trace="nope")
    with pytest.raises(ValueError, match="profile_trace: unknown preset 'nope'"):
        build_lanes(p, load_profile("h20-8ssd"), 0)

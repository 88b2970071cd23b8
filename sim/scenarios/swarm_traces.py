"""The access traces a Swarm-scenario lane runs on (:mod:`sim.scenarios.swarm`).

A lane is one (sequence, modeled layer).  Its trace comes from a generator
preset (:mod:`traces.generator`) or from a captured real-model trace
(``kvtier trace capture --keep-vectors``); either way every variant of a run
sees the very same keys, queries, profiling activations and oracle.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from traces.generator import PRESETS, AccessGenerator

__all__ = [
    "OWN",
    "LaneData",
    "captured_lane_data",
    "is_capture",
    "lane_data",
    "profiled_on",
    "profile_seed",
]


OWN = "own"  # profile_trace: the sequence's own first queries profile the design


@dataclass(frozen=True, eq=False)
class LaneData:
    """What one lane's generator gives every design: keys, queries, the
    profiling activations over the prefix and the oracle of each decode step."""

    keys: np.ndarray
    queries: np.ndarray
    activations: sp.csr_matrix
    oracle: tuple[np.ndarray, ...]


@functools.lru_cache(maxsize=32)
def lane_data(
    trace: str,
    model: str,
    context: int,
    profile_steps: int,
    steps: int,
    sparsity: float,
    window: int,
    sinks: int,
    seed: int,
) -> LaneData:
    """Generated once per lane and shared by every variant of a run (all
    designs see the very same trace)."""
    if is_capture(trace):
        return captured_lane_data(trace, seed, context, profile_steps, steps)
    gen = AccessGenerator(
        PRESETS[trace],
        context_tokens=context,
        steps=profile_steps + steps,
        layers=1,
        sparsity=sparsity,
        local_window=window,
        sink_tokens=sinks,
        seed=seed,
        model=model,
    )
    prefix = context + profile_steps
    tr = gen.trace()
    # sinks and window are selected whatever the query: not co-activation (see activations)
    act = tr.activations(steps=slice(0, profile_steps), scored_only=True)[:, :prefix].tocsr()
    oracle = tuple(tr.selection(profile_steps + t).astype(np.int64) for t in range(steps))
    return LaneData(gen.keys(), gen.queries(), act, oracle)


@functools.lru_cache(maxsize=32)
def profiled_on(data: LaneData, other: LaneData) -> LaneData:
    """``data`` with the profiling activations of ``other``: another sequence's
    queries profile the design (seed 000 §5.1: "Profiling is performed on a
    task-agnostic dataset"); keys, decode queries and oracle stay ``data``'s.
    Cached, so variants sharing a lane share one object (and one clustering)."""
    if other.activations.shape != data.activations.shape:
        raise ValueError(
            f"profile_trace: its profile covers {other.activations.shape[1]} entries over "
            f"{other.activations.shape[0]} queries, the lane needs {data.activations.shape}"
        )
    return dataclasses.replace(data, activations=other.activations)


def profile_seed(trace: str, seed: int) -> int:
    """The lane seed of the other sequence that profiles lane ``seed``: for a
    generator preset a sequence drawn independently of the lane's own; for a
    capture (another text) the same (layer, KV head)."""
    if is_capture(trace):
        return seed
    return int(np.random.SeedSequence([seed, 31]).generate_state(1)[0])


def is_capture(trace: str) -> bool:
    """``trace`` names a captured access trace file rather than a generator preset."""
    return trace.endswith(".parquet")


@functools.lru_cache(maxsize=2)
def _load_capture(path: str):
    from traces.access import read_access_trace  # noqa: PLC0415
    from traces.capture import read_vectors, vectors_path  # noqa: PLC0415

    return read_access_trace(path), *read_vectors(vectors_path(path))


def captured_lane_data(
    path: str, lane: int, context: int, profile_steps: int, steps: int
) -> LaneData:
    """Lane ``lane`` of a captured trace (``kvtier trace capture --keep-vectors``): its
    ``(layer, KV head)`` is ``divmod(lane, kv_heads)`` of the flattened heads, so lanes
    are distinct heads of one real text (spread out by :func:`plan_swarm`)."""
    tr, keys, queries = _load_capture(path)
    m = tr.meta
    if context != m.context_tokens or profile_steps + steps > m.steps:
        raise ValueError(
            f"trace: {path} has context {m.context_tokens} and {m.steps} steps; the workload "
            f"needs context_tokens = {m.context_tokens} and profile_steps + steps <= {m.steps}"
        )
    layer, head = divmod(lane % (m.layers * m.kv_heads), m.kv_heads)
    prefix = context + profile_steps
    act = tr.activations(layer, head, slice(0, profile_steps), scored_only=True)[:, :prefix]
    oracle = tuple(
        tr.selection(profile_steps + t, layer, head).astype(np.int64) for t in range(steps)
    )
    k = np.ascontiguousarray(keys[layer, head], dtype=np.float32)
    q = np.ascontiguousarray(queries[:, layer, head], dtype=np.float32)
    return LaneData(k, q, act.tocsr(), oracle)

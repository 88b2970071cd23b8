"""Synthetic access traces whose co-activation structure is a parameter.

The model's parameters and random draws (latent groups, memberships, keys,
queries, position) are :mod:`traces.latent`, whose docstring states them; this
module scores and selects:

**Selection** (:meth:`AccessGenerator.oracle`): at step ``t`` the visible
entries are ``0..N+t``; the sinks ``0..sink_tokens-1`` and the most recent
``local_window`` are always selected, plus the top
``round(sparsity * (N + t)) - (sinks + window)`` of the rest by score
``q_t . k_i`` (computed in float64 from the float32 keys and queries).

With ``structure = 0`` keys carry no group signal and queries are independent
noise: entries sharing a group co-activate exactly as often as random pairs.
What remains is the incidental geometry of random vectors in ``dim``
dimensions (pair cosines ~ N(0, 1/dim)), which any key-similarity method can
exploit a little (``trace_stats``' ``coact_chi2`` is ~1.7 at ``dim = 64``,
~1.3 at 512, against ~8 for the default structure); raise ``dim`` to shrink
it.  With ``structure = 1`` entries of the same single group have identical
keys, so their scores tie; ties are broken by ``argpartition`` order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

from traces.access import AccessMeta, AccessTrace, forced_ids, selection_budget
from traces.latent import (
    GeneratorParams,
    World,
    build_world,
    membership_pmf,
    score,
)

__all__ = ["PRESETS", "AccessGenerator", "GeneratorParams", "generate", "membership_pmf"]

_CHUNK_BYTES = 256 << 20  # scores + argpartition indices per chunk of steps


PRESETS: dict[str, GeneratorParams] = {
    "default": GeneratorParams(),
    "unstructured": GeneratorParams(structure=0.0),
    "weak": GeneratorParams(structure=0.4),
    "stable": GeneratorParams(drift=0.01),
    "drifting": GeneratorParams(drift=0.3),
    # same selections as "default", but key geometry dominated by position
    "positional": GeneratorParams(positional=2.0),
    # fitted by `kvtier trace fit` to SmolLM2-135M-Instruct captures (pydoc text, 8K context,
    # 10% sparsity, window 256): medians over its 90 (layer, KV head)s, see traces/fit.py
    "smollm2-fitted": GeneratorParams(
        group_size=32.0,
        memberships_mean=1.0,
        popularity_skew=1.75,
        active_groups=8,
        drift=0.01,
        structure=0.7,
        noise=0.05,
    ),
}


class AccessGenerator:
    """Keys, queries and oracle top-k selections of a latent-group model."""

    def __init__(
        self,
        params: GeneratorParams,
        context_tokens: int,
        steps: int,
        layers: int = 1,
        sparsity: float = 0.1,
        local_window: int = 256,
        sink_tokens: int = 4,
        seed: int = 0,
        model: str = "synthetic",
        kv_heads: int = 1,
        name: str | None = None,
    ) -> None:
        if context_tokens < 1 or steps < 0 or layers < 1 or kv_heads < 1 or seed < 0:
            raise ValueError(
                "need context_tokens >= 1, steps >= 0, layers, kv_heads >= 1, seed >= 0"
            )
        if not 0 < sparsity <= 1 or local_window < 0 or sink_tokens < 0:
            raise ValueError("need 0 < sparsity <= 1, local_window >= 0, sink_tokens >= 0")
        self.params = params
        self.context_tokens = context_tokens
        self.steps = steps
        self.layers = layers
        self.kv_heads = kv_heads
        self.sparsity = sparsity
        self.local_window = local_window
        self.sink_tokens = sink_tokens
        self.seed = seed
        self.model = model
        presets = [k for k, v in PRESETS.items() if v == params]
        self.name = name or (presets[0] if presets else "custom")
        self.n_groups = max(1, round(context_tokens * params.memberships_mean / params.group_size))
        self._cache: tuple[tuple[int, int], World] | None = None

    # -- the random world of one (layer, head) ---------------------------------------------

    def _world(self, layer: int, head: int) -> World:
        if not (0 <= layer < self.layers and 0 <= head < self.kv_heads):
            raise IndexError(
                f"(layer, head) = ({layer}, {head}) outside ({self.layers}, {self.kv_heads})"
            )
        if self._cache is None or self._cache[0] != (layer, head):
            self._cache = None  # free the previous world before building the next
            world = (self.params, self.context_tokens, self.steps, self.n_groups, self.seed)
            self._cache = ((layer, head), build_world(*world, layer, head))
        return self._cache[1]

    def keys(self, layer: int = 0, head: int = 0) -> np.ndarray:
        """(N + steps, dim) float32 keys, deterministic from (seed, layer, head); read-only."""
        return self._world(layer, head).keys

    def queries(self, layer: int = 0, head: int = 0) -> np.ndarray:
        """(steps, dim) float32 queries."""
        return self._world(layer, head).queries.copy()

    def memberships(self, layer: int = 0, head: int = 0) -> sp.csr_matrix:
        """Ground truth: (N + steps) x n_groups boolean membership matrix."""
        return self._world(layer, head).memberships.copy()

    def active(self, layer: int = 0, head: int = 0) -> np.ndarray:
        """(steps, active groups) int32: the groups each query mixes."""
        return self._world(layer, head).active.copy()

    # -- scoring and selection -------------------------------------------------------------

    def scores(self, step: int, layer: int = 0, head: int = 0) -> np.ndarray:
        """float64 ``q_t . k_i`` for the visible entries ``0..N+step``."""
        self._check_step(step)
        w = self._world(layer, head)
        q = w.queries[step : step + 1].astype(np.float64)
        return score(w.keys, q, self.context_tokens + step + 1)[0]

    def oracle(self, step: int, layer: int = 0, head: int = 0) -> np.ndarray:
        """Sorted int32 ids: sinks + local window + top-k of the rest by score."""
        self._check_step(step)
        return self._select(self._world(layer, head), step, step + 1)[0]

    def _check_step(self, step: int) -> None:
        if not 0 <= step < self.steps:
            raise IndexError(f"step {step} outside 0..{self.steps - 1}")

    def _select(self, w: World, t0: int, t1: int) -> list[np.ndarray]:
        n = self.context_tokens
        neg = score(w.keys, -w.queries[t0:t1].astype(np.float64), n + t1)
        forced, ks = [], []
        for j, t in enumerate(range(t0, t1)):
            vis = n + t + 1
            f = forced_ids(vis, self.sink_tokens, self.local_window)
            neg[j, vis:] = np.inf
            neg[j, f] = np.inf
            forced.append(f)
            budget = selection_budget(n, t, self.sparsity)
            ks.append(min(max(0, budget - len(f)), vis - len(f)))
        k_max = max(ks)
        if k_max == 0:
            return forced
        part = np.argpartition(neg, k_max - 1, axis=1)[:, :k_max]
        order = np.argsort(np.take_along_axis(neg, part, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(part, order, axis=1)
        # forced ids scored +inf, so the top k never repeat them
        return [
            np.sort(np.concatenate([f, top[j, :k].astype(np.int32)]))
            for j, (f, k) in enumerate(zip(forced, ks, strict=True))
        ]

    def trace(
        self,
        with_scores: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> AccessTrace:
        """Oracle selections of all steps, layers and heads as an :class:`AccessTrace`.

        Steps are scored in chunks (``Q_chunk @ K^T`` then ``argpartition``) sized
        to keep the chunk's scores under ~256 MB.  ``progress(done, total)`` is
        called after each chunk, counting (step, layer, head) rows.
        """
        L, H, T, n = self.layers, self.kv_heads, self.steps, self.context_tokens
        rows: list[np.ndarray] = [np.empty(0, np.int32)] * (T * L * H)
        row_scores: list[np.ndarray] = [np.empty(0, np.float16)] * (T * L * H)
        chunk = max(1, _CHUNK_BYTES // (16 * (n + T)))
        done = 0
        for layer in range(L):
            for head in range(H):
                w = self._world(layer, head)
                for t0 in range(0, T, chunk):
                    t1 = min(T, t0 + chunk)
                    for t, ids in zip(range(t0, t1), self._select(w, t0, t1), strict=True):
                        r = (t * L + layer) * H + head
                        rows[r] = ids
                        if with_scores:
                            q = w.queries[t].astype(np.float64)
                            row_scores[r] = (w.keys[ids].astype(np.float64) @ q).astype(np.float16)
                    done += t1 - t0
                    if progress is not None:
                        progress(done, T * L * H)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        indices = np.concatenate(rows) if rows else np.empty(0, np.int32)
        scores = (
            (np.concatenate(row_scores) if rows else np.empty(0, np.float16))
            if with_scores
            else None
        )
        return AccessTrace(self.meta(), offsets, indices, scores)

    def meta(self) -> AccessMeta:
        return AccessMeta(
            model=self.model,
            context_tokens=self.context_tokens,
            layers=self.layers,
            kv_heads=self.kv_heads,
            steps=self.steps,
            sparsity=self.sparsity,
            local_window=self.local_window,
            sink_tokens=self.sink_tokens,
            source=f"generator:{self.name}",
            seed=self.seed,
            params=tuple(dataclasses.asdict(self.params).items()),
        )


def generate(
    preset: str,
    context_tokens: int,
    steps: int,
    *,
    layers: int = 1,
    kv_heads: int = 1,
    sparsity: float = 0.1,
    local_window: int = 256,
    sink_tokens: int = 4,
    seed: int = 0,
    model: str = "synthetic",
    **overrides: object,
) -> AccessGenerator:
    """An :class:`AccessGenerator` for a named preset, with optional parameter overrides.

    ``generate("default", 4096, 400, drift=0.01)`` is the default structure with
    a slower drift; the trace's ``meta.source`` then reads
    ``generator:default+drift=0.01``.
    """
    if preset not in PRESETS:
        raise KeyError(f"unknown access-trace preset {preset!r}; known: {sorted(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(GeneratorParams)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise TypeError(f"unknown GeneratorParams field(s) {unknown}")
    params = dataclasses.replace(PRESETS[preset], **overrides)
    name = preset + "".join(f"+{k}={v}" for k, v in sorted(overrides.items()))
    return AccessGenerator(
        params, context_tokens, steps, layers=layers, sparsity=sparsity,
        local_window=local_window, sink_tokens=sink_tokens, seed=seed, model=model,
        kv_heads=kv_heads, name=name,
    )  # fmt: skip

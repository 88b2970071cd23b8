"""Seed 003 Table 3's GPU cache over the baselines' own selections.

kvtier's Quest, ShadowKV and RetroInfer keep no GPU cache of their own (RetroInfer's
is a wave buffer of whole clusters).  Table 3 puts each eviction policy on a GPU
cache "in every system" (§9.3: "applying it to four different systems"); here that
cache is KVDrive's :class:`~sim.policies.kvdrive.gpucache.WindowCache`, with
KVDrive's capacity (``window`` step budgets), fed each step's selection beyond sinks
and local window, starting empty.  Lookahead evicts the entries whose current-step
score is lowest (the paper's rule), each scored as the design itself estimates it,
per unit (:func:`unit_scores`), as KVDrive's own lookahead scores an entry by its
centroid.  The cache is counted only: it moves no bytes in the plan (the design's
copies stay its own).  ``analysis/kvdrive_steady.py`` and the ``kvdrive`` kind's
``table3_cache`` columns both count with :func:`lane_cache_steps`.
"""

from __future__ import annotations

import numpy as np

from sim.policies.kvdrive.gpucache import WindowCache
from sim.policies.selection import always_selected

POLICIES = ("lru", "lookahead")
# steps of a GPU cache's warm-up: the steady-state hit rate pools every later step
# (the rate per 16-step block stops rising after the first, docs/kvdrive-vs-paper.md
# "Steady state of the GPU cache"; analysis/kvdrive_steady.py prints the blocks)
STEADY_AFTER = 16


def unit_labels(design, n: int) -> np.ndarray:
    """The unit each of ``n`` token ids belongs to in ``design``'s own selection:
    Quest's page (``pos // page_size``), ShadowKV's chunk (``pos // chunk_size``),
    RetroInfer's cluster (its build's members; later tokens each a unit of one)."""
    pos = np.arange(n, dtype=np.int64)
    if hasattr(design.params, "page_size"):
        return pos // design.params.page_size
    if not hasattr(design, "members"):
        return pos // design.params.chunk_size
    label = len(design.members) + pos  # tokens in no cluster: their own unit
    for c, m in enumerate(design.members):
        label[m[m < n]] = c
    return label


def unit_scores(design, keys: np.ndarray, label: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Every token's lookahead score: its unit's current-step score as the design
    estimates it.  Quest: the page's bound ``sum_c max(q_c min_c, q_c max_c)``
    over the page's keys; ShadowKV (landmark = the chunk's mean key) and
    RetroInfer (centroid = the cluster's mean key): ``q . mean key`` = the
    unit's mean of ``q . k``."""
    k = np.asarray(keys[: len(label)], dtype=np.float32)
    if hasattr(design.params, "page_size"):
        starts = np.arange(0, len(label), design.params.page_size)
        lo, hi = np.minimum.reduceat(k, starts), np.maximum.reduceat(k, starts)
        return np.maximum(lo * q, hi * q).sum(axis=1)[label]
    exact = k @ q
    total = np.bincount(label, weights=exact)
    return (total / np.maximum(np.bincount(label), 1))[label]


def lane_cache_steps(
    built, decisions, p, layout, policies=POLICIES, window: int = 2, scores: str = "unit"
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per policy, (hits, misses) per step of one lane's window cache (``window``
    step budgets) fed the lane's ``decisions`` beyond sinks and local window.
    ``built``: the lane as built (its design's units, its keys and queries).
    Lookahead evicts by :func:`unit_scores`, or with ``scores="exact"`` by each
    entry's own ``q . k`` (the counterfactual that splits the design's units)."""
    prefix = p.context_tokens + p.profile_steps
    keys, queries = built.data.keys, built.data.queries
    label = unit_labels(built.design, prefix + p.steps)
    out = {}
    for pol in policies:
        cache = WindowCache(window * layout.step_budget(prefix + 1), pol)
        hits, misses = np.zeros(p.steps), np.zeros(p.steps)
        for t, d in enumerate(decisions):
            always = always_selected(prefix + t + 1, p.sink_tokens, p.local_window)
            extra = np.setdiff1d(d.selected, always)
            q = np.asarray(queries[p.profile_steps + t], dtype=np.float32)
            now = None
            if pol == "lookahead" and scores == "exact":
                now = np.asarray(keys[: prefix + t + 1], dtype=np.float32) @ q
            elif pol == "lookahead":
                now = unit_scores(built.design, keys, label[: prefix + t + 1], q)

            def score(ids: np.ndarray, s=now) -> np.ndarray:
                return s[ids]

            hit = cache.access(t, extra, score)
            hits[t], misses[t] = hit.sum(), len(extra) - hit.sum()
        out[pol] = (hits, misses)
    return out


def table3_columns(p, layout, built: dict, lanes: dict) -> dict:
    """Summary columns of Table 3's cache over every lane's replayed decisions:
    ``t3_hit_rate_<policy>`` over the run's steps and ``t3_hit_rate_<policy>_steady``
    over the steps after :data:`STEADY_AFTER` (NaN when there are none)."""
    hits = {pol: np.zeros(p.steps) for pol in POLICIES}
    misses = {pol: np.zeros(p.steps) for pol in POLICIES}
    for key, lane in built.items():
        for pol, (h, m) in lane_cache_steps(lane, lanes[key].decisions, p, layout).items():
            hits[pol] += h
            misses[pol] += m
    out = {}
    for pol in POLICIES:
        for suffix, first in (("", 0), ("_steady", STEADY_AFTER)):
            h, n = hits[pol][first:].sum(), (hits[pol] + misses[pol])[first:].sum()
            out[f"t3_hit_rate_{pol}{suffix}"] = float(h / n) if n else float("nan")
    return out

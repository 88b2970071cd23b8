"""Table 4-style report of a Swarm design's offline clustering (seed 000 §8.3).

Measured on the design right after :meth:`~sim.policies.swarm.design.SwarmDesign.build`
(the prefix only; online maintenance adds the decoded tokens later):

* ``replication`` -- SSD bytes / KV bytes: slots the placement allocated
  (replicas included) over ``N`` entries, i.e. ``sum(cluster sizes) / N``;
* cluster sizes -- count, mean, p50, p90, max and the share of singletons;
* ``index_bytes`` and ``index_key_share`` -- the DRAM index (medoid keys plus
  route records) and the keys it holds over all ``N`` keys;
* ``select_speedup`` -- keys a full scan reads (``N``) / keys the index scan
  reads (one per cluster): the selection speed-up over a full scan, counted
  in keys compared (Table 4 reports it in time).

and, after the run, Table 5's measure of cluster quality under online
maintenance (:func:`maintenance_report`; the rule that places leaving tokens
is ``SwarmParams.maintenance_rule``).  The paper: "the average distance
between cluster entries and their medoid, normalized by the initial distance
calculated offline".  Our reading, every piece measured on the lane's trace:

* a member's distance to its medoid is Eq. 3's Jaccard distance
  ``1 - a / (f_x + f_m - a)`` over a record of steps (``f``: steps an entry is
  active, ``a``: steps both are);
* the *initial* distance: the mean over every (member, cluster) of the
  offline clustering, medoid excluded, on the profiling activations the
  clusters were built from;
* a token that maintenance placed (an entry generated at decode step ``g``)
  has no profile, so its distance to its cluster's medoid is taken over the
  decode steps ``g .. T-1`` it has existed for, an entry being *active* at
  step t when its score ``q_t . k`` reaches the lowest score the oracle picked
  on score at t (sinks and window excluded): for an entry outside the window
  that is the oracle's own choice, inside it what the oracle would choose if
  the window did not force it.  This is ground truth from the trace, not the
  design's own estimate (Eq. 9 sees only the medoids it chose);
* ``maint_distance_ratio``: the mean distance of the placed members over the
  initial distance; ``all_distance_ratio``: every member's (offline ones at
  their initial distances) over the initial distance, i.e. the placed
  members' effect diluted by the prefix's (``maint_members`` of them).

The paper's step counts (Table 5's header) were lost in extraction.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hwprofiles import HardwareProfile
from sim.models import get_model
from sim.policies.swarm.design import SwarmDesign

KEYS = (
    "replication",
    "clusters",
    "cluster_mean",
    "cluster_p50",
    "cluster_p90",
    "cluster_max",
    "singleton_share",
    "index_bytes",
    "index_key_share",
    "select_speedup",
    "maint_members",
    "maint_distance_ratio",
    "all_distance_ratio",
)


def clustering_report(design: SwarmDesign) -> dict[str, float]:
    """The report of one built design (one lane: one sequence, one layer)."""
    sizes = design.clustering.sizes
    n = design.n_prefix
    kv = n * design.layout.entry_bytes
    return {
        "replication": float(np.sum(design.ssd_bytes())) / kv if kv else np.nan,
        "clusters": float(len(sizes)),
        "cluster_mean": float(sizes.mean()),
        "cluster_p50": float(np.percentile(sizes, 50)),
        "cluster_p90": float(np.percentile(sizes, 90)),
        "cluster_max": float(sizes.max()),
        "singleton_share": float((sizes == 1).mean()),
        "index_bytes": float(design.index_bytes()),
        "index_key_share": len(sizes) / n,
        "select_speedup": n / len(sizes),
    }


def member_pairs(members: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every (member, medoid) of ``members`` (medoid first in each), medoid excluded."""
    xs = [m[1:] for m in members]
    ms = [np.full(len(m) - 1, m[0]) for m in members]
    cat = lambda a: np.concatenate(a).astype(np.int64) if a else np.empty(0, np.int64)  # noqa: E731
    return cat(xs), cat(ms)


def jaccard_pairs(act: sp.spmatrix, xs: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Eq. 3's ``1 - a / (f_x + f_m - a)`` per pair over ``act`` (steps x entries,
    boolean); 1 where neither entry is ever active."""
    cols = sp.csc_matrix(act, dtype=np.int64)
    f = np.asarray(cols.sum(axis=0)).ravel()
    rows = cols.T.tocsr()
    a = np.asarray(rows[xs].multiply(rows[ms]).sum(axis=1)).ravel().astype(np.float64)
    union = f[xs] + f[ms] - a
    out = np.ones(len(xs))
    np.divide(a, union, out=out, where=union > 0)
    return np.where(union > 0, 1.0 - out, 1.0)


def offline_distances(members: list[np.ndarray], profile: sp.spmatrix) -> np.ndarray:
    """The initial distance of every (member, cluster), on the profiling activations."""
    return jaccard_pairs(profile, *member_pairs(members))


def score_activity(
    keys: np.ndarray, queries: np.ndarray, oracle, ids: np.ndarray, prefix: int, sinks: int,
    window: int,
) -> np.ndarray:  # fmt: skip
    """(steps x len(ids)) boolean: entry ``ids[j]`` is visible at decode step t and
    its score ``q_t . k`` reaches the lowest score of the oracle's picks on score
    (its selection less sinks and window; none: nothing is active)."""
    from traces.access_trace import forced_ids  # noqa: PLC0415

    q = np.asarray(queries, dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    out = np.zeros((len(q), len(ids)), dtype=bool)
    for t, (qt, picked) in enumerate(zip(q, oracle, strict=True)):
        visible = prefix + t + 1
        scored = np.setdiff1d(picked, forced_ids(visible, sinks, window))
        if scored.size:
            threshold = float((k[scored] @ qt).min())
            out[t] = (k[ids] @ qt >= threshold) & (ids < visible)
    return out


def maintenance_report(
    design: SwarmDesign, data, p, initial: np.ndarray | None
) -> dict[str, float]:
    """Table 5's measure after the run (see the module doc).  ``data`` is the
    lane's trace (keys, decode queries after ``p.profile_steps``, oracle),
    ``initial`` the offline distances (:func:`offline_distances`; None when no
    token left the window).  On a captured trace the lane's query is its KV
    head's (:mod:`.swarm_traces`), so the threshold is the lowest such score
    among the model's own picks."""
    prefix = design.n_prefix
    xs, ms = member_pairs(design.clustering.members)
    new = xs >= prefix
    xs, ms = xs[new], ms[new]
    if not xs.size or initial is None or not initial.size:
        return {"maint_members": 0.0, "maint_distance_ratio": np.nan, "all_distance_ratio": 1.0}
    base = float(initial.mean())
    ids = np.union1d(xs, ms)
    steps = len(data.oracle)
    queries = data.queries[p.profile_steps : p.profile_steps + steps]
    act = score_activity(
        data.keys, queries, data.oracle, ids, prefix, p.sink_tokens, p.local_window
    )
    born = xs - prefix  # the decode step that generated each placed member
    col = {e: j for j, e in enumerate(ids.tolist())}
    d = np.empty(len(xs))
    for i, (x, m, g) in enumerate(zip(xs.tolist(), ms.tolist(), born.tolist(), strict=True)):
        ax, am = act[g:, col[x]], act[g:, col[m]]
        a, union = int((ax & am).sum()), int((ax | am).sum())
        d[i] = 1.0 - a / union if union else 1.0
    total = float(initial.sum() + d.sum()) / (initial.size + d.size)
    return {
        "maint_members": float(len(xs)),
        "maint_distance_ratio": float(d.mean()) / base,
        "all_distance_ratio": total / base,
    }


def mean_report(reports: list[dict[str, float]]) -> dict[str, float]:
    """Each key averaged over lanes (NaN for a design without clustering)."""
    return {k: float(np.mean([r[k] for r in reports])) if reports else np.nan for k in KEYS}


def hbm_headroom(model: str, profile: HardwareProfile, batch: int, tokens: int) -> dict[str, float]:
    """Does the batch's whole KV cache fit in one GPU's HBM next to the weights?

    ``kv_bytes`` = batch x tokens x the model's KV bytes per token (all layers);
    ``hbm_free_bytes`` = the GPU's HBM capacity minus the weights at their
    dtype (activations and workspace not counted, so this is an upper bound on
    the room for KV).  Offloading is the question only when ``kv_bytes`` exceeds
    it (issue 12 point 7: the default point must lie beyond it).
    """
    card = get_model(model)
    kv = float(batch * tokens * card.kv_bytes_per_token)
    free = profile.gpu.hbm_capacity_gib * 2**30 - card.weight_bytes
    return {"kv_bytes": kv, "hbm_free_bytes": float(free), "kv_fits_hbm": kv <= free}

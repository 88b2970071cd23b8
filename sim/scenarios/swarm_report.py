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
"""

from __future__ import annotations

import numpy as np

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

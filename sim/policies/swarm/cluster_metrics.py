"""Quality of a Swarm clustering (seed 000 §5.1), and agreement between two clusterings.

Used by the tests and ``python -m sim.policies.swarm.bench_cluster`` to
compare :func:`~sim.policies.swarm.cluster.cluster` with the dense reference.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sim.policies.swarm.cooccur import as_activations, selection_counts
from sim.policies.swarm.types import Clustering


def clustering_quality(clustering: Clustering, X: sp.spmatrix | np.ndarray) -> dict[str, float]:
    """Summary statistics of a clustering against the profile ``X`` it came from.

    ``intra_coact``: mean ``P_ij`` over member pairs, pooled over clusters;
    ``random_coact``: mean ``P_ij`` over all pairs ``i != j`` (exact,
    ``sum_t (k_t^2 - k_t) / (N (N - 1) T)``); ``lift`` = their ratio;
    ``medoid_coact``: mean ``P_mj`` of members with their medoid;
    ``medoid_hit``: mean over clusters of ``mean_j A_mj / f_m``, the fraction of
    a cluster's other members that are selected when its medoid is;
    ``mean_replication``: clusters per entry; ``coverage``: share of entries in
    a cluster.
    """
    X = as_activations(X)
    T, n = X.shape
    f = selection_counts(X)
    k = np.diff(X.indptr).astype(np.float64)
    random = float((k @ k - k.sum()) / (n * (n - 1) * T)) if n > 1 else 0.0
    csc = X.tocsc()
    pair_sum = pair_n = med_sum = med_n = hit_sum = hit_n = 0.0
    for mem in clustering.members:
        c = len(mem)
        if c < 2:
            continue
        V = csc[:, mem].toarray().astype(np.float64)
        G = V.T @ V
        pair_sum += (G.sum() - np.trace(G)) / 2
        pair_n += c * (c - 1) / 2
        med_sum += G[0, 1:].sum()
        med_n += c - 1
        if f[mem[0]] > 0:
            hit_sum += G[0, 1:].mean() / f[mem[0]]
            hit_n += 1
    sizes = clustering.sizes
    rep = clustering.replication()
    intra = pair_sum / pair_n / T if pair_n else 0.0
    return {
        "clusters": float(len(sizes)),
        "singletons": float((sizes == 1).sum()),
        "mean_size": float(sizes.mean()) if len(sizes) else 0.0,
        "max_size": float(sizes.max()) if len(sizes) else 0.0,
        "mean_replication": float(rep.mean()) if n else 0.0,
        "coverage": float((rep > 0).mean()) if n else 1.0,
        "intra_coact": float(intra),
        "medoid_coact": float(med_sum / med_n / T) if med_n else 0.0,
        "medoid_hit": float(hit_sum / hit_n) if hit_n else 0.0,
        "random_coact": random,
        "lift": float(intra / random) if random > 0 else 0.0,
    }


def comembership_f1(a: Clustering, b: Clustering) -> float:
    """F1 between the sets of entry pairs that share a cluster in ``a`` and in ``b``."""
    if a.n_entries != b.n_entries:
        raise ValueError("clusterings of different layers")
    pa, pb = _comembers(a), _comembers(b)
    total = pa.nnz + pb.nnz
    return 1.0 if total == 0 else 2.0 * pa.multiply(pb).nnz / total


def _comembers(c: Clustering) -> sp.csr_matrix:
    """Boolean ``N x N``: entries i != j that share at least one cluster."""
    sizes = c.sizes
    rows = np.concatenate(c.members) if len(sizes) else np.empty(0, np.int64)
    cols = np.repeat(np.arange(len(sizes)), sizes)
    M = sp.csr_matrix(
        (np.ones(len(rows), np.float32), (rows, cols)), shape=(c.n_entries, len(sizes))
    )
    co = (M @ M.T).tocsr()
    co.setdiag(0)
    co.eliminate_zeros()
    return co.astype(bool)

"""Benchmark of Swarm's clustering: ``python -m sim.policies.swarm.bench_cluster``.

*Scale*: profile one layer (N entries, T queries, each selecting
``sparsity * N``; built in a child process), then time the stages of
:func:`~sim.policies.swarm.cluster.cluster` (radius choice, counting,
densities, expansion) and report peak RSS.  *Quality*: on a small layer,
compare ``cluster`` (the path the scale run took: the exact neighbour graph,
or densities estimated at the same probe fraction) against ``cluster_exact``:
co-membership F1, adjusted Rand of the No-Replica partitions, and
:func:`~sim.policies.swarm.cluster.clustering_quality` side by side.  Two F1
references: ``f1_one_probe`` (the row path with densities from one probe:
nearly arbitrary medoid order) and ``f1_tiebreak`` (the reference itself on renumbered
entries, so ties break differently: the floor for any equally valid run).

Sources: ``planted`` (:func:`planted_activations`) or ``generator`` (the
"default" preset of :mod:`traces.generator`, prefix columns only).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import scipy.sparse as sp

from sim.policies.swarm.cluster import (
    ClusterParams,
    cluster,
    cluster_exact,
    clustering_quality,
    comembership_f1,
    grow_clusters,
)
from sim.policies.swarm.cooccur import CoactivationIndex, choose_radius
from sim.policies.swarm.types import Clustering


def planted_activations(
    n_entries: int,
    n_queries: int,
    active: int,
    rng: np.random.Generator,
    group_size: int = 32,
    group_share: float = 0.6,
    bridge_frac: float = 0.05,
    member_prob: float = 0.9,
    popularity_skew: float = 0.5,
) -> sp.csr_matrix:
    """``T x N`` activations with planted, overlapping co-activation groups.

    Entries are split into ``N // group_size`` groups; ``bridge_frac * N``
    entries also join a second random group (bridges).  Group popularity is
    Zipf(``popularity_skew``).  Each query picks groups by popularity (without
    replacement) until their expected members fill ``group_share`` of
    ``active``, keeps each member with probability ``member_prob``, and tops up
    with uniform noise entries to exactly ``active`` selections.
    """
    n_groups = max(1, n_entries // group_size)
    groups = np.array_split(rng.permutation(n_entries), n_groups)
    bridges = rng.choice(n_entries, size=int(bridge_frac * n_entries), replace=False)
    extra = rng.integers(0, n_groups, size=len(bridges))
    groups = [np.union1d(g, bridges[extra == i]) for i, g in enumerate(groups)]
    weight = np.arange(1, n_groups + 1, dtype=np.float64) ** -popularity_skew
    weight /= weight.sum()
    per_query = min(n_groups, max(1, round(group_share * active / (member_prob * group_size))))
    rows = []
    for _ in range(n_queries):
        chosen = rng.choice(n_groups, size=per_query, replace=False, p=weight)
        ids = np.unique(np.concatenate([groups[g] for g in chosen]))
        ids = ids[rng.random(len(ids)) < member_prob]
        if len(ids) > active:
            ids = rng.choice(ids, size=active, replace=False)
        free = np.setdiff1d(np.arange(n_entries), ids, assume_unique=True)
        noise = rng.choice(free, size=active - len(ids), replace=False)
        rows.append(np.sort(np.concatenate([ids, noise])))
    indptr = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    data = np.ones(int(indptr[-1]), dtype=bool)
    return sp.csr_matrix((data, np.concatenate(rows), indptr), shape=(n_queries, n_entries))


def generated_activations(n_entries: int, n_queries: int, sparsity: float, seed: int):
    """Score-selected prefix entries of the "default" generated trace.

    The sinks and the local window are selected at every step whatever the
    query; they live in DRAM (§5.2) and are never fetched, so they are
    dropped from the profile (kept, they are co-activated with everything).
    """
    from traces import generate

    gen = generate("default", n_entries, n_queries, sparsity=sparsity, seed=seed)
    return gen.trace().activations(0, scored_only=True)[:, :n_entries].tocsr()


def adjusted_rand(a: Clustering, b: Clustering) -> float:
    """Adjusted Rand index of two partitions (No-Replica clusterings)."""
    la, lb = _labels(a), _labels(b)
    table = sp.coo_matrix((np.ones(len(la)), (la, lb))).tocsr()

    def pairs(x: np.ndarray) -> float:
        return float((x * (x - 1) / 2).sum())

    index = pairs(table.data)
    rows, cols = pairs(np.asarray(table.sum(1)).ravel()), pairs(np.asarray(table.sum(0)).ravel())
    expected = rows * cols / pairs(np.array([float(len(la))]))
    top = (rows + cols) / 2
    return 1.0 if top == expected else (index - expected) / (top - expected)


def _labels(c: Clustering) -> np.ndarray:
    if (c.replication() != 1).any():
        raise ValueError("adjusted Rand needs a partition (replicate=False)")
    labels = np.empty(c.n_entries, dtype=np.int64)
    for i, m in enumerate(c.members):
        labels[m] = i
    return labels


class _TimedIndex(CoactivationIndex):
    """Counts and times the on-demand medoid rows of the clustering loop."""

    rows_done = 0
    rows_seconds = 0.0

    def rows(self, entries: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = super().rows(entries)
        self.rows_seconds += time.perf_counter() - t0
        self.rows_done += len(entries)
        return out


def run_scale(X: sp.csr_matrix, params: ClusterParams, seed: int) -> dict[str, float]:
    """Stage timings (s, wall; ``cpu_total`` = process CPU) of one ``cluster`` run.

    ``t_graph`` = building the index and the exact neighbour graph (0 pairs
    when the band is too wide and the row path runs); ``t_count`` = medoid
    rows computed in the loop (row path only); ``t_density`` = the probed
    densities (row path only); ``t_expand`` = the rest of the loop (medoid
    queue, Eq. 5 expansions).
    """
    rng = np.random.default_rng(seed)
    c0, t0 = time.process_time(), time.perf_counter()
    q, fmin = params.radius_quantile, params.min_activations
    radius = choose_radius(X, params.target_size, q, fmin, rng, params.radius_probes)
    t1 = time.perf_counter()
    index = _TimedIndex(X, radius, fmin)
    graph = index.build_graph(params.graph_pairs)
    t2 = time.perf_counter()
    if graph:
        density = index.graph_densities()
    else:
        density = index.densities(params.density_probes, rng, head=4 * params.max_cluster)
    t3 = time.perf_counter()
    result = grow_clusters(index, density, params)
    t4 = time.perf_counter()
    sizes = result.sizes
    return {
        "radius": radius,
        "eligible": len(index.eligible),
        "probes": len(index.eligible) if graph else min(params.density_probes, len(index.eligible)),
        "graph_pairs": len(index.graph.indices) // 2 if graph else 0,
        "medoid_rows": index.rows_done,
        "clusters": len(sizes),
        "singletons": int((sizes == 1).sum()),
        "mean_size": float(sizes.mean()),
        "mean_size_nonsingleton": float(sizes[sizes > 1].mean()) if (sizes > 1).any() else 0.0,
        "max_size": int(sizes.max()),
        "mean_replication": float(result.replication().mean()),
        "t_radius": t1 - t0,
        "t_graph": t2 - t1,
        "t_count": index.rows_seconds,
        "t_density": t3 - t2,
        "t_expand": t4 - t3 - index.rows_seconds,
        "t_total": t4 - t0,
        "cpu_total": time.process_time() - c0,
    }


def run_quality(X: sp.csr_matrix, params: ClusterParams, probe_fraction: float) -> dict:
    """``cluster`` (densities from ``probe_fraction`` of eligible entries) vs ``cluster_exact``."""
    q, fmin = params.radius_quantile, params.min_activations
    radius = choose_radius(X, params.target_size, q, fmin, None, max_probes=X.shape[1])
    eligible = len(CoactivationIndex(X, radius, fmin).eligible)
    probes = max(1, round(probe_fraction * eligible))
    out: dict = {"radius": radius, "eligible": eligible, "probes": probes}
    variants = {
        "swarm": {},
        "no_replica": {"replicate": False},
        "medoid_only": {"medoid_only": True},
    }
    for name, kw in variants.items():
        p = dataclasses.replace(params, radius=radius, density_probes=probes, **kw)
        exact, approx = cluster_exact(X, p), cluster(X, p, np.random.default_rng(1))
        row = {"f1": comembership_f1(exact, approx)}
        if name == "no_replica":
            row["ari"] = adjusted_rand(exact, approx)
        if name == "swarm":
            one_probe = cluster(X, dataclasses.replace(p, density_probes=1, graph_pairs=1))
            row["f1_one_probe"] = comembership_f1(exact, one_probe)
            row["f1_tiebreak"] = comembership_f1(exact, _exact_permuted(X, p))
            row["exact"] = clustering_quality(exact, X)
            row["approx"] = clustering_quality(approx, X)
        out[name] = row
    return out


def _exact_permuted(X: sp.csr_matrix, params: ClusterParams) -> Clustering:
    """The reference on randomly renumbered entries: ties in density and
    distance break differently (the F1 noise floor of an equally valid run)."""
    perm = np.random.default_rng(2).permutation(X.shape[1])
    c = cluster_exact(X[:, perm], params)
    return Clustering([perm[m] for m in c.members], c.radius, c.n_entries)


def _print_quality(q: dict) -> None:
    print(f"  radius {q['radius']:.4f}  eligible {q['eligible']}  density probes {q['probes']}")
    for name in ("swarm", "no_replica", "medoid_only"):
        row = q[name]
        keys = ("ari", "f1_one_probe", "f1_tiebreak")
        extra = "".join(f"  {k} {row[k]:.3f}" for k in keys if k in row)
        print(f"  {name:12s} co-membership F1 {row['f1']:.3f}{extra}")
    ex, ap = q["swarm"]["exact"], q["swarm"]["approx"]
    print(f"  {'metric':18s} {'exact':>10s} {'scalable':>10s}")
    for key in ex:
        print(f"  {key:18s} {ex[key]:10.4f} {ap[key]:10.4f}")


def profile(source: str, n: int, t: int, sparsity: float, seed: int, skew: float) -> sp.csr_matrix:
    """The ``T x N`` profile of one source (see the module docstring)."""
    if source == "generator":
        return generated_activations(n, t, sparsity, seed)
    rng = np.random.default_rng(seed)
    return planted_activations(n, t, round(sparsity * n), rng, popularity_skew=skew)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=("planted", "generator", "both"), default="both")
    ap.add_argument("--n", type=int, default=131072, help="entries in the scale run")
    ap.add_argument("--t", type=int, default=512, help="profiled queries")
    ap.add_argument("--sparsity", type=float, default=0.1)
    ap.add_argument("--skew", type=float, default=0.0, help="planted group popularity skew")
    ap.add_argument("--small-n", type=int, default=4096, help="entries in the quality run")
    ap.add_argument("--target-size", type=int, default=ClusterParams.target_size)
    ap.add_argument("--max-replicas", type=int, default=ClusterParams.max_replicas)
    ap.add_argument("--probes", type=int, default=ClusterParams.density_probes)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = ClusterParams(
        target_size=args.target_size, density_probes=args.probes, max_replicas=args.max_replicas
    )
    sources = ("planted", "generator") if args.source == "both" else (args.source,)
    spawn = multiprocessing.get_context("spawn")
    for source in sources:
        shape = (args.n, args.t, args.sparsity, args.seed, args.skew)
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:  # keeps its memory out of ours
            X = pool.submit(profile, source, *shape).result()
        print(f"[{source}] N {X.shape[1]}  T {X.shape[0]}  k {X.nnz / X.shape[0]:.0f}  {params}")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        s = run_scale(X, params, args.seed)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("  " + "  ".join(f"{key} {_fmt(v)}" for key, v in s.items()))
        print(f"  peak RSS {rss:.0f} MB (before clustering {rss0:.0f} MB)  "
              f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        fraction = s["probes"] / max(1, s["eligible"])
        small = profile(source, args.small_n, *shape[1:])
        print(f"[{source}] quality at N {args.small_n}, probe fraction {fraction:.3f}")
        _print_quality(run_quality(small, params, fraction))


def _fmt(v: float) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()

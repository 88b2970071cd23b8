"""Swarm as a :class:`~sim.policies.KVDesign` (seed 000 §5.2, §6, §7) and its
§8.3 ablations.

Offline (:meth:`SwarmDesign.build`): cluster the profiled co-activations
(§5.1, ``sim.policies.swarm.cluster``), place the clusters round-robin on the
SSDs (Eq. 7, :mod:`.placement`), and fill DRAM (§5.2 Tier 1):

* the index: every medoid's key plus a route-table record of 8 bytes (disk
  id and slot packed in one word) per replica of the medoid, so
  ``index_bytes = clusters x key_bytes + 8 x sum(replicas of medoids)``;
* the sink tokens and the local window;
* hot clusters, up to ``dram_cache_entries``: by the cost-effectiveness
  score (Eq. 6, :class:`~sim.policies.cache.ScoreCache`) with each cluster's
  initial frequency = how many profiling observations activated its medoid,
  or, for the LRU ablation, an :class:`~sim.policies.cache.LRUCache` that
  starts empty (it has no profile to start from).  A cluster's size is its
  member count; an entry in two cached clusters is counted twice.

Online (:meth:`SwarmDesign.step`): score the medoids with the query
(``s_c = q . k_{m_c}``), take clusters by descending score until the
selection, sinks and window included, holds the step's budget (the last
cluster cut there: :func:`~sim.policies.selection.take_units`, the rule every
design follows), and read the selected non-resident entries with
:func:`.retrieval.schedule`, which routes each replicated entry to the disk
whose read (runs of consecutive slots, each run one range cut at the
device's maximum transfer size) costs least once it is added
(:class:`.retrieval.ReadCost` from the layout: one I/O's time vs an entry's
bytes), so a cluster's run stays one range where Eq. 7 put it; ``rounds`` is
the most I/Os one disk issues.  Without dedup, each chosen cluster reads every selected
non-resident member it holds.

Maintenance (§6.2).  A new token stays in the window for ``local_window``
steps.  At each of those steps the design sees the scores of the window
entries (attention computes them anyway, so this costs nothing extra) and of
the medoids; an entry or a medoid is *active* at a step if its score is at
least that of the lowest-scoring chosen medoid.  Eq. 9 (our reading; the
printed equation also mentions the number of clusters, which this reading
does not need): ``d(x, C_c) = 1 - n(x, m_c) / n(x)`` with ``n(x)`` the steps
x was active and ``n(x, m_c)`` the steps x and medoid m_c were both active.
When x leaves the window it joins the clusters with ``d < r_join``, the
nearest ``max_replicas`` of them (ties: lower cluster index; one without
replication), the same cap Algorithm 1 holds offline entries to, and is
placed on each one's next disk; with no such cluster (or never active) it
becomes a singleton cluster whose medoid is itself (its key joins the index).
Without maintenance every leaving token becomes such a singleton.
``maintenance_rule`` swaps Eq. 9 for one of §8.3 Table 5's baselines,
"min-size" (the smallest cluster) or "min-diff" (the cluster whose medoid key
is nearest), each defined in :mod:`.cluster`; they join exactly one cluster.

``r_join`` -- the offline radius on this conditional measure (see
:func:`join_radius`) unless ``SwarmParams.join_radius`` sets it.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse as sp

from sim.policies.cache import LRUCache, ScoreCache
from sim.policies.kvdesign import Layout, StepDecision, extents_from_slots, register
from sim.policies.selection import always_selected, take_units
from sim.policies.swarm.cluster import (
    MAINTENANCE_RULES,
    ClusterParams,
    cluster,
    maintenance_targets,
)
from sim.policies.swarm.placement import Placement, place
from sim.policies.swarm.retrieval import POLICIES, ReadCost, schedule
from sim.policies.swarm.types import Clustering

ROUTE_BYTES = 8  # one route-table record per medoid replica: disk id + slot in a 64-bit word
CLUSTER_KEYS = ("radius", "target_size", "replicate", "medoid_only")


@dataclass(frozen=True)
class SwarmParams:
    """Swarm's knobs.  ``None`` cluster fields take ``ClusterParams``' defaults."""

    radius: float | None = None
    target_size: int | None = None
    replicate: bool | None = None
    medoid_only: bool | None = None
    balance_placement: bool = True  # False: each cluster whole on one disk ("No Balance")
    retrieval: str = "balanced"  # balanced | static | first (see retrieval.py)
    dedup: bool = True
    cache: str = "score"  # score (Eq. 6) | lru
    maintenance: bool = True
    # how a leaving token is placed: Eq. 9 ("coactivation") or Table 5's baselines
    maintenance_rule: str = "coactivation"
    join_radius: float | None = None  # None: derived from the offline radius
    shuffle: bool = False  # control: same cluster sizes, members drawn at random

    def __post_init__(self) -> None:
        if self.retrieval not in POLICIES:
            raise ValueError(f"retrieval must be one of {POLICIES}, got '{self.retrieval}'")
        if self.cache not in ("score", "lru"):
            raise ValueError(f"cache must be 'score' or 'lru', got '{self.cache}'")
        if self.maintenance_rule not in MAINTENANCE_RULES:
            raise ValueError(
                f"maintenance_rule must be one of {MAINTENANCE_RULES}, "
                f"got '{self.maintenance_rule}'"
            )

    def cluster_kwargs(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if k in CLUSTER_KEYS and v is not None}


def join_radius(radius: float, activations: sp.csr_matrix) -> float:
    """The offline radius expressed on Eq. 9's conditional measure: ``radius`` itself.

    Offline, j is within ``radius`` of medoid i when the Jaccard similarity
    ``J = A_ij / (f_i + f_j - A_ij)`` exceeds ``1 - radius``
    (:mod:`sim.policies.swarm.cooccur`).  Eq. 9 measures the conditional rate
    ``P(i | j) = A_ij / f_j``, which is never below ``J`` (its denominator is
    smaller), so every pair within ``radius`` offline is within ``radius`` on
    Eq. 9's measure too: the same number is the loosest bound that keeps all
    of them.  ``activations`` is kept for callers; the measure needs no rate.
    """
    del activations
    return float(radius)


def _append_row(arr: np.ndarray, n: int, row: np.ndarray) -> np.ndarray:
    """Write ``row`` at index n, doubling ``arr`` when full; the array back."""
    if n >= arr.shape[0]:
        grown = np.zeros((max(2 * arr.shape[0], n + 1),) + arr.shape[1:], dtype=arr.dtype)
        grown[: arr.shape[0]] = arr
        arr = grown
    arr[n] = row
    return arr


class SwarmDesign:
    """Swarm for one layer (see the module doc)."""

    # seed 000 §7: "the CPU concurrently performs ... predicting the KV clusters ...
    # by comparing the layer embedding with the cluster medoids" (index in DRAM, §4)
    score_device = "cpu"

    def __init__(self, params: SwarmParams | None = None, name: str = "swarm"):
        self.params = params or SwarmParams()
        self.name = name

    # -- offline ----------------------------------------------------------
    def build(
        self,
        activations: sp.csr_matrix,
        keys: np.ndarray,
        layout: Layout,
        rng: np.random.Generator,
        clustering: Clustering | None = None,
    ) -> None:
        """Offline phase; ``clustering`` overrides the clusterer (tests)."""
        p = self.params
        x = sp.csr_matrix(activations, dtype=bool)
        x.eliminate_zeros()
        n = keys.shape[0]
        if x.shape[1] != n:
            raise ValueError(f"activations cover {x.shape[1]} entries, keys {n}")
        if clustering is None:
            clustering = cluster(x, ClusterParams(**p.cluster_kwargs()), rng)
        clustering.check()
        members = [np.asarray(m, dtype=np.int64) for m in clustering.members]
        if p.shuffle:  # relabel entries at random: sizes and replication kept, co-activation lost
            perm = rng.permutation(clustering.n_entries)
            members = [perm[m] for m in members]
        self.clustering = Clustering(members, clustering.radius, clustering.n_entries)
        self.layout, self.n_prefix = layout, n
        # what a bucket costs its disk (routing's measure): per I/O, per entry, I/O size cap
        self.cost = ReadCost(
            layout.ssd_io_us, layout.ssd_entry_us, layout.entry_bytes, layout.max_io_bytes
        )
        self.placement: Placement = place(self.clustering, layout.n_ssd, p.balance_placement)
        self._keys = np.array(keys, dtype=np.float64)
        medoids = self.clustering.medoids
        self._mkeys = self._keys[medoids].copy()
        # route records = replicas of the medoids; only new tokens gain replicas later,
        # and a new token is either a singleton's medoid (1 replica) or no medoid at all
        self._routes = int(self.placement.replication()[medoids].sum())
        room = layout.cache_entries(self.index_bytes())  # what the index leaves
        sizes = dict(enumerate(self.clustering.sizes.tolist()))
        if p.cache == "score":
            freq = np.bincount(x.indices, minlength=n)[medoids].astype(float).tolist()
            self.cache: ScoreCache | LRUCache = ScoreCache(
                room, sizes, freq, layout.ssd_latency_us, layout.ssd_entry_us
            )
            self.cache.fill(range(len(sizes)))
        else:
            self.cache = LRUCache(room, sizes)
        self.r_join = (
            p.join_radius if p.join_radius is not None else join_radius(clustering.radius, x)
        )
        self._cap = ClusterParams(**p.cluster_kwargs()).replica_cap
        self._t = 0
        self._final = n  # next new token to leave the window
        self._window: dict[int, tuple[int, Counter[int]]] = {}  # token -> (n active, co-active)
        self.totals = {"joins": 0, "new_clusters": 0}

    def index_bytes(self) -> int:
        k = len(self.clustering.members)
        return int(k * self.layout.key_bytes + ROUTE_BYTES * self._routes)

    def host_bytes(self) -> int:
        """The index (scored on the host) and the cache's room, in bytes."""
        return self.index_bytes() + self.cache.capacity * self.layout.entry_bytes

    def ssd_bytes(self) -> np.ndarray:
        """Slots the placement allocated per disk (replicas included) x entry bytes."""
        return self.placement.slots_used * self.layout.entry_bytes

    # -- online -----------------------------------------------------------
    def step(self, t: int, query: np.ndarray, new_key: np.ndarray) -> StepDecision:
        if t != self._t:
            raise ValueError(f"steps run in order: expected {self._t}, got {t}")
        self._t += 1
        lay, n_prefix = self.layout, self.n_prefix
        self._keys = _append_row(self._keys, n_prefix + t, np.asarray(new_key, dtype=float))
        visible = n_prefix + t + 1
        always = always_selected(visible, lay.sink_tokens, lay.local_window)
        win_start = max(visible - lay.local_window, 0)
        joins, new = self._finalize(win_start)
        self.cache.set_capacity(lay.cache_entries(self.index_bytes()))  # new medoids' keys
        members = self.clustering.members
        k, d = len(members), self._mkeys.shape[1]
        scores = self._mkeys[:k] @ query
        budget = lay.step_budget(visible)
        chosen, extra = take_units(scores, members, budget, always, visible)
        selected = np.union1d(extra, always).astype(np.int64)
        resident = self._resident(visible, always)
        unread = np.ones(visible, dtype=bool)  # in DRAM, or past the last cluster's cut
        unread[selected] = resident[selected]
        buckets = schedule(
            chosen,
            self.placement,
            members,
            self.params.retrieval,
            self.params.dedup,
            unread,
            self.cost,
        )
        hit_clusters = sum(self.cache.contains(int(c)) for c in chosen)
        cache_entries = int(resident[extra].sum()) if extra.size else 0
        self.cache.touch(chosen.tolist())
        if self.params.maintenance and self.params.maintenance_rule == "coactivation":
            self._observe(query, scores, chosen, max(win_start, n_prefix), visible)
        info = {
            "clusters": float(k),
            "index_bytes": float(self.index_bytes()),
            "chosen_clusters": float(chosen.size),
            "cache_hit_clusters": float(hit_clusters),
            "cache_hit_entries": float(cache_entries),
            "cache_used_entries": float(self.cache.used),
            "read_entries": float(buckets.n_reads),
            "joins": float(joins),
            "new_clusters": float(new),
        }
        return StepDecision(
            selected=selected,
            dram_entries=int(resident[selected].sum()),
            ssd_extents=[extents_from_slots(s, lay.entry_bytes, merge=True) for s in buckets.slots],
            rounds=buckets.rounds,
            duplicate_entries=buckets.duplicates,
            score_flops=2.0 * d * k,
            score_bytes=float(k * lay.key_bytes),
            info=info,
        )

    def _resident(self, visible: int, always: np.ndarray) -> np.ndarray:
        """DRAM-resident entries: sinks, window and members of cached clusters."""
        mask = np.zeros(visible, dtype=bool)
        mask[always] = True
        for c in self.cache.cached():
            mask[self.clustering.members[c]] = True
        return mask

    def _observe(
        self, query: np.ndarray, scores: np.ndarray, chosen: np.ndarray, lo: int, hi: int
    ) -> None:
        """Record which window tokens ``lo..hi-1`` were co-active with which medoids."""
        if chosen.size == 0 or lo >= hi:
            return
        threshold = scores[chosen].min()
        active_medoids = np.nonzero(scores >= threshold)[0].tolist()
        tokens = np.arange(lo, hi)
        for e in tokens[self._keys[lo:hi] @ query >= threshold].tolist():
            n, co = self._window.get(e, (0, Counter()))
            co.update(active_medoids)
            self._window[e] = (n + 1, co)

    def _finalize(self, win_start: int) -> tuple[int, int]:
        """New tokens that left the window join clusters (or open one)."""
        joins = new = 0
        while self._final < win_start:
            e = self._final
            self._final += 1
            n, co = self._window.pop(e, (0, Counter()))
            targets = self._targets(e, n, co) if self.params.maintenance else []
            for c in targets:
                self._join(e, c)
            if not targets:
                self._new_cluster(e)
            joins += len(targets)
            new += not targets
        self.totals["joins"] += joins
        self.totals["new_clusters"] += new
        return joins, new

    def _targets(self, e: int, n: int, co: Counter[int]) -> list[int]:
        """The clusters leaving token ``e`` joins under the maintenance rule."""
        k = len(self.clustering.members)
        sizes = self.clustering.sizes if self.params.maintenance_rule == "min-size" else None
        return maintenance_targets(
            self.params.maintenance_rule,
            co,
            n,
            self.r_join,
            self._cap,
            sizes,
            self._mkeys[:k],
            self._keys[e],
        )

    def _join(self, e: int, c: int) -> None:
        m = self.clustering.members
        m[c] = np.append(m[c], e)
        self.placement.add(e, c)
        self.clustering.n_entries = max(self.clustering.n_entries, e + 1)
        self.cache.resize(c, int(m[c].size))

    def _new_cluster(self, e: int) -> None:
        c = self.placement.new_cluster(e)
        self.clustering.members.append(np.array([e], dtype=np.int64))
        self._mkeys = _append_row(self._mkeys, c, self._keys[e])
        self.clustering.n_entries = max(self.clustering.n_entries, e + 1)
        self.cache.resize(c, 1)
        self._routes += 1


register("swarm", SwarmParams, SwarmDesign)

# Ablations: Swarm with a preset; design_params may still override any knob.
ABLATIONS: dict[str, dict[str, object]] = {
    "swarm-medoid-only": {"medoid_only": True},  # §8.3 Offline Modeling
    "swarm-no-replica": {"replicate": False},
    "swarm-no-balance": {"balance_placement": False},  # §8.3 Offline Placement-SSD
    "swarm-static": {"retrieval": "static"},  # §8.3 Online Retrieval
    "swarm-no-dedup": {"dedup": False},
    "swarm-first-replica": {"retrieval": "first"},
    # placement alone: first-replica routing, so replicas cannot hide the placement
    "swarm-no-balance-first": {"balance_placement": False, "retrieval": "first"},
    # control (ours): clusters of the same sizes with random members; what the
    # co-activation structure is worth (nothing on an unstructured trace)
    "swarm-shuffled": {"shuffle": True},
    "swarm-lru": {"cache": "lru"},  # §8.3 Online Update-Cache
}


for _name, _preset in ABLATIONS.items():
    register(_name, SwarmParams, functools.partial(SwarmDesign, name=_name), preset=_preset)

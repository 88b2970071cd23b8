"""Swarm's decoupled entry-bucket scheduling (§6.1) and its ablations (§8.3).

Eq. 8 (our reading): the I/O entry set is the union of the activated
clusters' members minus the entries already resident in DRAM,
``E = (U_{c in S} C_c) \\ R``.  Every SSD has a bucket.  Entries are taken in
ascending replication factor -- the number of *distinct* SSDs holding a
replica (two replicas on one disk count once) -- ties by entry id.  An entry
on one disk goes to that disk's bucket; an entry on several goes to the
bucket that is smallest at that moment, ties to the lowest disk index (the
paper's "arbitrary", made deterministic).  Among replicas on the chosen disk
the first placed is read.  Each submission round takes the head of every
bucket (one batched syscall), so ``rounds`` = the largest bucket.

Policies (the §8.3 "Online Retrieval" ablations):

* ``balanced`` -- Swarm: dedup + the greedy above;
* ``first`` -- the paper's retrieval "No Balance": dedup, but every entry is
  read from its first replica;
* ``static`` -- the paper's "Static": first replica and *no* dedup (an entry
  in two selected clusters is read twice from its first replica); it ignores
  ``dedup``;
* ``dedup=False`` with ``balanced``/``first`` -- "No Dedup": each selected
  cluster's members are read from that cluster's own replica (the placement
  already spread them), duplicates included.

All policies skip DRAM-resident entries, so the ablations isolate the one
mechanism each removes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.policies.swarm.placement import Placement

POLICIES = ("balanced", "static", "first")


@dataclass
class Buckets:
    """Per-disk read queues of one step: ``slots[k]``/``entries[k]`` in order."""

    slots: list[np.ndarray]
    entries: list[np.ndarray]
    duplicates: int = 0  # reads beyond the first of an entry this step

    @property
    def sizes(self) -> np.ndarray:
        return np.array([s.size for s in self.slots], dtype=np.int64)

    @property
    def rounds(self) -> int:
        """Batched submissions: one per bucket depth (0 when nothing is read)."""
        return int(self.sizes.max()) if self.slots else 0

    @property
    def n_reads(self) -> int:
        return int(self.sizes.sum())

    def batches(self) -> list[list[tuple[int, int]]]:
        """(disk, slot) of each submission round: the heads of all buckets."""
        return [
            [(k, int(s[r])) for k, s in enumerate(self.slots) if r < s.size]
            for r in range(self.rounds)
        ]


def _from_replicas(pl: Placement, reps: np.ndarray, entries: np.ndarray, dup: int) -> Buckets:
    disks = pl.disk[reps]
    slots = [pl.slot[reps[disks == k]] for k in range(pl.n_ssd)]
    ents = [entries[disks == k] for k in range(pl.n_ssd)]
    return Buckets(slots, ents, dup)


def _distinct_disks(pl: Placement, e: int) -> tuple[list[int], list[int]]:
    """Distinct disks holding ``e`` (ascending) and the first replica on each."""
    a, b = int(pl.indptr[e]), int(pl.indptr[e + 1])
    first: dict[int, int] = {}
    for r, d in zip(range(a, b), pl.disk[a:b].tolist(), strict=True):
        first.setdefault(d, r)
    disks = sorted(first)
    return disks, [first[d] for d in disks]


def _n_distinct(pl: Placement, entries: np.ndarray) -> np.ndarray:
    """Replication factor of each entry: distinct disks holding a replica."""
    counts = pl.indptr[entries + 1] - pl.indptr[entries]
    pos = np.repeat(np.arange(entries.size), counts)
    rep = np.arange(pos.size) - np.repeat(np.cumsum(counts) - counts, counts)
    rep += np.repeat(pl.indptr[entries], counts)
    pairs = np.unique(pos * pl.n_ssd + pl.disk[rep])
    return np.bincount(pairs // pl.n_ssd, minlength=entries.size)


def assign(entries: np.ndarray, pl: Placement, policy: str = "balanced") -> Buckets:
    """Bucket a deduplicated entry set (ascending replication, see module doc)."""
    entries = np.unique(np.asarray(entries, dtype=np.int64))
    first_rep = pl.indptr[entries]
    if policy == "first" or pl.n_ssd == 1 or entries.size == 0:
        n_dist = np.ones(entries.size, dtype=np.int64)
    else:
        n_dist = _n_distinct(pl, entries)
    order = np.lexsort((entries, n_dist))
    entries, n_dist = entries[order], n_dist[order]
    reps = first_rep[order].copy()
    if policy == "balanced":
        single = n_dist == 1
        load = np.bincount(pl.disk[reps[single]], minlength=pl.n_ssd).tolist()
        for i in np.nonzero(~single)[0]:
            disks, rs = _distinct_disks(pl, int(entries[i]))
            j = min(range(len(disks)), key=lambda j: (load[disks[j]], disks[j]))
            load[disks[j]] += 1
            reps[i] = rs[j]
    elif policy not in ("first", "static"):
        raise ValueError(f"unknown retrieval policy '{policy}' (known: {', '.join(POLICIES)})")
    return _from_replicas(pl, reps, entries, 0)


def schedule(
    clusters: Sequence[int],
    placement: Placement,
    members: Sequence[np.ndarray],
    policy: str = "balanced",
    dedup: bool = True,
    resident: np.ndarray | None = None,
) -> Buckets:
    """Buckets for reading the selected ``clusters`` (ids into ``members``).

    ``resident`` is a boolean mask over entry ids (True = already in DRAM,
    not read); entries beyond its length count as not resident.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown retrieval policy '{policy}' (known: {', '.join(POLICIES)})")
    cl = [int(c) for c in clusters]
    if not cl:
        return assign(np.zeros(0, dtype=np.int64), placement, policy)
    ents = np.concatenate([np.asarray(members[c], dtype=np.int64) for c in cl])
    reps = np.concatenate([placement.cluster_replicas(c) for c in cl])
    if resident is not None:
        res = np.asarray(resident, dtype=bool)
        keep = ~np.where(ents < res.size, res[np.minimum(ents, res.size - 1)], False)
        ents, reps = ents[keep], reps[keep]
    if dedup and policy != "static":
        return assign(ents, placement, policy)
    if policy == "static":
        reps = placement.indptr[ents]
    dup = int(ents.size - np.unique(ents).size)
    return _from_replicas(placement, reps, ents, dup)


def optimal_makespan(entries: np.ndarray, placement: Placement, limit: int = 200_000) -> int:
    """Smallest possible largest bucket for a deduplicated entry set, by brute
    force over every entry's distinct disks (tests only: tiny inputs)."""
    entries = np.unique(np.asarray(entries, dtype=np.int64))
    choices = [_distinct_disks(placement, int(e))[0] for e in entries]
    if int(np.prod([len(c) for c in choices], dtype=np.float64)) > limit:
        raise ValueError("too many assignments for brute force")
    best = entries.size
    for pick in itertools.product(*choices):
        best = min(best, int(np.bincount(pick, minlength=placement.n_ssd).max()) if pick else 0)
    return best

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


def _disk_choices(pl: Placement, entries: np.ndarray) -> tuple[np.ndarray, ...]:
    """Distinct disks holding each of ``entries`` and the first replica on each.

    Returns ``(ptr, disk, rep)``: entry i's disks (ascending) are
    ``disk[ptr[i]:ptr[i + 1]]`` and the replica read there ``rep[...]``.
    """
    counts = pl.indptr[entries + 1] - pl.indptr[entries]
    pos = np.repeat(np.arange(entries.size), counts)
    rep = np.arange(pos.size) - np.repeat(np.cumsum(counts) - counts, counts)
    rep += np.repeat(pl.indptr[entries], counts)
    none = np.iinfo(np.int64).max
    table = np.full((entries.size, pl.n_ssd), none, dtype=np.int64)
    np.minimum.at(table, (pos, pl.disk[rep]), rep)  # lowest replica per (entry, disk)
    row, disk = np.nonzero(table != none)  # row-major: disks ascending per entry
    ptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=entries.size))])
    return ptr, disk.astype(np.int64), table[row, disk]


def assign(entries: np.ndarray, pl: Placement, policy: str = "balanced") -> Buckets:
    """Bucket an entry set once per entry: ``balanced`` by the greedy of the
    module doc; ``first``/``static`` from first replicas, in id order."""
    if policy not in POLICIES:
        raise ValueError(f"unknown retrieval policy '{policy}' (known: {', '.join(POLICIES)})")
    entries = np.unique(np.asarray(entries, dtype=np.int64))
    if policy != "balanced" or pl.n_ssd == 1:
        return _from_replicas(pl, pl.indptr[entries], entries, 0)  # first replicas, by id
    ptr, disk, rep = _disk_choices(pl, entries)
    n_dist = np.diff(ptr)
    order = np.lexsort((entries, n_dist))
    single = n_dist[order] == 1
    reps = rep[ptr[:-1]][order]  # single-disk entries: their (first) replica there
    load = np.bincount(disk[ptr[:-1]][order][single], minlength=pl.n_ssd).tolist()
    ptr_l, disk_l, rep_l = ptr.tolist(), disk.tolist(), rep.tolist()
    for i in np.nonzero(~single)[0].tolist():
        p = int(order[i])
        j = min(range(ptr_l[p], ptr_l[p + 1]), key=lambda j: (load[disk_l[j]], disk_l[j]))
        load[disk_l[j]] += 1
        reps[i] = rep_l[j]
    return _from_replicas(pl, reps, entries[order], 0)


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
    if resident is not None and len(resident):
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
    ptr, disk, _ = _disk_choices(placement, entries)
    choices = [disk[a:b].tolist() for a, b in zip(ptr[:-1], ptr[1:], strict=True)]
    if int(np.prod([len(c) for c in choices], dtype=np.float64)) > limit:
        raise ValueError("too many assignments for brute force")
    best = entries.size
    for pick in itertools.product(*choices):
        best = min(best, int(np.bincount(pick, minlength=placement.n_ssd).max()) if pick else 0)
    return best

"""Swarm's decoupled entry-bucket scheduling (§6.1) and its ablations (§8.3).

Eq. 8 (our reading): the I/O entry set is the union of the activated
clusters' members minus the entries already resident in DRAM,
``E = (U_{c in S} C_c) \\ R``.  Every SSD has a bucket.  An entry's
candidate replicas are those of the selected clusters that hold it: the
router knows a member's place through its cluster (the index keeps the
medoids' routes, a cluster's members follow in its runs, §5.2), and a
replica outside the selected clusters lies in no run being read.  Entries
are taken in ascending replication factor -- the number of *distinct* SSDs
among the candidates (two on one disk count once) -- ties by entry id.  An
entry with one candidate goes to its disk's bucket; one with several goes to
the candidate whose bucket is smallest once the entry is in it, ties to the
lowest disk index, then the first placed replica (the paper's "arbitrary",
made deterministic).  (:func:`assign` alone, without ``replicas``, offers
every replica.)

A bucket's *size* is what it costs its disk once reads are coalesced
(:class:`ReadCost`): a bucket is read as runs of consecutive slots, each run
one range cut into I/Os of at most the device's maximum transfer size, so it
costs ``n_ios x io_us + n_entries x entry_us``.  An entry adjacent to a run
already in the bucket adds its bytes and no I/O (one that joins two runs
even removes one), so the greedy keeps a selected cluster's run on the disk
where Eq. 7 put it instead of splitting it over other clusters' replicas.
With one I/O per entry (``max_io_bytes = entry_bytes``, or the default
``ReadCost()``) every entry costs the same and the greedy is the paper's,
counted in entries.  Each submission round takes the head I/O of every
bucket (one batched syscall), so ``rounds`` = the most I/Os one disk issues.

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
from dataclasses import dataclass, field

import numpy as np

from sim.policies.swarm.placement import Placement

POLICIES = ("balanced", "static", "first")


@dataclass(frozen=True)
class ReadCost:
    """What a bucket costs its disk: ``io_us`` per I/O (the device's 1/IOPS or
    the io path's per-I/O CPU cost, whichever is larger), ``entry_us`` per
    entry (its bytes at the device's bandwidth); a run of ``L`` consecutive
    slots is ``ceil(L x entry_bytes / max_io_bytes)`` I/Os (one when
    ``max_io_bytes`` is 0: no limit).  The default makes every entry one I/O
    of cost 1: the paper's count in entries."""

    io_us: float = 1.0
    entry_us: float = 0.0
    entry_bytes: int = 1
    max_io_bytes: int = 1

    def ios(self, run: np.ndarray | int) -> np.ndarray | int:
        """I/Os of a run (or runs) of ``run`` consecutive slots (0 for none)."""
        if self.max_io_bytes <= 0:
            return np.minimum(run, 1)
        return -(-np.asarray(run) * self.entry_bytes // self.max_io_bytes)

    def ios1(self, run: int) -> int:
        """:meth:`ios` of one run, in plain integers (the greedy's inner loop)."""
        if self.max_io_bytes <= 0:
            return min(run, 1)
        return -(-run * self.entry_bytes // self.max_io_bytes)

    def of(self, n_ios: int, n_entries: int) -> float:
        return n_ios * self.io_us + n_entries * self.entry_us


def slot_runs(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last slot of each run of consecutive slots, split where
    :func:`~sim.policies.kvdesign.extents_from_slots` splits them (a slot
    read twice starts a new run)."""
    s = np.sort(np.asarray(slots, dtype=np.int64))
    if s.size == 0:
        return s, s
    cuts = np.nonzero(np.diff(s) != 1)[0] + 1
    return s[np.concatenate([[0], cuts])], s[np.concatenate([cuts - 1, [s.size - 1]])]


@dataclass
class Buckets:
    """Per-disk read queues of one step: ``slots[k]``/``entries[k]`` in order."""

    slots: list[np.ndarray]
    entries: list[np.ndarray]
    duplicates: int = 0  # reads beyond the first of an entry this step
    cost: ReadCost = field(default_factory=ReadCost)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([s.size for s in self.slots], dtype=np.int64)

    @property
    def io_counts(self) -> np.ndarray:
        """I/Os per disk once each run of consecutive slots is one range."""
        runs = [slot_runs(s) for s in self.slots]
        return np.array([int(np.sum(self.cost.ios(b - a + 1))) for a, b in runs], np.int64)

    @property
    def costs(self) -> np.ndarray:
        """Each bucket's cost (:class:`ReadCost`), in the cost's unit."""
        return np.array(
            [self.cost.of(n, s.size) for n, s in zip(self.io_counts, self.slots, strict=True)]
        )

    @property
    def rounds(self) -> int:
        """Batched submissions: one per I/O of the deepest bucket (0 when nothing is read)."""
        return int(self.io_counts.max()) if self.slots else 0

    @property
    def n_reads(self) -> int:
        return int(self.sizes.sum())


def _from_replicas(
    pl: Placement, reps: np.ndarray, entries: np.ndarray, dup: int, cost: ReadCost
) -> Buckets:
    disks = pl.disk[reps]
    slots = [pl.slot[reps[disks == k]] for k in range(pl.n_ssd)]
    ents = [entries[disks == k] for k in range(pl.n_ssd)]
    return Buckets(slots, ents, dup, cost)


def _replica_table(pl: Placement, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every replica of ``entries``: ``(ptr, rep)``, entry i's replicas
    ``rep[ptr[i]:ptr[i + 1]]`` in placement order."""
    counts = pl.indptr[entries + 1] - pl.indptr[entries]
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rep = np.arange(ptr[-1]) - np.repeat(ptr[:-1], counts) + np.repeat(pl.indptr[entries], counts)
    return ptr, rep


def _disk_choices(pl: Placement, entries: np.ndarray) -> tuple[np.ndarray, ...]:
    """Distinct disks holding each of ``entries`` and the first replica on each.

    Returns ``(ptr, disk, rep)``: entry i's disks (ascending) are
    ``disk[ptr[i]:ptr[i + 1]]`` and the first replica there ``rep[...]``.
    """
    rptr, reps = _replica_table(pl, entries)
    pos = np.repeat(np.arange(entries.size), np.diff(rptr))
    none = np.iinfo(np.int64).max
    table = np.full((entries.size, pl.n_ssd), none, dtype=np.int64)
    np.minimum.at(table, (pos, pl.disk[reps]), reps)  # lowest replica per (entry, disk)
    row, disk = np.nonzero(table != none)  # row-major: disks ascending per entry
    ptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=entries.size))])
    return ptr, disk.astype(np.int64), table[row, disk]


class _Runs:
    """The runs of consecutive slots in each bucket, by both ends, so adding a
    slot updates the bucket's I/O count exactly in O(1)."""

    def __init__(self, pl: Placement, reps: np.ndarray, cost: ReadCost):
        self.cost = cost
        self.by_start: list[dict[int, int]] = [{} for _ in range(pl.n_ssd)]
        self.by_end: list[dict[int, int]] = [{} for _ in range(pl.n_ssd)]
        self.n_ios = [0] * pl.n_ssd
        self.n_ent = np.bincount(pl.disk[reps], minlength=pl.n_ssd).tolist()
        disk, slot = pl.disk[reps], pl.slot[reps]
        for k in range(pl.n_ssd):
            first, last = slot_runs(slot[disk == k])
            self.by_start[k] = dict(zip(first.tolist(), last.tolist(), strict=True))
            self.by_end[k] = dict(zip(last.tolist(), first.tolist(), strict=True))
            self.n_ios[k] = int(np.sum(cost.ios(last - first + 1)))

    def delta_ios(self, k: int, s: int) -> int:
        """I/Os slot ``s`` adds to bucket k (<= 0 when it extends or joins runs)."""
        left = s - self.by_end[k].get(s - 1, s)  # run ending at s-1: its length
        right = self.by_start[k].get(s + 1, s) - s
        ios = self.cost.ios1
        return int(ios(left + 1 + right) - ios(left) - ios(right))

    def after(self, k: int, s: int) -> float:
        """Bucket k's cost with slot ``s`` added."""
        return self.cost.of(self.n_ios[k] + self.delta_ios(k, s), self.n_ent[k] + 1)

    def add(self, k: int, s: int) -> None:
        self.n_ios[k] += self.delta_ios(k, s)
        self.n_ent[k] += 1
        lo = self.by_end[k].pop(s - 1, s)
        hi = self.by_start[k].pop(s + 1, s)
        self.by_start[k].pop(lo, None)
        self.by_end[k].pop(hi, None)
        self.by_start[k][lo], self.by_end[k][hi] = hi, lo


def _candidates(
    pl: Placement, entries: np.ndarray, replicas: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct entries, their candidate replicas as CSR ``(ptr, rep)`` in
    placement order, and each entry's number of distinct candidate disks.
    ``replicas`` (aligned with ``entries``) restricts the candidates to those
    replicas; ``None`` offers every replica of each entry."""
    if replicas is None:
        ents = np.unique(entries)
        ptr, rep = _replica_table(pl, ents)
    else:
        pairs = np.unique(np.stack([entries, np.asarray(replicas, np.int64)], axis=1), axis=0)
        ents, first, counts = np.unique(pairs[:, 0], return_index=True, return_counts=True)
        ptr = np.append(first, pairs.shape[0]).astype(np.int64)
        rep = pairs[:, 1]
    row = np.repeat(np.arange(ents.size), np.diff(ptr))
    on = np.unique(row * pl.n_ssd + pl.disk[rep])  # distinct (entry, disk) pairs
    return ents, ptr, rep, np.bincount(on // pl.n_ssd, minlength=ents.size)


def assign(
    entries: np.ndarray,
    pl: Placement,
    policy: str = "balanced",
    cost: ReadCost | None = None,
    replicas: np.ndarray | None = None,
) -> Buckets:
    """Bucket an entry set once per entry: ``balanced`` by the greedy of the
    module doc over ``replicas`` (aligned with ``entries``; default: every
    replica), bucket sizes measured by ``cost`` (default: in entries);
    ``first``/``static`` from first replicas, in id order."""
    if policy not in POLICIES:
        raise ValueError(f"unknown retrieval policy '{policy}' (known: {', '.join(POLICIES)})")
    cost = cost or ReadCost()
    entries = np.asarray(entries, dtype=np.int64)
    if policy != "balanced":
        entries = np.unique(entries)
        return _from_replicas(pl, pl.indptr[entries], entries, 0, cost)  # first replicas, by id
    ents, ptr, rep, n_dist = _candidates(pl, entries, replicas)
    order = np.lexsort((ents, n_dist))
    counts = np.diff(ptr)[order]
    starts = np.repeat(ptr[:-1][order], counts)
    rptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    reps = rep[starts + np.arange(rptr[-1]) - np.repeat(rptr[:-1], counts)]
    forced = counts == 1  # one candidate: no choice, bucketed up front
    chosen = reps[rptr[:-1]].copy()
    runs = _Runs(pl, chosen[forced], cost)
    disk_l, slot_l = pl.disk[reps].tolist(), pl.slot[reps].tolist()
    for i in np.nonzero(~forced)[0].tolist():
        js = range(int(rptr[i]), int(rptr[i + 1]))
        j = min(js, key=lambda j: (runs.after(disk_l[j], slot_l[j]), disk_l[j], j))
        runs.add(disk_l[j], slot_l[j])
        chosen[i] = reps[j]
    return _from_replicas(pl, chosen, ents[order], 0, cost)


def schedule(
    clusters: Sequence[int],
    placement: Placement,
    members: Sequence[np.ndarray],
    policy: str = "balanced",
    dedup: bool = True,
    resident: np.ndarray | None = None,
    cost: ReadCost | None = None,
) -> Buckets:
    """Buckets for reading the selected ``clusters`` (ids into ``members``).

    ``resident`` is a boolean mask over entry ids (True = already in DRAM,
    not read); entries beyond its length count as not resident.  ``cost``
    measures the buckets (:class:`ReadCost`; default: one I/O per entry).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown retrieval policy '{policy}' (known: {', '.join(POLICIES)})")
    cl = [int(c) for c in clusters]
    if not cl:
        return assign(np.zeros(0, dtype=np.int64), placement, policy, cost)
    ents = np.concatenate([np.asarray(members[c], dtype=np.int64) for c in cl])
    reps = np.concatenate([placement.cluster_replicas(c) for c in cl])
    if resident is not None and len(resident):
        res = np.asarray(resident, dtype=bool)
        keep = ~np.where(ents < res.size, res[np.minimum(ents, res.size - 1)], False)
        ents, reps = ents[keep], reps[keep]
    if dedup and policy != "static":
        return assign(ents, placement, policy, cost, reps)
    if policy == "static":
        reps = placement.indptr[ents]
    dup = int(ents.size - np.unique(ents).size)
    return _from_replicas(placement, reps, ents, dup, cost or ReadCost())


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

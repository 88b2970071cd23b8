"""Swarm's SSD tier: round-robin placement of clusters over SSDs (§5.2, Tier 2).

Eq. 7 (lost in extraction; our reading of the prose): a global disk pointer
``p`` starts at 0 and clusters are processed in order; cluster c starts at
disk ``start_c = p mod D`` and its members (medoid first) go to consecutive
disks ``(start_c + i) mod D`` (wrap-around); then ``p += |c|``, so the next
cluster starts on the disk after the one this cluster ended on.  Each replica
takes the next free slot of its disk (byte offset = slot x entry_bytes).

``balance=False`` is the "No Balance" ablation of §8.3 ("organizes tokens
by clusters but places them starting from a single SSD, leading to
imbalanced utilization").  Our reading: a cluster is not striped -- all its
members go to one disk, clusters taking disks in turn (cluster c on disk
``c mod D``), so storage stays even but one cluster's read hits one disk.
(The other reading, every cluster striped from disk 0, is almost balanced
as soon as clusters have ``D`` or more members, which contradicts the
paper's finding.)

Maintenance (§6.2): a new token that joins cluster c goes "on the next SSD
allocated for that cluster", disk ``(start_c + |c|) mod D`` (without
balance: the cluster's disk), and ``|c|`` grows by one; a new singleton
cluster starts where the global pointer is (without balance: on the next
disk in turn), as any other cluster would.
"""

from __future__ import annotations

import copy

import numpy as np

from sim.policies.swarm.types import Clustering


class Placement:
    """Where every replica of every entry lives.

    Replicas are kept in entry order (a CSR table: the replicas of entry e
    are ``indptr[e]:indptr[e + 1]``, in the order the clusters placed them),
    each with its ``disk``, ``slot`` and owning ``cluster``.  Entries may only
    be appended (new tokens are finalized in id order).
    """

    def __init__(self, n_ssd: int, balance: bool = True):
        if n_ssd < 1:
            raise ValueError(f"n_ssd must be >= 1, got {n_ssd}")
        self.n_ssd = int(n_ssd)
        self.balance = balance
        self.pointer = 0  # Eq. 7's global disk pointer
        self.slots_used = np.zeros(self.n_ssd, dtype=np.int64)  # slots allocated per disk
        self.start: list[int] = []  # start disk of each cluster
        self.size: list[int] = []  # members placed per cluster
        self._indptr = np.zeros(1, dtype=np.int64)
        self._disk = np.zeros(0, dtype=np.int64)
        self._slot = np.zeros(0, dtype=np.int64)
        self._cluster = np.zeros(0, dtype=np.int64)
        self._n_rep = 0
        self._crep: list[list[int]] = []  # replica index of each member, per cluster

    def __deepcopy__(self, memo: dict) -> Placement:
        """An independent copy: arrays copied, lists of ints copied one level."""
        new = copy.copy(self)
        for name in ("slots_used", "_indptr", "_disk", "_slot", "_cluster"):
            setattr(new, name, getattr(self, name).copy())
        new.start, new.size = list(self.start), list(self.size)
        new._crep = [list(c) for c in self._crep]
        return new

    # -- read-only views ----------------------------------------------------
    @property
    def n_entries(self) -> int:
        return self._indptr.size - 1

    @property
    def n_clusters(self) -> int:
        return len(self.start)

    @property
    def indptr(self) -> np.ndarray:
        return self._indptr

    @property
    def disk(self) -> np.ndarray:
        return self._disk[: self._n_rep]

    @property
    def slot(self) -> np.ndarray:
        return self._slot[: self._n_rep]

    @property
    def cluster(self) -> np.ndarray:
        return self._cluster[: self._n_rep]

    def replicas(self, entry: int) -> list[tuple[int, int]]:
        """(disk, slot) of each replica of ``entry``, in placement order."""
        a, b = self._indptr[entry], self._indptr[entry + 1]
        return list(zip(self._disk[a:b].tolist(), self._slot[a:b].tolist(), strict=True))

    def cluster_replicas(self, c: int) -> np.ndarray:
        """Replica indices of cluster c's members, aligned with its member list."""
        return np.asarray(self._crep[c], dtype=np.int64)

    def replication(self) -> np.ndarray:
        """Replicas per entry (copies, not distinct disks)."""
        return np.diff(self._indptr)

    # -- building -------------------------------------------------------------
    def _next_start(self, size: int) -> int:
        """Start disk of the next cluster (of ``size`` members)."""
        start = (self.pointer if self.balance else self.n_clusters) % self.n_ssd
        self.pointer += size
        return start

    def _disk_of(self, cluster: int, member: int) -> int:
        """Disk of the ``member``-th member of ``cluster``."""
        step = member if self.balance else 0
        return (self.start[cluster] + step) % self.n_ssd

    def _alloc(self, disks: np.ndarray) -> np.ndarray:
        """Next free slot on each of ``disks`` (in order; repeats allowed)."""
        slots = np.empty(disks.size, dtype=np.int64)
        for k in range(self.n_ssd):
            at = np.nonzero(disks == k)[0]
            slots[at] = self.slots_used[k] + np.arange(at.size)
            self.slots_used[k] += at.size
        return slots

    def _reserve(self, n: int) -> None:
        need = self._n_rep + n
        if need > self._disk.size:
            cap = max(need, 2 * self._disk.size, 16)
            for name in ("_disk", "_slot", "_cluster"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=np.int64)
                new[: self._n_rep] = old[: self._n_rep]
                setattr(self, name, new)

    def add(self, entry: int, cluster: int) -> tuple[int, int]:
        """Place a new replica of ``entry`` (a new token) in ``cluster``:
        disk ``(start_c + |c|) mod D``, its next free slot.  Returns (disk, slot)."""
        if entry < self.n_entries - 1:
            raise ValueError(f"entries are appended in id order: {entry} < {self.n_entries - 1}")
        while self.n_entries <= entry:
            self._indptr = np.append(self._indptr, self._indptr[-1])
        disk = self._disk_of(cluster, self.size[cluster])
        self.size[cluster] += 1
        slot = int(self._alloc(np.array([disk]))[0])
        self._reserve(1)
        r = self._n_rep  # the entry is the last one, so its replicas end the table
        self._disk[r], self._slot[r], self._cluster[r] = disk, slot, cluster
        self._n_rep += 1
        self._indptr[entry + 1 :] += 1
        self._crep[cluster].append(r)
        return disk, slot

    def new_cluster(self, entry: int) -> int:
        """Open a singleton cluster for ``entry`` (placed like any cluster); its id."""
        c = self.n_clusters
        self.start.append(self._next_start(1))
        self.size.append(0)
        self._crep.append([])
        self.add(entry, c)
        return c


def place(clustering: Clustering, n_ssd: int, balance: bool = True) -> Placement:
    """Round-robin placement of ``clustering`` on ``n_ssd`` disks (Eq. 7, see module doc)."""
    pl = Placement(n_ssd, balance)
    sizes = clustering.sizes
    starts = np.empty(sizes.size, dtype=np.int64)
    for c, s in enumerate(sizes.tolist()):
        starts[c] = pl._next_start(s)
        pl.start.append(int(starts[c]))
    pl.size = sizes.tolist()
    n_rep = int(sizes.sum())
    entry = np.concatenate(clustering.members).astype(np.int64) if n_rep else np.zeros(0, np.int64)
    owner = np.repeat(np.arange(sizes.size), sizes)
    offset = np.arange(n_rep) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    disk = (np.repeat(starts, sizes) + (offset if balance else 0)) % n_ssd
    slot = pl._alloc(disk)  # replicas take slots in cluster order, members in order
    order = np.argsort(entry, kind="stable")  # CSR by entry, placement order kept
    pl._reserve(n_rep)
    pl._disk[:n_rep], pl._slot[:n_rep], pl._cluster[:n_rep] = disk[order], slot[order], owner[order]
    pl._n_rep = n_rep
    counts = np.bincount(entry, minlength=clustering.n_entries)
    pl._indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    where = np.empty(n_rep, dtype=np.int64)
    where[order] = np.arange(n_rep)  # replica index of each (cluster, member) pair
    bounds = np.cumsum(sizes)
    pl._crep = [where[b - s : b].tolist() for s, b in zip(sizes, bounds, strict=True)]
    return pl

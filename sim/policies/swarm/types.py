"""Data shared by Swarm's offline clustering and its online phase."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Clustering:
    """Clusters of KV entries of one layer (Swarm §5.1, Algorithm 1).

    ``members[c]`` are the entry ids of cluster c with its medoid first; an
    entry may be a member of several clusters (a replica in each).  Every
    entry ``0..n_entries-1`` belongs to at least one cluster.
    """

    members: list[np.ndarray]
    radius: float
    n_entries: int

    def __deepcopy__(self, memo: dict) -> Clustering:
        """An independent copy (member arrays copied)."""
        return Clustering([m.copy() for m in self.members], self.radius, self.n_entries)

    @property
    def medoids(self) -> np.ndarray:
        return np.array([m[0] for m in self.members], dtype=np.int64)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.int64)

    def replication(self) -> np.ndarray:
        """How many clusters each entry belongs to (>= 1 for every entry)."""
        counts = np.zeros(self.n_entries, dtype=np.int64)
        for m in self.members:
            np.add.at(counts, m, 1)
        return counts

    def check(self) -> None:
        """Raise ValueError unless every entry is covered and ids are valid."""
        rep = self.replication()
        if (rep == 0).any():
            raise ValueError(f"{int((rep == 0).sum())} entries belong to no cluster")
        for c, m in enumerate(self.members):
            if len(m) == 0 or len(np.unique(m)) != len(m):
                raise ValueError(f"cluster {c} is empty or lists an entry twice")

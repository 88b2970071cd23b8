"""Max-min fair rate allocation by progressive filling.

A flow crosses resources; on resource ``r`` it consumes ``coef * rate`` of
the resource's capacity (``coef`` is 1 for a link, where capacity and rate are
both bytes/s; an SSD is modelled as a time-shared device whose capacity is 1
and whose coefficient for a flow is the inverse of the rate the device could
give that flow alone, see ``sim.hw.machine``).  A flow may also carry its own
rate cap (e.g. the queue-depth bound of its I/Os).

Progressive filling: every unfrozen flow's rate grows at the same pace from 0;
when a resource saturates, every unfrozen flow crossing it is frozen at the
current level; when a flow reaches its cap it is frozen at the cap.  The
result is the unique max-min fair allocation (Bertsekas & Gallager, *Data
Networks*, §6.5.2), generalised to per-resource coefficients.  Each round
freezes at least one flow, so there are at most ``len(paths)`` rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Path = Sequence[tuple[int, float]]

_REL = 1e-12


def maxmin_rates(
    paths: Sequence[Path],
    caps: Sequence[float],
    capacity: Sequence[float],
) -> list[float]:
    """Rates for flows ``paths[i]`` (each a sequence of (resource, coef)).

    ``caps[i]`` bounds flow i (``math.inf`` for none); ``capacity[r]`` is
    resource r's capacity.  A flow with no resource and no cap is an error.
    """
    n = len(paths)
    if n == 0:
        return []
    # local resource numbering: remaining capacity, unfrozen coefficient sum, users
    local: dict[int, int] = {}
    remaining: list[float] = []
    coefsum: list[float] = []
    users: list[list[int]] = []
    active: list[int] = []  # unfrozen users per resource (exact, unlike coefsum)
    lpaths: list[list[tuple[int, float]]] = []
    for i, path in enumerate(paths):
        if not path and math.isinf(caps[i]):
            raise ValueError(f"flow {i} crosses no resource and has no rate cap")
        lp = []
        for r, c in path:
            k = local.get(r)
            if k is None:
                k = local[r] = len(remaining)
                remaining.append(capacity[r])
                coefsum.append(0.0)
                users.append([])
                active.append(0)
            coefsum[k] += c
            users[k].append(i)
            active[k] += 1
            lp.append((k, c))
        lpaths.append(lp)
    rates = [0.0] * n
    frozen = [False] * n
    unfrozen = n
    level = 0.0
    nres = len(remaining)
    while unfrozen:
        # the next level at which a resource saturates or a flow hits its cap
        nxt = math.inf
        for k in range(nres):
            cs = coefsum[k]
            if cs > 0.0:
                t = level + remaining[k] / cs
                if t < nxt:
                    nxt = t
        for i in range(n):
            if not frozen[i] and caps[i] < nxt:
                nxt = caps[i]
        step = nxt - level
        for k in range(nres):
            cs = coefsum[k]
            if cs > 0.0:
                remaining[k] -= cs * step
        level = nxt
        tol = max(level, 1.0) * _REL * 16
        to_freeze: list[int] = []
        for k in range(nres):
            cs = coefsum[k]
            if cs > 0.0 and remaining[k] <= tol * cs:
                to_freeze.extend(users[k])
        for i in range(n):
            if not frozen[i] and caps[i] <= level * (1 + _REL):
                to_freeze.append(i)
        before = unfrozen
        for i in to_freeze:
            if frozen[i]:
                continue
            frozen[i] = True
            unfrozen -= 1
            rates[i] = min(level, caps[i])
            for k, c in lpaths[i]:
                active[k] -= 1
                coefsum[k] = coefsum[k] - c if active[k] else 0.0
        if unfrozen == before:  # pragma: no cover - would be a solver bug
            raise RuntimeError(f"progressive filling stalled at level {level}")
    return rates


def components(paths: Sequence[Path]) -> list[list[int]]:
    """Flows grouped by connected component (flows linked by shared resources).

    Max-min rates decompose over components: a flow's rate depends only on the
    flows it shares resources with, transitively.  A flow with no resource is a
    component of its own.  Union-find over resources, O(total path length)."""
    parent: dict[int, int] = {}

    def find(r: int) -> int:
        root = r
        while parent[root] != root:
            root = parent[root]
        while parent[r] != root:
            parent[r], r = root, parent[r]
        return root

    for path in paths:
        first = None
        for r, _ in path:
            parent.setdefault(r, r)
            if first is None:
                first = find(r)
            else:
                other = find(r)
                if other != first:
                    parent[other] = first
    groups: dict[int, list[int]] = {}
    lone: list[list[int]] = []
    for i, path in enumerate(paths):
        if path:
            groups.setdefault(find(path[0][0]), []).append(i)
        else:
            lone.append([i])
    return list(groups.values()) + lone

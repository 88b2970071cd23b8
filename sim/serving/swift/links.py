"""Where a reload goes and how long it takes, from the profile alone.

Fig. 1 of seed 002 compares reloading a history over the shared PCIe host
link with reloading it from a peer GPU over NVLink.  A lone transfer of
``n`` bytes on a path runs at the path's narrowest link, so it takes ``n /
min(capacity)``; each capacity is the profile's datasheet ``gbps`` times its
efficiency factor for the link's kind (the same rule as
:func:`sim.hw.machine.link_capacity`).

The path is found here without the simulator, by the rule the simulator's
machine uses (:meth:`sim.hw.machine.Machine.route`): fewest hops, among
equal-hop paths the one through wider links (neighbours explored widest
first, then by name), never *through* a GPU, SSD or DRAM module.  Written
independently of the machine, so a test can hold the two against each other.
"""

from __future__ import annotations

from collections import deque

from hwprofiles import HardwareProfile, LinkSpec
from hwprofiles.schema import efficiency_of
from kvtier.contracts.units import gbps


def achievable_bps(profile: HardwareProfile, link: LinkSpec) -> float:
    """Bytes/s ``link`` sustains: datasheet ``gbps`` x the efficiency of its kind."""
    return gbps(link.gbps) * efficiency_of(profile.efficiency, link.kind)


def path_links(profile: HardwareProfile, src: str, dst: str) -> list[LinkSpec]:
    """The links a transfer ``src -> dst`` crosses, in order (see the module docstring)."""
    adj: dict[str, list[tuple[float, str, LinkSpec]]] = {n: [] for n in profile.node_names}
    for ln in profile.topology.links:
        a, b = ln.between
        cap = achievable_bps(profile, ln)
        adj[a].append((-cap, b, ln))
        adj[b].append((-cap, a, ln))
    for node in (src, dst):
        if node not in adj:
            raise ValueError(f"unknown node {node!r} in profile {profile.name}")
    if src == dst:
        raise ValueError(f"no path from {src!r} to itself")
    endpoints = set(profile.gpu_names + profile.ssd_names + profile.dram_names)
    prev: dict[str, tuple[str, LinkSpec | None]] = {src: ("", None)}
    queue = deque([src])
    while queue and dst not in prev:
        node = queue.popleft()
        if node != src and node in endpoints:
            continue
        for _, nxt, ln in sorted(adj[node], key=lambda t: (t[0], t[1])):
            if nxt not in prev:
                prev[nxt] = (node, ln)
                queue.append(nxt)
    if dst not in prev:
        raise ValueError(f"no path from {src!r} to {dst!r} in profile {profile.name}")
    links: list[LinkSpec] = []
    node = dst
    while node != src:
        node, ln = prev[node]
        links.append(ln)  # type: ignore[arg-type]
    return links[::-1]


def path_bps(profile: HardwareProfile, src: str, dst: str) -> float:
    """Rate of a lone transfer ``src -> dst``: its narrowest link's achievable rate."""
    return min(achievable_bps(profile, ln) for ln in path_links(profile, src, dst))


def reload_seconds(profile: HardwareProfile, nbytes: float, src: str, dst: str) -> float:
    """Seconds to move ``nbytes`` alone from ``src`` to ``dst`` (e.g. a prefix's KV)."""
    return nbytes / path_bps(profile, src, dst)

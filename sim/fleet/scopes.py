"""Who owns an offload tier, which instances reach it, and over which links.

A routed run's instances (:mod:`sim.scenarios.serving_routed`) get their
design's offload tiers (host DRAM, SSDs: :func:`sim.serving.build.make_tiers`)
at one of four scopes, the workload's ``tier_scope``:

* ``instance`` (the default): each instance its own tiers on **its node's**
  devices (:func:`sim.serving.build.design_devices` of the node its GPU sits
  in), the design's capacities each; loads and stores cross only that node's
  PCIe and DRAM links.  A node's k-th instance takes the design's devices from
  its k-th share of the node's on (:func:`sim.serving.build.design_devices`'
  ``slot``): four LMCache instances (one SSD each) on a machine of eight SSDs
  use ssd0..ssd3, not all ssd0; the tiers together must fit the devices
  (:func:`check_capacity`).
* ``node``: one store per node, **the same tier objects** in every instance on
  it, holding the design's capacities once per instance there (so the node's
  bytes are those of ``instance`` scope, pooled): a block instance A stored is
  a hit for instance B on the same node.  This is LMCache's multi-process mode
  (vLLM ``examples/disaggregated/lmcache/README.md``: "LMCache runs as a
  standalone server (lmcache server) that owns the KV cache storage; one or
  more vLLM instances connect to it ... for sharing KV cache across
  instances"), with one server per node (OME's node-local LMCache pool: "one
  LMCache server per selected node").
* ``fleet``: one store over the design's devices of **every** node, shared by
  every instance, holding the design's capacities once per instance: Mooncake
  Store (Qin et al., FAST'25, seed 002 §6; Mooncake's ``doc/en/architecture.md``:
  a "multi-level caching pool on high-speed interconnected DRAM/SSD
  resources", fetched by (GPUDirect) RDMA, "striping and parallel I/O
  transfer for larger objects to utilize the aggregated bandwidth of
  multiple network cards"), pooled from the serving nodes' spare DRAM.  A
  block's layers are striped over the pool's devices by Algorithm 1's
  bandwidth ratios (:mod:`sim.serving.tiers.placement`), so on two identical
  nodes half of every block is remote: its load is a copy from the other
  node's DRAM to the GPU through both nodes' NICs and the leaf
  (:meth:`sim.hw.machine.Machine.route`), a flow of the one network, the
  ports' latency waited first.
* ``storage``: the ``fleet`` store, the same capacity, on the design's devices
  of the fleet's **storage nodes** instead (``fleet.storage`` in the fleet file:
  :mod:`hwprofiles.fleet`), none of it on a serving node: Mooncake Store's pool
  on dedicated memory/SSD servers, or 3FS's SSD pool ("KVCache for Inference
  ... a cost-effective alternative to DRAM-based caching", deepseek-ai/3FS
  README) on its storage nodes.  Every load and store crosses the GPU's NIC,
  the fabric and the storage node's NIC and devices.  An explicit scope, not
  ``fleet`` turned into it when a fleet has storage nodes: the scope says where
  the store sits, the profile only what hardware exists, so one fleet runs both
  pools on one trace (``sim/scenarios/fleet-storage.yaml``), and the workload
  that names ``fleet`` keeps its meaning on every profile.  Its hits count at
  the ``fleet_pool`` level (a fleet-wide pool; the row's ``tier_scope`` says
  where it sat).

The tiers keep their own rules (LRU, pins, evictions: :mod:`sim.serving.tiers`);
sharing them is only who holds the object.  Eviction is the store's (Mooncake
Store leaves caching policy "to upper-layer frameworks"; the design's LRU here).
Each level's hits are the hits of its scope's tiers: :func:`level_hits`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hwprofiles import HardwareProfile
from sim.models import ModelCard
from sim.registry import Unsupported
from sim.serving.build import GIB, make_tiers
from sim.serving.designs import DesignParams
from sim.serving.tiers.blocks import OffloadTier

SCOPES = ("instance", "node", "fleet", "storage")
# the level a scope's tier hits count at (beside ``gpu``)
LEVELS = {"instance": "node_local", "node": "node_shared", "fleet": "fleet_pool",
          "storage": "fleet_pool"}  # fmt: skip
OFFLOAD = ("cpu", "ssd", "pool")  # the offload tiers' hit columns (sim.serving.metrics.TIERS)


class ScopeError(ValueError):
    """Tiers that cannot be built at a scope (one line naming the key)."""


TierSet = tuple[list[OffloadTier], dict[str, str]]  # (tiers, each SSD's bounce DRAM module)


def node_of(profile: HardwareProfile, gpu: str) -> int:
    """The fleet node of ``gpu`` (0 on one machine)."""
    return profile.fleet.node_of(gpu) if profile.fleet is not None else 0


def scoped_tiers(
    scope: str,
    design: DesignParams,
    profile: HardwareProfile,
    card: ModelCard,
    block_tokens: int,
    gpus: Sequence[str],
) -> list[TierSet]:
    """Each instance's (on ``gpus``) tiers at ``scope`` (module docstring).  Raises ScopeError
    when the tiers would hold more than a device has (:func:`check_capacity`)."""
    if scope not in SCOPES:
        raise ScopeError(f"tier_scope: unknown scope {scope!r} (one of: {', '.join(SCOPES)})")
    nodes = [node_of(profile, g) for g in gpus]
    multi = profile.fleet is not None and profile.fleet.nodes > 1
    if scope == "instance":
        # the k-th instance of a node takes the node's devices from its k-th share on
        # (make_tiers's slot): each its own SSD where the node has enough
        slots = [nodes[:i].count(n) for i, n in enumerate(nodes)]
        where = (lambda n: [n]) if multi else (lambda n: None)  # noqa: E731
        sets = [make_tiers(design, profile, card, block_tokens, where(n), slot=k)
                for n, k in zip(nodes, slots, strict=True)]  # fmt: skip
        check_capacity(profile, sets, scope)
        return list(sets)
    elif scope == "node":
        by_node = {n: make_tiers(design, profile, card, block_tokens, [n], nodes.count(n))
                   for n in sorted(set(nodes))}  # fmt: skip
        sets = [by_node[n] for n in nodes]
    elif scope == "fleet":
        everyone = range(profile.fleet.nodes if profile.fleet is not None else 1)
        fleet = make_tiers(design, profile, card, block_tokens, list(everyone), len(gpus))
        sets = [fleet] * len(gpus)
    else:
        hosts = profile.fleet.storage_hosts() if profile.fleet is not None else []
        if not hosts:
            raise ScopeError(f"tier_scope: storage: profile {profile.name} has no storage "
                             "nodes (a fleet file's fleet.storage block)")  # fmt: skip
        try:
            pool = make_tiers(design, profile, card, block_tokens, hosts, len(gpus))
        except Unsupported as e:
            raise ScopeError(f"tier_scope: storage: the storage nodes: {e}") from None
        sets = [pool] * len(gpus)
    check_capacity(profile, sets, scope)
    return list(sets)


def check_capacity(profile: HardwareProfile, sets: Sequence[TierSet], scope: str) -> None:
    """ScopeError (one line) when the tiers of ``sets`` (each distinct object
    once) hold more bytes on a DRAM module or SSD than it has."""
    held: dict[str, float] = {}
    seen: set[int] = set()
    for tiers, _ in sets:
        for t in tiers:
            if id(t) in seen:
                continue
            seen.add(id(t))
            for dev, cap in zip(t.devices, t.capacity, strict=True):
                held[dev] = held.get(dev, 0.0) + cap
    have = {m.name: m.capacity_gib * GIB for m in profile.dram}
    have.update({s: profile.ssd(s).capacity_gib * GIB for s in profile.ssd_names})
    for dev, nbytes in held.items():
        if dev in have and nbytes > have[dev]:
            raise ScopeError(
                f"tier_scope: {scope}: the offload tiers hold {nbytes / GIB:,.1f} GiB on {dev}, "
                f"which has {have[dev] / GIB:,.1f} GiB (lower design_params cpu_gib / ssd_gib)"
            )


def level_hits(scope: str, hits: dict[str, float]) -> dict[str, float]:
    """Hits per level from hits per tier (``gpu``, ``cpu``, ``ssd``, ``pool``: any
    one quantity, blocks or a rate): ``gpu`` and the scope's level holding the
    offload tiers' sum, the other two levels 0 (a run has one scope)."""
    out = {"gpu": hits.get("gpu", 0.0)}
    for level in dict.fromkeys(LEVELS.values()):
        out[level] = sum(hits.get(t, 0.0) for t in OFFLOAD) if LEVELS[scope] == level else 0.0
    return out

"""Build a serving engine from a design, a profile and a model.

Offload tiers: a design with ``pool`` puts its DRAM modules and SSDs in one
tier (seed 004's unified pool); otherwise a ``cpu`` tier (its DRAM modules)
sits above an ``ssd`` tier (its SSDs).  Within a tier, devices share the
offloaded KV by Algorithm 1's bandwidth ratios (a tier of one device holds
it all); capacities split evenly over the tier's devices of each kind.
SSD transfers without GPUDirect bounce through host memory: SSD ``i`` uses
the design's DRAM module ``i mod n`` (dram0 if the design uses none).
"""

from __future__ import annotations

from collections.abc import Sequence

from hwprofiles import HardwareProfile
from sim.hw.machine import Machine
from sim.models import ModelCard
from sim.registry import Unsupported
from sim.serving.designs import DesignParams
from sim.serving.execute.engine import Engine, EngineConfig
from sim.serving.execute.tp import TensorParallel
from sim.serving.requests import Request
from sim.serving.swift.links import path_bps
from sim.serving.tiers.blocks import OffloadTier
from sim.serving.tiers.placement import device_bandwidth, placement_ratios

__all__ = ["build_engine", "make_tiers", "peer_tier"]

GIB = 2**30


def node_devices(profile: HardwareProfile, node: int | None) -> tuple[list[str], list[str]]:
    """(DRAM modules, SSDs) of fleet host ``node``: a compute node's
    ``n{node}.dram*`` and ``ssd{node*S+j}``, or for a host after the compute nodes
    a storage node's ``s{s}.dram*`` and SSDs (:mod:`hwprofiles.fleet`,
    :meth:`~hwprofiles.schema.FleetSpec.host_ssds`); the profile's all when None."""
    drams, ssds = list(profile.dram_names), list(profile.ssd_names)
    if node is None or profile.fleet is None:
        return drams, ssds
    prefix = profile.fleet.host_prefix(node)
    return [m for m in drams if m.startswith(prefix)], [
        ssds[k] for k in profile.fleet.host_ssds(node)
    ]


def design_devices(
    d: DesignParams, profile: HardwareProfile, node: int | None = None, slot: int = 0
) -> tuple[list[str], list[str]]:
    """(DRAM modules, SSDs) the design's tiers use: ``dram_modules`` and ``ssds`` of
    fleet node ``node`` (:func:`node_devices`; of the profile when None), the first
    ones for ``slot`` 0.  ``slot`` k (the k-th instance with tiers of its own on the
    node) takes the next ones round the node's list, ``k x want`` on: instances on one
    machine each get their own device where there are enough, as an operator gives
    each vLLM instance its own LMCache ``local_disk`` path, rather than all of them
    the first (all of them share every device of a design that uses all, ``0``)."""
    drams, ssds = node_devices(profile, node)
    for what, want, have, gib in (
        ("DRAM modules", d.dram_modules, drams, d.cpu_gib),
        ("SSDs", d.ssds, ssds, d.ssd_gib),
    ):
        if gib > 0 and want > len(have):  # a tier of no capacity uses no device
            raise Unsupported(f"needs {want} {what}, profile {profile.name} has {len(have)}")
    drams = _turn(drams, d.dram_modules, slot) if d.cpu_gib > 0 else []
    ssds = _turn(ssds, d.ssds, slot) if d.ssd_gib > 0 else []
    if d.ssd_gib > 0 and not ssds:
        raise Unsupported(f"profile {profile.name} has no SSDs")
    return drams, ssds


def _turn(devices: list[str], want: int, slot: int) -> list[str]:
    """``want`` of ``devices`` (0: all) from the ``slot * want``-th on, round the list."""
    if not want or want >= len(devices):
        return list(devices)
    first = (slot * want) % len(devices)
    return [devices[(first + i) % len(devices)] for i in range(want)]


def make_tiers(
    d: DesignParams,
    profile: HardwareProfile,
    card: ModelCard,
    block_tokens: int,
    nodes: Sequence[int] | None = None,
    share: int = 1,
    slot: int = 0,
) -> tuple[list[OffloadTier], dict[str, str]]:
    """The design's offload tiers and each SSD's bounce-buffer DRAM module.
    ``nodes``: the fleet nodes whose devices the tiers use (each node's own, as
    :func:`design_devices` picks them; SSDs bounce through their own node's
    DRAM); None: the profile's.  ``share``: the tiers hold the design's
    capacities ``share`` times over (a store that ``share`` instances share,
    :mod:`sim.fleet.scopes`).  ``slot``: which of a node's instances with tiers of
    their own these are (:func:`design_devices`)."""
    if nodes is not None:
        return _node_tiers(d, profile, card, block_tokens, nodes, share, slot)
    drams, ssds = design_devices(d, profile, slot=slot)
    layer_bytes = d.offload_factor(block_tokens) * block_tokens * card.kv_bytes_per_token_layer
    cap = {m: d.cpu_gib * GIB / len(drams) for m in drams}
    cap.update({s: d.ssd_gib * GIB / len(ssds) for s in ssds})
    groups = [("pool", drams + ssds)] if d.pool else [("cpu", drams), ("ssd", ssds)]
    tiers = []
    for name, devices in groups:
        if not devices:
            continue
        ratios = placement_ratios([device_bandwidth(profile, x) for x in devices])
        caps = [cap[x] for x in devices]
        tiers.append(OffloadTier(name, devices, ratios, caps, card.layers, layer_bytes))
    bounce_from = drams or list(profile.dram_names[:1])
    bounce = {
        s: bounce_from[i % len(bounce_from)] for i, s in enumerate(profile.ssd_names) if bounce_from
    }
    return tiers, bounce


def _node_tiers(
    d: DesignParams, profile: HardwareProfile, card: ModelCard, block_tokens: int,
    nodes: Sequence[int], share: int, slot: int = 0,
) -> tuple[list[OffloadTier], dict[str, str]]:  # fmt: skip
    """:func:`make_tiers` over the devices of fleet ``nodes``: each node's
    picks, the capacities ``share`` times the design's split evenly over all."""
    drams: list[str] = []
    ssds: list[str] = []
    bounce: dict[str, str] = {}
    for n in nodes:
        dn, sn = design_devices(d, profile, n, slot)
        drams += dn
        ssds += sn
        bounce_from = dn or node_devices(profile, n)[0][:1]
        if bounce_from:
            node_ssds = node_devices(profile, n)[1]
            bounce.update({s: bounce_from[i % len(bounce_from)] for i, s in enumerate(node_ssds)})
    layer_bytes = d.offload_factor(block_tokens) * block_tokens * card.kv_bytes_per_token_layer
    cap = {m: share * d.cpu_gib * GIB / len(drams) for m in drams}
    cap.update({s: share * d.ssd_gib * GIB / len(ssds) for s in ssds})
    groups = [("pool", drams + ssds)] if d.pool else [("cpu", drams), ("ssd", ssds)]
    tiers = []
    for name, devices in groups:
        if devices:
            ratios = placement_ratios([device_bandwidth(profile, x) for x in devices])
            tiers.append(OffloadTier(name, devices, ratios, [cap[x] for x in devices],
                                     card.layers, layer_bytes))  # fmt: skip
    return tiers, bounce


def gpu_blocks(kv_bytes: float, card: ModelCard, block_tokens: int) -> int:
    """GPU KV cache blocks in ``kv_bytes``."""
    return int(kv_bytes // (block_tokens * card.kv_bytes_per_token))


def default_gpu_kv_bytes(profile: HardwareProfile, card: ModelCard, share: float = 0.9) -> float:
    """vLLM's default: ``share`` of HBM minus the weights (activations ignored)."""
    return share * profile.gpu.hbm_capacity_gib * GIB - card.weight_bytes


def build_engine(
    profile: HardwareProfile,
    card: ModelCard,
    design: DesignParams,
    cfg: EngineConfig,
    requests: list[Request],
    preload: list[Request] = (),  # type: ignore[assignment]
    machine: Machine | None = None,
    above: list[OffloadTier] = (),  # type: ignore[assignment]
    tp: TensorParallel | None = None,
    own: tuple[list[OffloadTier], dict[str, str]] | None = None,
) -> Engine:
    """An engine on ``machine`` (a new one of ``profile`` if None: one instance
    alone); ``above`` are tiers placed above the design's own (a master's
    borrowed blocks on peer GPUs, :func:`peer_tier`); ``tp``: the engine is rank 0
    of tensor parallelism (:mod:`sim.serving.execute.tp`: ``profile`` and
    ``card`` are the rank's); ``own``: the design's tiers and bounce map as
    built for it (shared with other engines, :mod:`sim.fleet.scopes`) instead
    of new ones (:func:`make_tiers`)."""
    tiers, bounce = own if own is not None else make_tiers(design, profile, card, cfg.block_tokens)
    tiers = [*above, *tiers]
    uses_ssd = any(t.name != "cpu" and set(t.devices) & set(profile.ssd_names) for t in tiers)
    if uses_ssd and not bounce and not (design.gds and profile.software.gpudirect):
        raise Unsupported(f"profile {profile.name} has no host memory for bounce buffers")
    if cfg.gpu_blocks < 1:
        raise Unsupported("the GPU has no room for KV blocks")
    machine = machine if machine is not None else Machine(profile)
    return Engine(machine, card, design, tiers, bounce, cfg, requests, list(preload), tp)


def peer_tier(
    profile: HardwareProfile,
    card: ModelCard,
    design: DesignParams,
    block_tokens: int,
    gpu: str,
    lent_bytes: dict[str, float],
) -> OffloadTier:
    """The ``peer`` tier of a master on ``gpu`` (seed 002): KV blocks borrowed on
    the worker GPUs of ``lent_bytes`` (GPU -> bytes lent).  Its devices are those
    GPUs, so its loads and stores are ``copy`` ops over the profile's route
    between the two GPUs (NVLink where the profile has it); a block's layers
    spread over the workers by the bandwidth of each one's path to ``gpu``."""
    workers = [w for w, b in lent_bytes.items() if b > 0]
    if not workers:
        raise Unsupported("no worker lends KV memory to the master")
    if gpu in workers:
        raise Unsupported(f"the master's GPU {gpu} cannot lend to itself")
    ratios = placement_ratios([path_bps(profile, w, gpu) for w in workers])
    layer_bytes = design.offload_factor(block_tokens) * block_tokens * card.kv_bytes_per_token_layer
    caps = [lent_bytes[w] for w in workers]
    return OffloadTier("peer", workers, ratios, caps, card.layers, layer_bytes)

"""Unified KV Pooling's placement (seed 004 §IV-A2, §IV-A3, Algorithm 1).

Pool organizer, Eq. (1): device ``i`` of measured bandwidth ``b_i`` gets the
placement ratio ``p_i = b_i / sum_j b_j``.

Bandwidth-aware allocator, Eq. (2) and Algorithm 1: an offload set of ``K``
KV items is split into per-device sets of ``floor(p_i * K) + r_i`` items.
The remainder ``K - sum floor(p_i * K)`` (always fewer than ``N`` items) goes
one item each to the devices with the largest ratios.  Algorithm 1 line 10
says "select pool device u_i with the largest p_i" for every remaining
item; read literally, every leftover would land on one device, while the
prose says the allocator "distributes the remainder to the devices with
larger p_i".  We follow the prose: devices in descending ``p_i`` (ties by
device index) get one leftover each.  Then the items, "enumerated in
layerwise order", fill the devices' sets in device order (lines 13-16: each
item goes to the first device whose set is not yet full).

Our KV items are (layer, block) pairs of one engine iteration's offload set,
so with layer-major enumeration each device receives a contiguous range of
layers of every block (possibly split at a boundary layer): :func:`layer_runs`
turns the per-device counts into those ranges.

Measured bandwidth ``b_i`` (the seed measures it; we take it from the
profile): a DRAM module's ``gbps``; an SSD's ``read_gbps`` (retrieval is
what the pool accelerates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate

from hwprofiles import HardwareProfile

Runs = tuple[tuple[int, int, int], ...]  # (device index, first layer, end layer)


def placement_ratios(bandwidths: Sequence[float]) -> list[float]:
    """Eq. (1): ``p_i = b_i / sum_j b_j``."""
    if not bandwidths or any(not b > 0 for b in bandwidths):
        raise ValueError(f"bandwidths must be positive, got {list(bandwidths)}")
    total = math.fsum(bandwidths)
    return [b / total for b in bandwidths]


def target_counts(ratios: Sequence[float], n_items: int) -> list[int]:
    """Eq. (2), Algorithm 1 lines 4-12: items per device, summing to ``n_items``."""
    counts = [math.floor(p * n_items) for p in ratios]
    remaining = n_items - sum(counts)
    order = sorted(range(len(ratios)), key=lambda i: (-ratios[i], i))
    for i in order[:remaining]:
        counts[i] += 1
    return counts


def assign(ratios: Sequence[float], n_items: int) -> list[int]:
    """Algorithm 1 lines 13-16: the device of each item, in enumeration order."""
    out: list[int] = []
    for dev, count in enumerate(target_counts(ratios, n_items)):
        out.extend([dev] * count)
    return out


def layer_runs(ratios: Sequence[float], n_blocks: int, layers: int) -> list[Runs]:
    """Per block of an offload set: ``(device, first layer, end layer)`` runs.

    The set's ``layers * n_blocks`` items are enumerated layer-major
    ((layer 0, block 0), (layer 0, block 1), ...) and assigned by
    :func:`assign`; block ``b`` then holds layer ``l`` on the device of item
    ``l * n_blocks + b``.  Device ``d`` gets items ``[S_d, S_{d+1})`` (``S``:
    the running sum of :func:`target_counts`, ``0 <= S_d <= layers *
    n_blocks``), so block ``b``'s first layer there is ``ceil((S_d - b) /
    n_blocks)``: with ``S_d = q_d * n_blocks + r_d`` (``0 <= r_d <
    n_blocks``), ``q_d + 1`` for the blocks ``b < r_d`` and ``q_d`` for the
    others, within ``[0, layers]``.  So every device's first layer changes
    at most once along the set, at block ``r_d``: the set is cut at those
    blocks into stretches laid out alike, and the blocks of a stretch share
    one runs tuple.
    """
    if len(ratios) == 1:
        return [((0, 0, layers),)] * n_blocks
    if n_blocks == 0:
        return []
    qr = [
        divmod(s, n_blocks) for s in accumulate(target_counts(ratios, layers * n_blocks), initial=0)
    ]
    bounds = sorted({0, n_blocks, *[r for _q, r in qr]})
    out: list[Runs] = []
    for lo, hi in zip(bounds, bounds[1:]):  # noqa: B905
        row = [q + (lo < r) for q, r in qr]  # each device's first layer (and the end)
        runs = tuple([(d, a, b) for d, (a, b) in enumerate(zip(row, row[1:])) if b > a])  # noqa: B905
        out += [runs] * (hi - lo)
    return out


def device_bandwidth(profile: HardwareProfile, device: str) -> float:
    """The bandwidth the pool organizer measures for ``device``, in GB/s."""
    if device in profile.ssd_names:
        return profile.ssd(device).read_gbps
    return profile.dram_module(device).gbps

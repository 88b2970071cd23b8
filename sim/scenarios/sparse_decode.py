"""Sparse-attention decoding that fetches a fixed-size working set every step.

Every decode step, every layer fetches the KV entries that sparse attention
selects (``sparsity`` x context x batch entries) from the tier the KV lives
in, and runs the layer.  Tiers:

* ``ssd``: the entries are striped over the SSDs; each layer reads its share
  from every SSD (one I/O per entry) into host memory and copies it to the
  GPU, or with GPUDirect reads straight into GPU memory;
* ``dram``: the entries are in host memory; one DRAM -> GPU copy per layer;
* ``peer``: the entries are in a peer GPU's HBM; one NVLink copy per layer.

The selected set has the same size every step: this is the placement-agnostic
baseline smarter designs are compared with, and the simulator benchmark.

Geometry (SSD tier, a regular pattern per op so the 1M-op benchmark plan stays
columns of numbers, no extents): each SSD holds every layer's share of the KV
in a region of its own, layer l's at ``l x R`` with ``R`` = ``region_entries``
x entry bytes rounded up to 4 KiB (``region_entries``: the entries of one layer
on one SSD, context x batch / SSDs in :func:`plan_for`).  The c entries an SSD
serves for (step s, layer l) are spread evenly over that region: one I/O per
entry, ``stride = (region_entries // c)`` entries apart, starting ``s mod
(region_entries // c)`` entries in, so successive steps read different
entries, as sparse attention does, and every I/O stays in its layer's region.
An entry split into several I/Os (``ios_per_entry`` > 1) is read contiguously
from the region's start.  Which entries a real selection picks is the designs'
business (``sim.scenarios.swarm``); this workload only needs their number,
size and spread.

Pipeline (per step s, layer l = group g; double-buffered):

* the fetch ops of g wait for the fetch ops of g-1 (one fetch stream at a
  time) and for the compute of g-2 (its buffer must be free);
* the bounce copy of g (SSD tier without GPUDirect) waits for g's reads;
* the compute of g waits for g's data on the GPU and for the compute of g-1.

Compute: a layer's decode at the selected entries (``decode_layer_cost`` at
``sparsity``), on the roofline or, with ``gpu_time`` measured/auto, as a share
of the measured decode step of ``batch`` sequences at the selected length
(:func:`sim.hw.measured.decode_layer_seconds`, the plan's ``gpu_s``).

So fetching layer l+1 overlaps computing layer l, as offloading systems do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from kvtier.contracts.plan import BLOCK, plan_from_columns
from sim.config import SparseDecodeParams
from sim.hw.measured import GpuTime, decode_layer_seconds, resolve
from sim.models import decode_layer_cost, get_model
from sim.registry import Unsupported

TIERS = ("ssd", "dram", "peer")


@dataclass(frozen=True)
class SparseDecodeShape:
    steps: int
    layers: int
    ssds: tuple[str, ...]
    gpu: str
    dram: str
    entries_per_layer: int  # KV entries fetched per layer per step (all sequences)
    entry_bytes: int  # bytes of one entry (K and V of one token, one layer)
    ios_per_entry: int  # I/Os per entry (1 when an entry is one contiguous block)
    flops_per_layer: float
    hbm_bytes_per_layer: float
    io_path: str = "io_uring"
    queue_depth: int = 0
    gds: bool = False  # read straight into GPU memory, no DRAM bounce
    tier: str = "ssd"  # where the KV lives: ssd | dram | peer
    peer: str = ""  # the peer GPU holding the KV (tier 'peer')
    region_entries: int = 0  # entries of one layer on one SSD (0: just those fetched)
    gpu_s_per_layer: float = 0.0  # a layer's measured seconds (0: its roofline)
    gpu_source: str = ""  # what times the compute (sim.hw.measured.resolve), for run.json


def split_even(total: int, parts: int) -> np.ndarray:
    """``total`` split into ``parts`` integers differing by at most one."""
    base, extra = divmod(total, parts)
    return np.array([base + (k < extra) for k in range(parts)], dtype=np.int64)


def entry_counts(
    shape: SparseDecodeShape, balance: str, rng: np.random.Generator | None
) -> np.ndarray:
    """Entries each SSD serves, per (step, layer): shape (steps * layers, ssds).

    ``even``: the exact split.  ``random``: the selected entries were striped
    over the SSDs independently of what is selected together, so a step's
    entries fall on the SSDs multinomially and the busiest SSD sets the pace.
    """
    groups, d = shape.steps * shape.layers, len(shape.ssds)
    if balance == "even":
        return np.tile(split_even(shape.entries_per_layer, d), (groups, 1))
    if rng is None:
        raise ValueError("balance='random' needs a random generator")
    return rng.multinomial(shape.entries_per_layer, np.full(d, 1.0 / d), size=groups)


def _group_layout(shape: SparseDecodeShape) -> tuple[int, int, bool]:
    """(fetch ops per group, ops per group, has a bounce copy)."""
    n_fetch = len(shape.ssds) if shape.tier == "ssd" else 1
    bounce = shape.tier == "ssd" and not shape.gds
    return n_fetch, n_fetch + bounce + 1, bounce


def build_plan(shape: SparseDecodeShape, counts: np.ndarray | None = None) -> pa.Table:
    """The plan, built with numpy; ``counts`` as from :func:`entry_counts`
    (default: the even split).  SSDs with no entry in a group get no op."""
    S, L, D = shape.steps, shape.layers, len(shape.ssds)
    if shape.tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {shape.tier!r}")
    if min(S, L, shape.entries_per_layer) <= 0 or (shape.tier == "ssd" and D == 0):
        raise ValueError("steps, layers, ssds and entries must be positive")
    G = S * L
    if shape.tier != "ssd":
        counts = np.full((G, 1), shape.entries_per_layer, dtype=np.int64)
    elif counts is None:
        counts = entry_counts(shape, "even", None)
    counts = np.asarray(counts, dtype=np.int64)
    n_fetch, per, bounce = _group_layout(shape)
    if counts.shape != (G, n_fetch):
        raise ValueError(f"counts must have shape {(G, n_fetch)}, got {counts.shape}")
    n = G * per
    g = np.arange(G, dtype=np.int64)  # group index = step * L + layer
    fetch = g[:, None] * per + np.arange(n_fetch)[None, :]
    copy = g * per + n_fetch  # the bounce copy (only when ``bounce``)
    comp = g * per + per - 1
    f = fetch.ravel()
    layer_bytes = counts.sum(axis=1) * shape.entry_bytes

    kind = np.empty(n, dtype=object)
    src = np.full(n, "", dtype=object)
    dst = np.full(n, shape.gpu, dtype=object)
    nbytes = np.zeros(n, dtype=np.int64)
    n_ios = np.zeros(n, dtype=np.int64)
    io_path = np.full(n, "none", dtype=object)
    tag = np.full(n, "attn", dtype=object)
    nbytes[f] = counts.ravel() * shape.entry_bytes
    tag[f] = "kv_fetch"
    if shape.tier == "ssd":
        kind[f] = "read"
        src[f] = np.tile(np.array(shape.ssds, dtype=object), G)
        dst[f] = shape.gpu if shape.gds else shape.dram
        n_ios[f] = counts.ravel() * shape.ios_per_entry
        io_path[f] = "gds" if shape.gds else shape.io_path
    else:
        kind[f] = "copy"
        src[f] = shape.dram if shape.tier == "dram" else shape.peer
        n_ios[f] = 1
    if bounce:
        kind[copy] = "copy"
        src[copy] = shape.dram
        nbytes[copy] = layer_bytes
        n_ios[copy] = 1
        tag[copy] = "h2d"
    offset = np.zeros(n, dtype=np.int64)
    stride = np.zeros(n, dtype=np.int64)
    if shape.tier == "ssd":
        offset[f], stride[f] = _geometry(shape, counts)
    kind[comp] = "compute"
    flops = np.zeros(n)
    hbm = np.zeros(n)
    flops[comp] = shape.flops_per_layer
    hbm[comp] = shape.hbm_bytes_per_layer
    gpu_s = np.zeros(n)
    gpu_s[comp] = shape.gpu_s_per_layer

    op, dep = _dependency_pairs(fetch, copy if bounce else None, comp)
    keep = (kind != "read") | (nbytes > 0)
    ok = keep[op] & keep[dep]
    new_id = np.cumsum(keep) - 1
    op, dep = new_id[op[ok]], new_id[dep[ok]]
    order = np.lexsort((dep, op))
    op, dep = op[order], dep[order]
    n_kept = int(keep.sum())
    offsets = np.concatenate([[0], np.cumsum(np.bincount(op, minlength=n_kept))])
    step = np.repeat(g // L, per).astype(np.int32)
    layer = np.repeat(g % L, per).astype(np.int32)
    cols = {
        "step": step,
        "layer": layer,
        "kind": kind,
        "src": src,
        "dst": dst,
        "bytes": nbytes,
        "n_ios": n_ios,
        "queue_depth": np.full(n, shape.queue_depth),
        "io_path": io_path,
        "flops": flops,
        "hbm_bytes": hbm,
        "gpu_s": gpu_s,
        "offset": offset,
        "stride": stride,
        "tag": tag,
    }
    return plan_from_columns({k: v[keep] for k, v in cols.items()}, offsets, dep)


def _geometry(shape: SparseDecodeShape, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offset, stride) of every fetch op, row-major like ``counts`` (module docstring)."""
    G = counts.shape[0]
    eb = shape.entry_bytes
    region = max(shape.region_entries, int(counts.max()))
    region_bytes = -(-region * eb // BLOCK) * BLOCK
    layer = (np.arange(G, dtype=np.int64) % shape.layers)[:, None]
    step = (np.arange(G, dtype=np.int64) // shape.layers)[:, None]
    spacing = region // np.maximum(counts, 1)
    if shape.ios_per_entry != 1:
        spacing = np.ones_like(counts)
    offset = layer * region_bytes + (step % spacing) * eb
    stride = np.where(spacing > 1, spacing * eb, 0)
    return offset.ravel(), stride.ravel()


def _dependency_pairs(
    fetch: np.ndarray, copy: np.ndarray | None, comp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(op, depends-on) pairs of the pipeline described in the module docstring."""
    nf = fetch.shape[1]
    ops: list[np.ndarray] = []
    deps: list[np.ndarray] = []
    # fetch of g after every fetch of g-1
    ops.append(np.repeat(fetch[1:], nf, axis=1).ravel())
    deps.append(np.tile(fetch[:-1], (1, nf)).ravel())
    # fetch of g after compute of g-2 (buffer reuse)
    ops.append(fetch[2:].ravel())
    deps.append(np.repeat(comp[:-2], nf))
    ready = fetch
    if copy is not None:  # bounce copy after all reads of its group
        ops.append(np.repeat(copy, nf))
        deps.append(fetch.ravel())
        ready = copy[:, None]
    # compute after its data and after the previous layer's compute
    ops.append(np.repeat(comp, ready.shape[1]))
    deps.append(ready.ravel())
    ops.append(comp[1:])
    deps.append(comp[:-1])
    return np.concatenate(ops), np.concatenate(deps)


def plan_for(
    params: SparseDecodeParams, profile: HardwareProfile, seed: int
) -> tuple[pa.Table, SparseDecodeShape]:
    """The plan of a scenario's sparse-decode workload on ``profile``.

    Raises :class:`Unsupported` when the profile lacks what the variant needs
    (SSDs, enough SSDs, GPUDirect, a peer GPU) and :class:`ValueError` for
    impossible parameters.
    """
    card = get_model(params.model)
    ssds: tuple[str, ...] = ()
    if params.tier == "ssd":
        if not profile.ssd_names:
            raise Unsupported(f"profile {profile.name} has no SSDs")
        n_ssd = params.ssds or len(profile.ssd_names)
        if n_ssd > len(profile.ssd_names):
            raise Unsupported(
                f"ssds: needs {n_ssd}, profile {profile.name} has {len(profile.ssd_names)} SSDs"
            )
        if params.gds and not profile.software.gpudirect:
            raise Unsupported(f"gds: profile {profile.name} has no GPUDirect Storage")
        ssds = profile.ssd_names[:n_ssd]
    if params.tier == "peer" and profile.gpu.count < 2:
        raise Unsupported(f"profile {profile.name} has no peer GPU")
    layers = params.layers or card.layers
    selected = max(1, round(params.context_tokens * params.sparsity))
    cost = decode_layer_cost(card, params.batch, params.context_tokens, params.sparsity)
    step, source = resolve(profile, card, GpuTime.of(params))
    gpu_s = decode_layer_seconds(step, [selected] * params.batch, cost.flops, cost.hbm_bytes,
                                 card.layers)  # fmt: skip
    shape = SparseDecodeShape(
        steps=params.steps,
        layers=layers,
        ssds=ssds,
        gpu=profile.gpu_names[0],
        dram=profile.dram_names[0],
        entries_per_layer=selected * params.batch,
        entry_bytes=card.kv_bytes_per_token_layer,
        ios_per_entry=1,
        flops_per_layer=cost.flops,
        hbm_bytes_per_layer=cost.hbm_bytes,
        io_path=params.io_path,
        queue_depth=params.queue_depth,
        gds=params.gds,
        tier=params.tier,
        peer=profile.gpu_names[1] if profile.gpu.count > 1 else "",
        region_entries=-(-params.context_tokens * params.batch // max(len(ssds), 1)),
        gpu_s_per_layer=gpu_s,
        gpu_source=source,
    )
    rng = np.random.default_rng(seed)
    counts = entry_counts(shape, params.balance, rng) if params.tier == "ssd" else None
    return build_plan(shape, counts), shape

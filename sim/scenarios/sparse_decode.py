"""Sparse-attention decoding that reads a fixed working set from SSDs.

Every decode step, every layer fetches the KV entries that sparse attention
selects (``sparsity`` x context x batch entries) from the SSDs into host
memory, copies them to the GPU and runs the layer.  The selected set is the
same size every step and is spread evenly over the SSDs: this is the
placement-agnostic baseline every smarter design is compared with, and the
shape of the simulator benchmark.

Pipeline (per step s, layer l; double-buffered):

* ``read[s,l,k]`` from SSD k into DRAM waits for the reads of the previous
  layer (one fetch stream at a time) and for the compute two layers back
  (its buffer must be free);
* ``copy[s,l]`` DRAM -> GPU waits for all reads of (s, l);
* ``compute[s,l]`` waits for ``copy[s,l]`` and ``compute`` of the previous
  layer.

So fetching layer l+1 overlaps computing layer l, as offloading systems do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.config import SparseDecodeParams
from sim.models import decode_layer_cost, get_model
from sim.plan import plan_from_columns


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


def split_even(total: int, parts: int) -> np.ndarray:
    """``total`` split into ``parts`` integers differing by at most one."""
    base, extra = divmod(total, parts)
    return np.array([base + (k < extra) for k in range(parts)], dtype=np.int64)


def entry_counts(shape: SparseDecodeShape, balance: str, rng: np.random.Generator | None
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


def build_plan(shape: SparseDecodeShape, counts: np.ndarray | None = None) -> pa.Table:
    """The plan, built with numpy; ``counts`` as from :func:`entry_counts`
    (default: the even split).  SSDs with no entry in a group get no op."""
    S, L, D = shape.steps, shape.layers, len(shape.ssds)
    if min(S, L, D, shape.entries_per_layer) <= 0:
        raise ValueError("steps, layers, ssds and entries must be positive")
    if counts is None:
        counts = entry_counts(shape, "even", None)
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape != (S * L, D):
        raise ValueError(f"counts must have shape {(S * L, D)}, got {counts.shape}")
    copy = not shape.gds
    per = D + copy + 1  # ops per (step, layer): D reads, [copy], compute
    n = S * L * per
    g = np.arange(S * L, dtype=np.int64)  # group index = step * L + layer
    base = g * per
    read_ids = base[:, None] + np.arange(D)[None, :]
    copy_ids = base + D
    comp_ids = base + D + copy

    kind = np.empty(n, dtype=object)
    src = np.empty(n, dtype=object)
    dst = np.empty(n, dtype=object)
    kind[read_ids.ravel()] = "read"
    src[read_ids.ravel()] = np.tile(np.array(shape.ssds, dtype=object), S * L)
    dst[read_ids.ravel()] = shape.gpu if shape.gds else shape.dram
    nbytes = np.zeros(n, dtype=np.int64)
    n_ios = np.zeros(n, dtype=np.int64)
    nbytes[read_ids.ravel()] = counts.ravel() * shape.entry_bytes
    n_ios[read_ids.ravel()] = counts.ravel() * shape.ios_per_entry
    io_path = np.full(n, "none", dtype=object)
    io_path[read_ids.ravel()] = "gds" if shape.gds else shape.io_path
    if copy:
        kind[copy_ids] = "copy"
        src[copy_ids] = shape.dram
        dst[copy_ids] = shape.gpu
        nbytes[copy_ids] = counts.sum(axis=1) * shape.entry_bytes
        n_ios[copy_ids] = 1
    kind[comp_ids] = "compute"
    src[comp_ids] = ""
    dst[comp_ids] = shape.gpu
    flops = np.zeros(n)
    hbm = np.zeros(n)
    flops[comp_ids] = shape.flops_per_layer
    hbm[comp_ids] = shape.hbm_bytes_per_layer
    tag = np.where(kind == "compute", "attn", np.where(kind == "copy", "h2d", "kv_fetch"))
    deps = _dependencies(read_ids, copy_ids if copy else None, comp_ids, n)

    keep = (kind != "read") | (nbytes > 0)
    new_id = np.cumsum(keep) - 1
    lengths, values = [], []
    for i in np.nonzero(keep)[0]:
        d = sorted(int(new_id[j]) for j in deps[i] if keep[j])
        lengths.append(len(d))
        values.extend(d)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    step = np.repeat(g // L, per).astype(np.int32)
    layer = np.repeat(g % L, per).astype(np.int32)
    cols = {
        "step": step, "layer": layer, "kind": kind, "src": src, "dst": dst,
        "bytes": nbytes, "n_ios": n_ios, "queue_depth": np.full(n, shape.queue_depth),
        "io_path": io_path, "flops": flops, "hbm_bytes": hbm, "tag": tag,
    }
    return plan_from_columns({k: v[keep] for k, v in cols.items()}, offsets,
                             np.asarray(values, dtype=np.int64))


def _dependencies(read_ids: np.ndarray, copy_ids: np.ndarray | None, comp_ids: np.ndarray,
                  n: int) -> list[list[int]]:
    deps: list[list[int]] = [[] for _ in range(n)]
    groups = len(comp_ids)
    for gi in range(groups):
        reads = read_ids[gi].tolist()
        for r in reads:
            if gi >= 1:
                deps[r].extend(read_ids[gi - 1].tolist())
            if gi >= 2:
                deps[r].append(int(comp_ids[gi - 2]))
        comp = int(comp_ids[gi])
        if copy_ids is not None:
            deps[int(copy_ids[gi])] = list(reads)
            deps[comp] = [int(copy_ids[gi])]
        else:
            deps[comp] = list(reads)
        if gi >= 1:
            deps[comp].append(int(comp_ids[gi - 1]))
    return deps


def plan_for(params: SparseDecodeParams, profile: HardwareProfile, seed: int
             ) -> tuple[pa.Table, SparseDecodeShape]:
    """The plan of a scenario's sparse-decode workload on ``profile``.

    Raises :class:`ValueError` (one line) when the profile cannot run it.
    """
    card = get_model(params.model)
    n_ssd = params.ssds or len(profile.ssd_names)
    if not profile.ssd_names:
        raise ValueError(f"profile {profile.name} has no SSDs; this workload reads from SSDs")
    if n_ssd > len(profile.ssd_names):
        raise ValueError(
            f"ssds: {n_ssd} requested but profile {profile.name} has {len(profile.ssd_names)}"
        )
    if params.gds and not profile.software.gpudirect:
        raise ValueError(f"gds: profile {profile.name} has no GPUDirect Storage")
    layers = params.layers or card.layers
    selected = max(1, round(params.context_tokens * params.sparsity))
    cost = decode_layer_cost(card, params.batch, params.context_tokens, params.sparsity)
    shape = SparseDecodeShape(
        steps=params.steps,
        layers=layers,
        ssds=profile.ssd_names[:n_ssd],
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
    )
    rng = np.random.default_rng(seed)
    return build_plan(shape, entry_counts(shape, params.balance, rng)), shape

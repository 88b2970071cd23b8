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


def build_plan(shape: SparseDecodeShape) -> pa.Table:
    """The plan as columns, built with numpy (no per-op Python loop)."""
    S, L, D = shape.steps, shape.layers, len(shape.ssds)
    if min(S, L, D, shape.entries_per_layer) <= 0:
        raise ValueError("steps, layers, ssds and entries must be positive")
    entries = split_even(shape.entries_per_layer, D)
    if (entries == 0).any():
        raise ValueError("fewer selected entries per layer than SSDs")
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
    nbytes[read_ids.ravel()] = np.tile(entries * shape.entry_bytes, S * L)
    n_ios[read_ids.ravel()] = np.tile(entries * shape.ios_per_entry, S * L)
    io_path = np.full(n, "none", dtype=object)
    io_path[read_ids.ravel()] = "gds" if shape.gds else shape.io_path
    if copy:
        kind[copy_ids] = "copy"
        src[copy_ids] = shape.dram
        dst[copy_ids] = shape.gpu
        nbytes[copy_ids] = shape.entries_per_layer * shape.entry_bytes
        n_ios[copy_ids] = 1
    kind[comp_ids] = "compute"
    src[comp_ids] = ""
    dst[comp_ids] = shape.gpu
    flops = np.zeros(n)
    hbm = np.zeros(n)
    flops[comp_ids] = shape.flops_per_layer
    hbm[comp_ids] = shape.hbm_bytes_per_layer
    tag = np.where(kind == "compute", "attn", np.where(kind == "copy", "h2d", "kv_fetch"))

    # dependencies, as lists per op, then CSR
    deps: list[list[int]] = [[] for _ in range(n)]
    for gi in range(S * L):
        reads = read_ids[gi].tolist()
        if gi >= 1:
            prev_reads = read_ids[gi - 1].tolist()
            for r in reads:
                deps[r].extend(prev_reads)
        if gi >= 2:
            for r in reads:
                deps[r].append(int(comp_ids[gi - 2]))
        if copy:
            deps[int(copy_ids[gi])] = reads
            deps[int(comp_ids[gi])] = [int(copy_ids[gi])]
        else:
            deps[int(comp_ids[gi])] = list(reads)
        if gi >= 1:
            deps[int(comp_ids[gi])].append(int(comp_ids[gi - 1]))
    lengths = np.fromiter((len(d) for d in deps), dtype=np.int64, count=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = np.fromiter((v for d in deps for v in sorted(d)), dtype=np.int64,
                         count=int(offsets[-1]))
    step = np.repeat(g // L, per).astype(np.int32)
    layer = np.repeat(g % L, per).astype(np.int32)
    return plan_from_columns(
        {
            "step": step, "layer": layer, "kind": kind, "src": src, "dst": dst,
            "bytes": nbytes, "n_ios": n_ios, "queue_depth": np.full(n, shape.queue_depth),
            "io_path": io_path, "flops": flops, "hbm_bytes": hbm, "tag": tag,
        },
        offsets, values,
    )

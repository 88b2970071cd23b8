"""Sparse decoding through KVDrive-style pipelines (seed 003 §6): plan ops.

The lanes (one design per sequence and modeled layer, on the access-trace
generator) are those of :mod:`sim.scenarios.swarm` (same traces, layout,
budget and lane regions on the SSDs); what differs is the decode pipeline of
one (step, layer) group.  The batch's sequences are split into
``micro_batches`` contiguous micro-batches (``numpy.array_split``); for
micro-batch i the plan holds

* ``select`` i: the design's scoring (``score_flops`` over ``score_bytes``),
  on the GPU (KVDrive scores centroids there) or on the CPU cores;
* ``lookup`` i: the in-GPU cache's hit/miss evaluation on the CPU, one
  thread (an assumption, :mod:`sim.scenarios.host_threads`), streaming
  ``lookup_entries x ID_BYTES`` of cache metadata (``info["lookup_entries"]``;
  absent for designs without a GPU cache);
* ``kv_fetch`` i: SSD reads (one op per SSD, the decisions' ranges shifted by
  each lane's region, cut at the device's maximum I/O);
* ``stage`` i: the extra DRAM copy before the DMA of ``stage_entries``
  (KVDrive's sync strategy, :mod:`sim.policies.kvdrive.sync`: the CUDA
  driver's pageable staging or the memmap -> pinned buffer copy): a memcpy of
  S bytes reads and writes S, so a ``2 S`` copy over the DRAM bus (DRAM -> its
  switch) and, concurrently, a CPU op over ``2 S`` bytes: the memmap -> pinned
  copy on torch's intra-op threads (``index_copy_``, seed 003 §8: the host's
  physical cores), the driver's pageable staging on one thread (an
  assumption); :mod:`sim.scenarios.host_threads`;
* ``h2d`` i: DRAM -> GPU of the entries the GPU lacks: ``h2d_entries``
  (KVDrive: the cache misses) or, for designs without a GPU cache, every
  selected entry; issued as CUDA copy calls (``io_path="cuda_copy"``,
  ``n_ios`` calls: :func:`_copy_calls`), each paying the profile's
  ``cuda_copy_per_call_us`` (:meth:`sim.hw.machine.Machine.cpu_seconds`);

and one ``attn`` compute for the whole batch (attention over the selected
fraction and the layer's FFN, :func:`sim.models.decode_layer_cost`; with
``gpu_time`` measured/auto its ``gpu_s`` is the layer's share of the measured
decode step at each sequence's GPU-attended entries,
:func:`sim.hw.measured.decode_layer_seconds`; a GPU ``select`` keeps its roofline).

Dependencies (SFC disaggregation, §6.1: "the GPU performs selection for the
current micro-batch concurrently with the CPU evaluating cache hit/miss
status for the previous one and fetching the KV entries of an earlier
micro-batch"): select i after select i-1; lookup i after select i and
lookup i-1 (and after h2d i-1 when the copies are pageable, ``blocking_h2d``:
a pageable cudaMemcpy holds the host thread until staged); fetch i after
lookup i (the micro-batches' reads share each SSD by max-min, so their access
latencies overlap); stage i after fetch i; h2d i after stage i (or fetch i,
or lookup i) and h2d i-1 (one copy engine); memmap reads (``memmap_reads``)
go by the kernel path (``kernel_fs``: the per-page fault cost) in I/Os of
the readahead window; compute after every h2d and the previous compute.
KVDrive's read-ahead (``info["read_ahead"]``, §7.3 (c),
:mod:`sim.policies.kvdrive.sync`): its reads (the decisions'
``prefetch_extents``) wait only for the layer's gate below, so they overlap
the selection and the lookup (the layer's QKV projection is inside the
previous compute op here, so the overlap counted is a lower bound); the
micro-batch's staging and h2d wait for them too.
Each layer's first selection waits for the previous layer's compute (the
query of layer l comes out of layer l-1), so nothing is speculative, unless
``prefetch`` (InfiniGen-style): then layer l's selection waits for layer
l-2's compute only (it speculates on layer l-1's input) and each stage chains
after the previous layer's, so layer l's select/fetch/copy overlap layer
l-1's compute; the selections themselves are the exact ones (speculation's
recall loss is not modelled: prefetch is an upper bound).  Designs that
attend on the CPU (MagicPIG, ``info["cpu_attn_entries"]``) get a
``cpu_attn`` op on every core over those entries' KV in DRAM; the GPU's
attention covers the rest.
``micro_batches = 1`` is the sequential select -> fetch -> compute pipeline
of Quest, ShadowKV, MagicPIG (Fig. 10c,d).  The cache's metadata update
overlaps compute (§6.1) and is not charged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import CPU, PlanBuilder
from sim.hw.measured import GpuTime, decode_layer_seconds, resolve
from sim.models import decode_layer_cost, get_model
from sim.policies.kvdrive.sync import MEMMAP_IO_BYTES, allocate_pinned
from sim.policies.kvdrive.windows import allocate_windows
from sim.scenarios.host_threads import (
    attn_threads,
    driver_staging_threads,
    lookup_threads,
    select_threads,
    stage_threads,
)
from sim.scenarios.kvdrive_memory import (
    dram_tier_entries,
    dram_tier_fraction,
    host_memory,
    memory_repeat,
)
from sim.scenarios.kvdrive_table3 import table3_columns
from sim.scenarios.matched import (
    Match,
    full_scale,
    match_columns,
    mean_recall,
    scale_grid,
    smallest_reaching,
)
from sim.scenarios.swarm import (
    SwarmPlan,
    _reads,
    build_lanes,
    lane_bases,
    max_io_bytes,
    replay_lane,
)

ID_BYTES = 8  # one int64 entry id of cache metadata


def plan_kvdrive(p, profile, seed: int, progress=None) -> SwarmPlan:
    """Run every lane's design and assemble the micro-batched plan (``p`` is a
    :class:`sim.scenarios.kvdrive_kind.KVDriveParams`)."""
    prefix = p.context_tokens + p.profile_steps
    p = replace(p, dram_cache=dram_tier_fraction(p, profile, prefix))
    ssds, layout, built = build_lanes(p, profile, seed)
    layout = fit_dram_tier(p, profile, layout, built)
    apply_windows(p, built)
    apply_pinned(p, built)
    info = host_columns(p, profile, built)
    if p.match_recall > 0:  # the Swarm comparison's rule: budget raised to a target recall
        match = match_budget(p, layout, built)
        layout = replace(layout, budget_scale=match.scale)
        info.update(match_columns(match))
    lanes = {k: replay_lane(b, p, layout, progress) for k, b in built.items()}
    if p.table3_cache:  # Table 3's cache over the design's selections: counted, no bytes
        info.update(table3_columns(p, layout, built, lanes))
    bases = lane_bases(lanes, len(ssds))
    plan = assemble(p, profile, max_io_bytes(profile, ssds), layout, lanes, bases, prefix)
    return SwarmPlan(plan, lanes, ssds, p, layout, bases, info)


def fit_dram_tier(p, profile, layout, built: dict):
    """With ``dram_fill``, every design with a DRAM tier (KVDrive: ``resize_cache``)
    re-warmed with it at :func:`dram_tier_entries` whole entries (the fraction the
    lanes were built with rounds; the whole prefix when the budget holds it);
    the layout the lanes then replay with."""
    if not p.dram_fill:
        return layout
    layout = replace(
        layout, dram_cache_entries=dram_tier_entries(p, profile, p.context_tokens + p.profile_steps)
    )
    for b in built.values():
        if hasattr(b.design, "resize_cache"):
            b.design.layout = layout
            b.design.resize_cache(b.design.cache.capacity)
    return layout


def host_columns(p, profile, built: dict) -> dict:
    """The host-memory check at build time (:func:`host_memory`), as summary columns."""
    need, budget, oom = host_memory(p, profile, [lane_host_bytes(b.design) for b in built.values()])
    return {
        "host_need_gb": need / 1e9,
        "host_budget_gb": budget / 1e9,
        "host_oom": oom,
        "dram_tier": p.dram_cache,
    }


def lane_host_bytes(design) -> int:
    """``design.host_bytes()``; for a design without it (Swarm), the base rule:
    its DRAM cache and its DRAM-resident index
    (:class:`sim.policies.design_base.DesignBase`)."""
    if hasattr(design, "host_bytes"):
        return int(design.host_bytes())
    lay = design.layout
    return lay.dram_cache_entries * lay.entry_bytes + int(design.index_bytes())


def match_budget(p, layout, built: dict) -> Match:
    """The smallest budget scale whose mean recall reaches ``p.match_recall``
    (:func:`sim.scenarios.matched.smallest_reaching`, selection replays only)."""
    prefix = p.context_tokens + p.profile_steps
    top = full_scale(layout, (prefix + t + 1 for t in range(p.steps)))

    def recall_at(scale: float) -> float:
        lay = replace(layout, budget_scale=scale)
        return mean_recall(replay_lane(b, p, lay) for b in built.values())

    return smallest_reaching(recall_at, scale_grid(p.match_step, top), float(p.match_recall))


def apply_windows(p, built: dict) -> np.ndarray | None:
    """With ``p.gpu_cache_mb`` set, the knapsack's window for every lane whose
    design has a window cache (:func:`allocate_windows`); the windows chosen."""
    designs = [b.design for b in built.values() if hasattr(b.design, "resize_cache")]
    if p.gpu_cache_mb <= 0 or not designs:
        return None
    repeat = (p.layers or get_model(p.model).layers) // p.layers_modeled
    return allocate_windows(designs, p.gpu_cache_mb * 1e6, repeat)


def apply_pinned(p, built: dict) -> int:
    """With ``p.pinned_mb`` set, the balanced split's pinned budget over every
    lane whose design pins (:func:`allocate_pinned`); the entries pinned."""
    designs = [b.design for b in built.values() if getattr(b.design, "pin", None)]
    designs = [d for d in designs if d.params.sync == "balanced"]
    if p.pinned_mb <= 0 or not designs:
        return 0
    # host memory: every model layer holds its pinned share (the memory checks' repeat)
    return allocate_pinned(designs, p.pinned_mb * 1e6, memory_repeat(p))


def _h2d_bytes(dec, entry_bytes: int) -> float:
    """DRAM -> GPU bytes: ``info["h2d_bytes"]`` (ShadowKV: values only), else
    ``h2d_entries`` whole entries (KVDrive: the cache misses), else every
    selected entry (designs without a GPU cache)."""
    if "h2d_bytes" in dec.info:
        return float(dec.info["h2d_bytes"])
    return float(dec.info.get("h2d_entries", len(dec.selected))) * entry_bytes


def _copy_calls(decs) -> int:
    """CUDA copy calls of one micro-batch's H2D op: one gather for the micro-batch
    (ShadowKV's ``gather_copy_with_offsets``, which KVDrive's copies derive from,
    seed 003 §8), plus one call per run of consecutive entries of each lane whose
    design copies run by run (``info["h2d_per_run"]``, ``info["h2d_runs"]``)."""
    runs = sum(int(d.info.get("h2d_runs", 0)) for d, _ in decs if d.info.get("h2d_per_run"))
    return runs or 1


def _stage(
    b: PlanBuilder,
    on: str,
    gpu: str,
    flops: float,
    nbytes: float,
    deps,
    threads: Callable[[], int],
    rate: Callable[[], float] = lambda: 0.0,
    **kw,
) -> int:
    """A compute op on ``on`` (``cpu``: on ``threads()`` threads, :mod:`sim.scenarios.host_threads`,
    at most ``rate()`` GB/s per thread, 0: the core's) or -1 when there is no work; the
    counts are read only for a CPU op (a design reads only its own ops' numbers)."""
    if not (flops or nbytes):
        return -1
    if on == CPU:
        return b.cpu_compute(flops, nbytes, threads(), depends_on=deps, core_gbps=rate(), **kw)
    return b.compute(gpu, flops, nbytes, depends_on=deps, **kw)


def _chain(*ops) -> list[int]:
    return [x for x in ops if x >= 0]


def _micro_batch(b, ctx, decs, gate, prev, kw) -> tuple[list[int], dict, int]:
    """One micro-batch's select, lookup, reads, CPU attention and copy; returns
    (what the compute waits for, this micro-batch's stage ops, GPU-attended entries)."""
    p, gpu, dram, entry = ctx["p"], ctx["gpu"], ctx["dram"], ctx["entry"]
    flops = sum(d.score_flops for d, _ in decs)
    nbytes = sum(d.score_bytes for d, _ in decs)
    deps = gate + _chain(prev["select"])
    sel = _stage(
        b,
        ctx["on"],
        gpu,
        flops,
        nbytes,
        deps,
        tag="select",
        threads=lambda: ctx["select_threads"],
        rate=lambda: p.select_gbps_per_thread,
        **kw,
    )
    after = [sel] if sel >= 0 else gate
    n_look = sum(d.info.get("lookup_entries", 0.0) for d, _ in decs)
    blocking = any(d.info.get("blocking_h2d", 0.0) for d, _ in decs)
    deps = after + _chain(prev["lookup"]) + (_chain(prev["h2d"]) if blocking else [])
    look = _stage(
        b,
        CPU,
        gpu,
        n_look,
        n_look * ID_BYTES,
        deps,
        tag="lookup",
        threads=lambda: ctx["lookup_threads"],
        **kw,
    )
    after = [look] if look >= 0 else after
    t, layer = kw["step"], kw["layer"]
    memmap = any(d.info.get("memmap_reads", 0.0) for d, _ in decs)
    ssds, rp = (ctx["memmap_ssds"], ctx["memmap_p"]) if memmap else (ctx["ssds"], p)
    reads = _reads(b, decs, ssds, dram, rp, t, layer, "ssd", after, "kv_fetch")
    ahead = []  # the read-ahead overlaps select and lookup
    if any(d.info.get("read_ahead", 0.0) for d, _ in decs):
        ahead = _reads(b, decs, ssds, dram, rp, t, layer, "prefetch", gate, "readahead")
    n_cpu = sum(d.info.get("cpu_attn_entries", 0.0) for d, _ in decs)
    ends = []
    if n_cpu:  # MagicPIG: attention over the sampled entries where the KV lives
        card = ctx["card"]
        cpu_flops = 4.0 * card.q_heads * card.head_dim * n_cpu
        deps = reads or after
        ends.append(
            b.cpu_compute(
                cpu_flops, n_cpu * entry, ctx["attn_threads"], depends_on=deps, tag="cpu_attn", **kw
            )
        )
    n_h2d = sum(_h2d_bytes(d, entry) for d, _ in decs)
    n_stage = sum(d.info.get("stage_entries", 0.0) for d, _ in decs)
    h2d = -1
    if n_h2d:
        fetched = (reads or after) + ahead
        ready = _staging(b, ctx, n_stage, blocking, fetched, kw) or fetched
        deps = ready + _chain(prev["h2d"])
        calls = _copy_calls(decs)
        h2d = b.copy(
            dram, gpu, n_h2d, n_ios=calls, io_path="cuda_copy", depends_on=deps, tag="h2d", **kw
        )
    ends += [h2d] if h2d >= 0 else (reads or after) + ahead
    n_gpu = sum(len(d.selected) - d.info.get("cpu_attn_entries", 0.0) for d, _ in decs)
    return ends, {"select": sel, "lookup": look, "h2d": h2d}, int(n_gpu)


def _gpu_attended(dec) -> int:
    """Entries one sequence's GPU attention covers: its selection less those
    attended on the CPU (MagicPIG's ``cpu_attn_entries``)."""
    return round(len(dec.selected) - dec.info.get("cpu_attn_entries", 0.0))


def _staging(
    b: PlanBuilder, ctx: dict, entries: float, pageable: bool, deps: list[int], kw: dict
) -> list[int]:
    """The extra DRAM copy of ``entries`` before the DMA (module doc, ``stage``):
    its two ops (bus traffic, CPU memcpy), none when 0.  The CUDA driver stages
    a pageable copy (``pageable``) on the calling thread, torch's ``index_copy_``
    the memmap -> pinned one on its intra-op pool (:mod:`sim.scenarios.host_threads`)."""
    if not entries:
        return []
    s = entries * ctx["entry"]
    if pageable:  # the driver's memcpy: the profile's per-core rate
        threads, rate = ctx["driver_staging_threads"], 0.0
    else:  # index_copy_: its measured per-thread rate
        threads, rate = ctx["stage_threads"], ctx["p"].stage_gbps
    bus = b.copy(ctx["dram"], ctx["dram_hub"], 2 * s, depends_on=deps, tag="stage", **kw)
    cpu = b.cpu_compute(0.0, 2 * s, threads, depends_on=deps, tag="stage", core_gbps=rate, **kw)
    return [bus, cpu]


def dram_hub(profile, dram: str) -> str:
    """The node at the other end of ``dram``'s memory bus (its switch)."""
    for link in profile.topology.links:
        if dram in link.between:
            return next(n for n in link.between if n != dram)
    raise ValueError(f"no link to {dram} in profile {profile.name}")


class _OnFirstUse(dict):
    """A dict whose missing keys are worked out on first use by ``make[key]()``."""

    def __init__(self, make: dict) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: str):
        value = self[key] = self.make[key]()
        return value


def assemble(p, profile, ssds, layout, lanes, bases, prefix) -> pa.Table:
    """The plan of every (step, layer) group (see the module doc)."""
    card = get_model(p.model)
    layers = p.layers or card.layers
    # a thread count is worked out where an op of the design uses it: a design reads
    # only its own ops' counts (sim.reads: a sensitivity run reruns a design only
    # where a number it read moves)
    ctx = _OnFirstUse(
        {
            "attn_threads": lambda: attn_threads(p, profile),
            "stage_threads": lambda: stage_threads(p, profile),
            "select_threads": lambda: select_threads(p, profile),
            "lookup_threads": lambda: lookup_threads(p, profile),
            "driver_staging_threads": lambda: driver_staging_threads(p, profile),
        }
    )
    ctx |= {
        "p": p,
        "card": card,
        "gpu": profile.gpu_names[0],
        "dram": profile.dram_names[0],
        "entry": layout.entry_bytes,
        "ssds": ssds,
        "dram_hub": dram_hub(profile, profile.dram_names[0]),
        "memmap_ssds": {k: min(v, MEMMAP_IO_BYTES) for k, v in ssds.items()},
        "memmap_p": replace(p, io_path="kernel_fs"),
    }
    mbs = [m for m in np.array_split(np.arange(p.batch), p.micro_batches) if len(m)]
    step_time, _ = resolve(profile, card, GpuTime.of(p))  # None: the roofline
    b = PlanBuilder()
    comps: list[int] = []  # every layer's compute, in order
    prev = {"select": -1, "lookup": -1, "h2d": -1}
    for t in range(p.steps):
        for layer in range(layers):
            kw = {"step": t, "layer": layer}
            keys = [(s, layer % p.layers_modeled) for s in range(p.batch)]
            ctx["on"] = lanes[keys[0]].score_device
            back = 2 if p.prefetch and layer > 0 else 1  # InfiniGen: speculate a layer early
            gate = comps[-back:][:1] if len(comps) >= back else []
            if not p.prefetch:
                prev = {"select": -1, "lookup": -1, "h2d": -1}
            ends, n_sel = [], 0
            for mb in mbs:
                decs = [(lanes[keys[s]].decisions[t], bases[keys[s]]) for s in mb]
                e, prev, n = _micro_batch(b, ctx, decs, gate, prev, kw)
                ends += e
                n_sel += n
            visible = prefix + t + 1
            cost = decode_layer_cost(card, p.batch, visible, min(1.0, n_sel / (p.batch * visible)))
            attended = [_gpu_attended(lanes[k].decisions[t]) for k in keys]
            gpu_s = decode_layer_seconds(
                step_time, attended, cost.flops, cost.hbm_bytes, card.layers
            )
            deps = sorted(set(ends + comps[-1:]))
            comps.append(
                b.compute(
                    ctx["gpu"],
                    cost.flops,
                    cost.hbm_bytes,
                    depends_on=deps,
                    tag="attn",
                    gpu_s=gpu_s,
                    **kw,
                )  # fmt: skip
            )
    return b.table()

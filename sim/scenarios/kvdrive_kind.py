"""The ``kvdrive`` workload kind: KVDrive and its baselines (seed 003).

Same lanes, traces, budget and accounting as the ``swarm`` kind
(:class:`~sim.config.SwarmParams`: every design spends the oracle's budget,
sinks and local window included), plus the pipeline shape
(``micro_batches``: 1 = sequential select -> fetch -> compute; > 1 = SFC
disaggregation, :mod:`sim.scenarios.kvdrive`).  Heavy modules load when a
variant is planned, not on ``import sim``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sim import limits
from sim.config import SwarmParams
from sim.factors import check_points
from sim.registry import KV_DESIGNS, WORKLOADS, Kind, ParamError
from sim.scenarios import host_threads, scenario_assumptions
from sim.scenarios.kvdrive_table3 import STEADY_AFTER
from sim.workloads import REPLAY_CAPS, SWARM_DESIGN_KEYS

if TYPE_CHECKING:
    import pandas as pd

BREAKDOWN = ("select", "lookup", "kv_fetch", "stage", "h2d", "cpu_attn", "attn")
FETCH = (
    "kv_fetch",
    "readahead",  # KVDrive's read-ahead: SSD reads too, counted while they overlap
    "stage",
    "h2d",
)  # the fetch: SSD -> DRAM -> (staging) -> GPU  # op tags, per-layer time


@dataclass(frozen=True)
class KVDriveParams(SwarmParams):
    """:class:`SwarmParams` (defaults for seed 003: Llama-3-8B-1048K, 1.56% sparsity,
    64 local tokens) and the pipeline's micro-batch count."""

    kind: str = "kvdrive"
    model: str = "Llama-3-8B-1048K"
    sparsity: float = 0.0156  # "a sparsity budget of 1.56%" (§3, §9.3)
    local_window: int = 64  # "retain sink tokens (the first 4 tokens) and 64 local tokens"
    design: str = "kvdrive"
    micro_batches: int = 1  # 1 = sequential; > 1 = SFC disaggregation (§6.1)
    # GPU memory for every window cache (all layers and sequences), MB; > 0: each lane's
    # window from the knapsack (sim.policies.kvdrive.windows); 0: the design's own window
    gpu_cache_mb: float = 0.0
    # InfiniGen-style previous-layer prefetch: layer l's selection and fetch start once
    # layer l-2's compute is done (speculating on layer l-1's input), overlapping l-1
    prefetch: bool = False
    # the calibration pass (seed 003 §6.2, sim.scenarios.kvdrive_calibrate): before the
    # run, centroids, GPU cache and micro-batches are chosen on a short profiling run of
    # the same workload at min(context_tokens, calibrate_tokens) tokens and 2 steps
    calibrate: bool = False
    calibrate_tokens: int = 32768
    # seed 003 Table 3's GPU cache (window 2, LRU and lookahead) counted over the
    # design's own selections, as summary columns t3_hit_rate_* (for designs without
    # a GPU cache of their own; it moves no bytes: sim.scenarios.kvdrive_table3)
    table3_cache: bool = False
    # the host-memory budget, the same for every design (sim.scenarios.kvdrive_memory):
    # host_mem_gb when > 0, else the profile's DRAM minus host_reserved_gb (OS, runtime,
    # staging buffers); a design over it is out of memory, KVDrive's DRAM tier fits it
    host_mem_gb: float = 0.0
    host_reserved_gb: float = 0.0
    # KVDrive's DRAM tier takes all the host budget allows (§7.1: "the subsequent
    # highest-scoring entries ... are offloaded to DRAM"), not dram_cache x prefix
    dram_fill: bool = False
    # the balanced sync's pinned memory over all layers and sequences, MB (seed 003 §7.3
    # (d)): given to the entries the offline profile finds stalling most; carved out of
    # each lane's DRAM tier (sim.policies.kvdrive.sync.allocate_pinned)
    pinned_mb: float = 0.0
    # points to run every variant at, each a mapping of workload fields (seed 003's
    # (context_tokens, batch) pairs): variant "name | 60K | 8" per point; a variant's
    # own points replace these, [] runs it once at the fields above (sim.factors)
    points: tuple[dict, ...] = ()
    # host threads of the CPU ops (sim.scenarios.host_threads, each an assumption with
    # its range): a CPU design's selection (0 = one per sequence), the hit/miss lookup,
    # the driver's pageable staging, the memmap -> pinned index_copy_ (0 = torch's
    # default pool, the cores), MagicPIG's CPU attention (0 = every core)
    select_threads: int = 1
    lookup_threads: int = 1
    driver_staging_threads: int = 1
    stage_threads: int = 0
    attn_threads: int = 0
    # the memmap -> pinned index_copy_'s DRAM traffic per thread, GB/s (measured:
    # sim.scenarios.host_threads.INDEX_COPY_GBPS, analysis/host_copy.csv)
    stage_gbps: float = host_threads.INDEX_COPY_GBPS

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("lookup_threads", "driver_staging_threads"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")
        if not self.stage_gbps > 0:
            raise ParamError("stage_gbps", f"must be > 0, got {self.stage_gbps}")
        for name in ("stage_threads", "attn_threads"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0 (0: the cores), got {getattr(self, name)}")
        check_points(self)
        if self.calibrate_tokens < 1:
            raise ParamError("calibrate_tokens", f"must be >= 1, got {self.calibrate_tokens}")
        if self.micro_batches < 1:
            raise ParamError("micro_batches", f"must be >= 1, got {self.micro_batches}")
        for name in ("gpu_cache_mb", "host_mem_gb", "host_reserved_gb", "pinned_mb"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0, got {getattr(self, name)}")


def plan_kvdrive(params: KVDriveParams, profile, seed: int, name: str, progress) -> Any:
    """Plan one variant (:func:`sim.scenarios.kvdrive.plan_kvdrive`) with its summary."""
    from sim.scenarios.kvdrive import plan_kvdrive as plan
    from sim.workloads import Planned, gpu_source

    total = params.batch * params.layers_modeled * params.steps
    done = [0]

    def tick() -> None:
        done[0] += 1
        progress(done[0], total)

    info = {}
    if params.calibrate:
        from sim.scenarios.kvdrive_calibrate import calibrated

        params, info = calibrated(params, profile, seed)
    splan = plan(params, profile, seed, tick if progress else None)
    splan.info.update(info)
    source = gpu_source(params, profile)
    return Planned(splan.plan, summarize_kvdrive(params, splan, profile), gpu_time=source)


def summarize_kvdrive(params: KVDriveParams, splan, profile) -> Callable[[Any], dict]:
    """Throughput, the per-layer time of each stage (per (step, layer) group,
    the time any of its ops runs: :func:`stage_busy_s`), GPU cache hit rate (hits
    over the entries chosen beyond sinks and window), recall and GPU memory."""

    from sim.scenarios.kvdrive_memory import gpu_memory

    need, gpu_oom = gpu_memory(params, profile, splan.lanes, splan.layout.entry_bytes)
    host_oom = bool(splan.info.get("host_oom", False))
    oom = gpu_oom or host_oom
    where = " and ".join(w for w, o in (("GPU", gpu_oom), ("host", host_oom)) if o)

    def summarize(records) -> dict:
        ops = records.ops.to_pandas()
        makespan = float(ops["end_s"].max()) if len(ops) else 0.0
        groups = max(1, ops.groupby(["step", "layer"]).ngroups)
        dur = stage_busy_s(ops)
        hits = misses = 0.0
        late = [0.0, 0.0]  # hits and misses after the warm-up block (gpu_hit_rate_steady)
        recall = []
        for lane in splan.lanes.values():
            for t, (dec, orc) in enumerate(zip(lane.decisions, lane.oracle, strict=True)):
                h = dec.info.get("gpu_hits", 0.0)
                m = dec.info.get("gpu_misses", len(dec.selected) - lane.always)
                hits, misses = hits + h, misses + m
                if t >= STEADY_AFTER:
                    late[0], late[1] = late[0] + h, late[1] + m
                recall.append(np.intersect1d(dec.selected, orc).size / max(1, orc.size))
        per_layer = 1e6 * params.layers_modeled
        cap = sum(
            lane.decisions[0].info.get("cache_capacity", 0.0) for lane in splan.lanes.values()
        )
        index = sum(lane.index_bytes for lane in splan.lanes.values())
        row = {
            "design": params.design,
            "context_tokens": params.context_tokens,
            "batch": params.batch,
            "steps": params.steps,
            "micro_batches": params.micro_batches,
            "tokens_per_s": params.batch * params.steps / makespan
            if makespan and not oom
            else float("nan"),
            "gpu_mem_gb": need / 1e9,
            "oom": oom,
            "oom_where": where,  # "GPU", "host" or "" (fits)
            "step_ms": 1e3 * makespan / params.steps,
            "gpu_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            # the rate pooled over the steps after the first STEADY_AFTER (NaN: none)
            "gpu_hit_rate_steady": late[0] / sum(late) if sum(late) else float("nan"),
            "recall": sum(recall) / len(recall) if recall else float("nan"),
            "read_mb_per_step": float(ops.loc[ops["kind"] == "read", "bytes"].sum())
            / params.steps
            / 1e6,
            "index_mb_per_layer": index / per_layer,
            "gpu_cache_mb_per_layer": cap * splan.layout.entry_bytes / per_layer,
        }
        row.update(splan.info)
        for tag in BREAKDOWN:
            row[f"{tag}_ms_per_layer"] = 1e3 * float(dur.get(tag, 0.0)) / groups
        row.update(sync_columns(ops, records.devices, profile, params, groups))
        return row

    return summarize


def sync_columns(ops: pd.DataFrame, devices, profile, params: KVDriveParams, groups: int):
    """The sync strategy's columns (seed 003 Fig. 21a): ``fetch_ms_per_layer``,
    the per-(step, layer) time any fetch op (SSD read, staging, H2D) runs, as
    one stage; the DRAM bus's measured bytes (every memory-bus link's flow
    work) and the H2D copies' bytes, per step."""
    fetch = ops[ops["tag"].isin(FETCH)].assign(tag="fetch")
    busy = float(stage_busy_s(fetch).get("fetch", 0.0))
    buses = {ln.name for ln in profile.topology.links if ln.kind == "membus"}
    dev = devices.to_pandas()
    bus = dev.loc[dev["device"].isin(buses), ["bytes_read", "bytes_written"]].to_numpy().sum()
    h2d = float(ops.loc[ops["tag"] == "h2d", "bytes"].sum())
    kvdrive = params.design.startswith("kvdrive")  # the other designs have no sync setting
    sync = dict(params.design_params or {}).get("sync", "blockwise") if kvdrive else ""
    return {
        "sync": str(sync),
        "fetch_ms_per_layer": 1e3 * busy / groups,
        "dram_bus_mb_per_step": float(bus) / params.steps / 1e6,
        "h2d_mb_per_step": h2d / params.steps / 1e6,
    }


def stage_busy_s(ops: pd.DataFrame) -> pd.Series:
    """Per tag, the seconds summed over (step, layer) groups during which at least
    one of the group's ops of that tag runs: the union of their busy intervals.

    Micro-batches' reads share the SSDs and overlap in time; summing their
    durations would count the shared seconds once per micro-batch.  Vectorised:
    ops sorted by (group, tag, start); each op adds what it runs past the
    latest end of the ops before it in its group and tag."""
    import pandas as pd

    if not len(ops):
        return pd.Series(dtype=float)
    keys = ["step", "layer", "tag"]
    o = ops.sort_values(keys + ["start_s"], kind="stable")
    reach = o.groupby(keys, sort=False)["end_s"].cummax()
    before = reach.groupby([o[k] for k in keys], sort=False).shift(1)
    start = np.maximum(o["start_s"].to_numpy(), before.fillna(-np.inf).to_numpy())
    added = np.maximum(0.0, o["end_s"].to_numpy() - start)
    return pd.Series(added, index=o.index).groupby(o["tag"]).sum()


# KVDrive's pipeline and memory choices (Kind.design_keys); host_mem_gb is the machine's
# budget, the same for every design, so a variant that sets it ran another workload
KVDRIVE_DESIGN_KEYS = (
    "micro_batches", "gpu_cache_mb", "prefetch", "calibrate", "calibrate_tokens",
    "dram_fill", "pinned_mb", "table3_cache",
)  # fmt: skip

WORKLOADS.register(
    "kvdrive",
    KVDriveParams,
    plan_kvdrive,
    designs=KV_DESIGNS,
    # replayed as swarm's designs
    kind=Kind(
        "kvdrive",
        limits.KVDRIVE,
        caps=REPLAY_CAPS,
        assumptions=(*host_threads.KVDRIVE, *scenario_assumptions.KVDRIVE),
        design_keys=(*SWARM_DESIGN_KEYS, *KVDRIVE_DESIGN_KEYS),
    ),
)

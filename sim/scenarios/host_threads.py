"""How many host threads each CPU-side op of the sparse-decode pipelines runs on.

Each count is a workload parameter (:class:`sim.config.SwarmParams`,
:class:`sim.scenarios.kvdrive_kind.KVDriveParams`; 0 where a rule below picks
it from the batch or the host), so a scenario or ``--factor`` may set it, and
each that is an assumption is registered with its plausible range on its kind
(:data:`SWARM`, :data:`KVDRIVE`, :class:`sim.registry.WorkloadAssumption`):
``kvtier sim ... --sensitivity`` runs it at both ends (``workload.<param>``,
:mod:`sim.sensitivity`).  A range's high end "the cores" is the profile's
``cpu.cores``, the most a host op can use.

A plan's ``cpu`` compute op carries its threads
(:meth:`kvtier.contracts.plan.PlanBuilder.cpu_compute`); the executor runs it
on that many of the profile's cores at most, sharing them by max-min with
every other CPU flow on the host (the I/O paths' software cost, the other
micro-batches' ops; :mod:`sim.executor`), and at ``threads x`` the per-core
memory rate capped by the DRAM modules together
(:meth:`sim.hw.machine.Machine.cpu_compute_seconds`).  Each count below names
its source, or says it is an assumption and gives its plausible range
(``docs/kvdrive-vs-paper.md``, "Host threads").

* KVDrive's staging copy (memmap region -> pinned buffer,
  :mod:`sim.policies.kvdrive.sync`): the prototype is "built on PyTorch
  2.3.0" and "sparse updates and retrievals are performed through
  ``torch.Tensor.index_copy_()``" (seed 003 §8).  On CPU tensors that runs on
  torch's intra-op pool: ``index_copy_kernel`` is ``iter.for_each(loop)``
  (aten/src/ATen/native/cpu/IndexKernel.cpp; serial only under
  ``torch.use_deterministic_algorithms``), split over ``torch.get_num_threads()``
  threads in grains of 32,768 elements (``at::internal::GRAIN_SIZE``), and
  the pool defaults to the physical cores (``intraop_default_num_threads`` ->
  ``TaskThreadPoolBase::defaultNumThreads``, c10/core/thread_pool.cpp:
  ``cpuinfo_get_cores_count()``).  One micro-batch's staging at 120K x 4 is
  ~954 entries x 2,048 fp16 elements = 1.95M elements, 60 grains: every thread
  of the L20 (48) and RTX 4090 (32) hosts gets work, 60 of the H20's 96 (not
  modelled: DRAM-bound, the op alone takes the same time on 60 or 96).  Measured here with the real
  library (``analysis/measure_host_copy.py``, ``analysis/host_copy.csv``):
  ``index_copy_`` of 1,150 x 4,096 B takes 1,265 us on one thread and 636 us
  on two (1.99x): 7.45 GB/s of DRAM traffic per thread (:data:`INDEX_COPY_GBPS`),
  which the staging op carries as its per-thread rate (the plan's
  ``core_gbps``; KVDrive's ``stage_gbps``).
* The CUDA driver's staging of a pageable copy (KVDrive's layer-wise and
  blockwise syncs, :mod:`sim.policies.kvdrive.sync`: "pageable host memory
  ... is first copied to a pinned staging buffer", CUDA C++ Best Practices
  Guide): **one thread, an assumption** (the guide gives no count; the call
  returns once the pageable buffer is staged, so the copy is the calling
  thread's); plausible 1 to a few.
* KVDrive's hit/miss lookup ("the CPU evaluating cache hit/miss status",
  §6.1): **one thread, an assumption** (the text gives no count); plausible
  1 to the cores.  It is 0.2% of a layer at 120K x 4 (Fig. 16 row of the
  docs), so the range moves no result.
* A CPU-scoring design's selection in the KVDrive pipeline (MagicPIG's hash
  lookups): **one thread, an assumption** (seed 003 gives no count); plausible
  1 to the cores.
* MagicPIG's CPU attention: **every core, an assumption** (seed 003 gives no
  count; attention over sampled entries parallelises over heads and
  sequences); plausible 1 to the cores.
* Swarm's selection (seed 000 §7: "the CPU concurrently performs ...
  predicting the KV clusters ... by comparing the layer embedding with the
  cluster medoids"): **one thread per sequence, an assumption** (the text
  gives no count); plausible 1 (one scorer for the batch) to the cores (a
  multi-threaded matmul over the medoids).  Its rate per thread: the
  profile's per-core rate as given; a torch bf16 scan of DRAM-resident keys
  measured here streams 3.61 GB/s per thread (:data:`SCAN_BF16_GBPS`,
  ``analysis/index_scan.csv`` by ``analysis/measure_index_scan.py``), the low
  end of its range (``select_gbps_per_thread``).
"""

from __future__ import annotations

from typing import Any

from hwprofiles import HardwareProfile
from sim.registry import WorkloadAssumption

# index_copy_'s DRAM traffic per thread, GB/s, measured with torch by
# analysis/measure_host_copy.py (analysis/host_copy.csv, 2026-12-02): op "scatter"
# (dst.index_copy_), 1,150 rows x 4,096 B (about one micro-batch's staging at 120K x 4),
# 1 thread, traffic_gbps_min.  The staging copy moves at most this per thread
# (the plan's core_gbps); its range: the 2,300-row figure (7.35) to a contiguous
# copy_'s at 2,300 x 4,096 B on one thread (27.09), what a per-row memcpy could reach
INDEX_COPY_GBPS = 7.45
INDEX_COPY_RANGE_GBPS = (7.35, 27.09)


# a torch scan of DRAM-resident keys on one thread, GB/s: Qwen3-32B's keys (bf16,
# 2,048 B each) at 128K by the 64 query heads, gbps_min of analysis/index_scan.csv
# (analysis/measure_index_scan.py, 2026-12-02): the low end of a CPU selection's rate
SCAN_BF16_GBPS = 3.61


def cores(profile: HardwareProfile) -> float:
    """The profile's cores: the high end of a thread count's range."""
    return float(profile.cpu.cores)


def select_gbps(p: Any, profile: HardwareProfile) -> float:
    """A CPU selection's DRAM bytes per thread per second: ``p.select_gbps_per_thread``, or the
    profile's per-core rate where it is 0 (the plan's ``core_gbps``)."""
    return p.select_gbps_per_thread or profile.cpu.core_mem_gbps


def select_threads(p: Any, profile: HardwareProfile) -> int:
    """A CPU-scoring design's selection: ``p.select_threads``, or one thread per
    sequence at most the cores where it is 0 (Swarm's default; KVDrive's is 1)."""
    return p.select_threads or min(p.batch, profile.cpu.cores)


def lookup_threads(p: Any, profile: HardwareProfile) -> int:
    """KVDrive's hit/miss lookup: ``p.lookup_threads`` (1, an assumption)."""
    return p.lookup_threads


def driver_staging_threads(p: Any, profile: HardwareProfile) -> int:
    """The CUDA driver's pageable staging: ``p.driver_staging_threads`` (1, an assumption)."""
    return p.driver_staging_threads


def stage_threads(p: Any, profile: HardwareProfile) -> int:
    """KVDrive's memmap -> pinned ``index_copy_``: ``p.stage_threads``, or torch's
    default intra-op pool, the physical cores, where it is 0 (module doc)."""
    return p.stage_threads or profile.cpu.cores


def attn_threads(p: Any, profile: HardwareProfile) -> int:
    """MagicPIG's CPU attention: ``p.attn_threads``, or every core where it is 0."""
    return p.attn_threads or profile.cpu.cores


_SELECT_GBPS = WorkloadAssumption(
    "select_gbps_per_thread",
    SCAN_BF16_GBPS,
    lambda profile: profile.cpu.core_mem_gbps,
    "a torch bf16 scan of DRAM-resident keys runs 3.61 GB/s per thread on a shared 2-core "
    "VM (analysis/index_scan.csv); the profile's per-core rate (a memcpy's) is the high end",
    select_gbps,
)
_SELECT = WorkloadAssumption(
    "select_threads",
    1,
    cores,
    "assumption: seeds 000 and 003 give no thread count for a CPU design's selection; "
    "1 (one scorer for the batch) to the cores (a multi-threaded matmul over the index)",
    select_threads,
)
SWARM = (_SELECT, _SELECT_GBPS)
"""The swarm kind's host-work assumptions: the selection's threads and rate."""

KVDRIVE = (
    _SELECT,
    _SELECT_GBPS,
    WorkloadAssumption(
        "lookup_threads",
        1,
        cores,
        "assumption: seed 003 §6.1 gives no count for the hit/miss lookup; 1 to the cores",
        lookup_threads,
    ),
    WorkloadAssumption(
        "driver_staging_threads",
        1,
        4,
        "assumption: the CUDA guide gives no count for a pageable copy's staging; the "
        "calling thread (1) to a few (4)",
        driver_staging_threads,
    ),
    WorkloadAssumption(
        "stage_threads",
        1,
        cores,
        "torch's default intra-op pool is the physical cores (c10/core/thread_pool.cpp); "
        "1 if the paper's run was single-threaded or deterministic (seed 003 gives no count)",
        stage_threads,
    ),
    WorkloadAssumption(
        "stage_gbps",
        INDEX_COPY_RANGE_GBPS[0],
        INDEX_COPY_RANGE_GBPS[1],
        "index_copy_ measured with torch on a 2-core VM (analysis/host_copy.csv); on the "
        "paper's Xeon per thread between that and a contiguous copy_'s rate (same file)",
        lambda p, profile: p.stage_gbps,
    ),
    WorkloadAssumption(
        "attn_threads",
        1,
        cores,
        "assumption: seed 003 gives no count for MagicPIG's CPU attention; 1 to the cores",
        attn_threads,
    ),
)
"""The kvdrive kind's host-thread assumptions."""

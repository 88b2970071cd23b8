"""How many host threads each CPU-side op of the sparse-decode pipelines runs on.

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
  on two (1.99x).
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
  multi-threaded matmul over the medoids).
"""

from __future__ import annotations

from hwprofiles import HardwareProfile

DRIVER_STAGING_THREADS = 1  # assumption, range 1 to a few (module doc)
LOOKUP_THREADS = 1  # assumption, range 1 to the cores (module doc)
CPU_SELECT_THREADS = 1  # assumption, range 1 to the cores (module doc)


def torch_intraop_threads(profile: HardwareProfile) -> int:
    """torch's default intra-op pool on ``profile``'s host: its physical cores
    (module doc); KVDrive's staging copy runs on it."""
    return profile.cpu.cores


def cpu_attention_threads(profile: HardwareProfile) -> int:
    """MagicPIG's CPU attention: every core (an assumption, module doc)."""
    return profile.cpu.cores


def swarm_select_threads(batch: int, profile: HardwareProfile) -> int:
    """Swarm's medoid scoring: one thread per sequence, at most the cores (an
    assumption, module doc)."""
    return min(batch, profile.cpu.cores)

"""Serving designs: where offloaded KV lives and how it moves.

A design is a frozen :class:`DesignParams`; :data:`SERVING_DESIGNS`
(:mod:`sim.registry`) names the ones the seeds evaluate, each a preset, and
a scenario variant may override any field (``design_params``).  Two families:

**SSD-backed PagedAttention** (seed 001).  vLLM's paged KV cache with a
GPU -> CPU -> SSD hierarchy: each tier has a capacity (GiB here, blocks in
vLLM), an offload block is ``block_factor`` GPU blocks ("4 GPU blocks (16
tokens each) = 1 SSD block (64 tokens)", §2.3), every newly computed block
is offloaded once (the scheduler "identifies blocks to offload", §2.2), the
CPU tier demotes its LRU victims to the SSD tier ("LRU-based rotation",
§4.1), and loads are asynchronous: the request is scheduled after its
blocks arrive (§2.2 Load, step 7), parked meanwhile.  The seed builds on
vLLM's offloading connector (§2.2: ``OffloadingManager.prepare_store``,
``complete_store``, ``prepare_load``), so its stores follow vLLM's
step-synchronous rules (``stores: step``, :mod:`sim.serving.execute.stores`):
prepared all or nothing at each scheduler step and retried, completions and
finished loads seen at step boundaries, a finished request's blocks freed
once its stores end.  SSD transfers use
GPUDirect Storage through KvikIO/cuFile (``io_path: gds``) where the
profile has it.  Configurations: GPU only, +CPU, +CPU+SSD (§3.2-3.5).

**Unified KV Pooling** (seed 004) and its baselines.  LMCache (the
baseline, §II-A, Fig. 1): one host-memory module and one SSD, every stored
chunk written to host memory and through it to the SSD via the kernel
filesystem.  A chunk is 256 tokens whatever the engine's GPU block
(``chunk_tokens``; LMCache's ``chunk_size``, default 256, lmcache/v1/config.py:
one key and one object per chunk), so with vLLM's 16-token blocks an offload
block is 16 GPU blocks and a hit ends at a chunk boundary (a partial chunk's
key hashes a prefix that ends inside it, so a later turn that goes on past
it never matches it: kvtier stores full chunks only, as LMCache does with
``save_unfull_chunk`` off); the pool and its ablations are built on LMCache
(§IV) and keep its chunks.  Retrieval is "serialized through host-memory
and SSD" (§III-B): one I/O stream.  Stores are ``eager``: placed as each
chunk is computed, best effort (LMCache's storage manager keeps its own
store path; kvtier has not read its rules against vLLM's step semantics, so
the LMCache, pool and HiCache designs keep this one).  Kernel-filesystem
reads are buffered: the kernel handles the data page by page (the CPU
cost of ``kernel_fs`` is paid per 4 KiB page,
:meth:`sim.hw.machine.Machine.cpu_seconds`) while the device sees
readahead-sized requests, 128 KiB by default (Linux ``VM_READAHEAD_PAGES`` =
``SZ_128K / PAGE_SIZE``, include/linux/mm.h; sysfs ``read_ahead_kb`` = 128);
seed 004 is silent on I/O size, readahead and O_DIRECT.  SPDK passthrough
issues NVMe commands of up to 128 KiB (a common MDTS), so every path
defaults to 128 KiB I/Os.  Without layer-wise pipelining a load is one
transfer per device holding every hit's layers: LMCache's non-layer-wise
``LMCacheEngine.retrieve`` (lmcache/v1/cache_engine.py, v0.3.x) first gathers
every chunk's memory object from the storage backends, then copies them all
with one ``gpu_connector.batched_to_gpu`` call, so a disk read and the
copy to the GPU do not pipeline chunk by chunk (:func:`sim.serving.policy.jobs.
load_pieces`).  +LP: layer-wise pipelining
(§II-B1); +AsyncKV: loads start when the request arrives (§II-B2).  Unified
KV pooling (§IV): every DRAM module and SSD in one flat pool, placement by
bandwidth (Algorithm 1, :mod:`sim.serving.tiers.placement`), one I/O stream per
pool device, KV-passthrough (``io_path: passthrough``), with LP and
AsyncKV.  Ablations (§V-C): orchestrator only (pool, kernel filesystem) and
passthrough only (LMCache's single module and SSD, passthrough).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtier.contracts.plan import IO_PATHS
from sim.registry import SERVING_DESIGNS, DesignAssumption, ParamError

register = SERVING_DESIGNS.register  # register("name", DesignParams, preset={...})

LOADS = ("off", "schedule", "arrival")
STORES = ("step", "eager")
# 128 KiB: Linux's default readahead (kernel_fs) and a common NVMe MDTS (passthrough)
IO_KIB_DEFAULT = 128


@dataclass(frozen=True)
class DesignParams:
    """How KV is kept and moved below the GPU (see the module docstring)."""

    cpu_gib: float = 0.0  # host-memory KV capacity, over the design's DRAM modules; 0 = none
    ssd_gib: float = 0.0  # SSD KV capacity, over the design's SSDs; 0 = none
    pool: bool = False  # DRAM modules and SSDs form one flat pool (seed 004) vs CPU above SSD
    dram_modules: int = 1  # DRAM modules used, the first N of the profile; 0 = all
    ssds: int = 1  # SSDs used, the first N of the profile; 0 = all
    block_factor: int = 1  # an offload block is this many GPU blocks (seed 001 §2.3)
    chunk_tokens: int = 0  # an offload block is this many tokens (LMCache's chunk); 0: block_factor
    cpu_to_ssd: str = "on_evict"  # on_evict: CPU victims demoted to SSD; write_through: both
    io_path: str = "io_uring"  # SSD software path (kernel_fs | io_uring | passthrough | gds)
    io_kib: int = 0  # SSD I/O size; 0 = the default, 128 KiB (readahead / MDTS, see above)
    gds: bool = False  # SSD <-> GPU directly (GPUDirect Storage) where the profile allows
    layerwise: bool = False  # layer-wise pipelining: layer l computes once its KV is in
    async_load: str = "off"  # off: in the forward pass; schedule: park while loading; arrival
    parallel: bool = True  # one I/O stream per device; False: one serialized stream
    max_transfers: int = 16  # transfer ops in flight at once (all streams)
    queue_depth: int = 0  # I/Os in flight per SSD op; 0 = the device maximum
    object_us: float = (
        0.0  # CPU per retrieved KV object (LMCache lookup, sim.serving.policy.objcost)
    )
    file_us: float = 0.0  # CPU per object read from a file (open, read, close; kernel_fs)
    # host threads that do the per-object work (object_us, file_us) on the profile's cores:
    # LMCache retrieves on one thread, a Python loop over the objects
    # (sim.serving.policy.objcost: local_cpu_backend.py / local_disk_backend.py)
    object_threads: int = 1
    # step: vLLM's offloading connector (prepared at scheduler steps, all or nothing,
    # retried; completions seen at step boundaries: sim.serving.execute.stores);
    # eager: placed as computed, best effort, completions at once (LMCache, HiCache)
    stores: str = "eager"

    def __post_init__(self) -> None:
        if self.io_path not in IO_PATHS or self.io_path == "none":
            raise ParamError("io_path", f"must be one of {IO_PATHS[:-1]}, got {self.io_path!r}")
        if self.async_load not in LOADS:
            raise ParamError("async_load", f"must be one of {LOADS}, got {self.async_load!r}")
        if self.stores not in STORES:
            raise ParamError("stores", f"must be one of {STORES}, got {self.stores!r}")
        if self.cpu_to_ssd not in ("on_evict", "write_through"):
            raise ParamError("cpu_to_ssd", "must be 'on_evict' or 'write_through'")
        nonneg = ("cpu_gib", "ssd_gib", "dram_modules", "ssds", "io_kib", "queue_depth")
        nonneg += ("chunk_tokens",)
        for name in (*nonneg, "object_us", "file_us"):
            if getattr(self, name) < 0:
                raise ParamError(name, f"must be >= 0, got {getattr(self, name)}")
        for name in ("block_factor", "max_transfers", "object_threads"):
            if getattr(self, name) < 1:
                raise ParamError(name, f"must be >= 1, got {getattr(self, name)}")

    def offload_factor(self, block_tokens: int) -> int:
        """GPU blocks of ``block_tokens`` tokens per offload block: ``chunk_tokens`` //
        ``block_tokens`` (at least one) when the design keeps KV in chunks of tokens
        (LMCache), else ``block_factor``.  An offload block is whole GPU blocks, so a
        block that does not divide the chunk gives the largest whole number within it
        (48-token blocks: 5, 240 tokens) and a block larger than the chunk is one."""
        if self.chunk_tokens:
            return max(1, self.chunk_tokens // block_tokens)
        return self.block_factor

    def io_bytes(self) -> int:
        """Size of one SSD I/O on this design's software path."""
        if self.io_kib:
            return self.io_kib * 1024
        return IO_KIB_DEFAULT * 1024

    @property
    def has_offload(self) -> bool:
        return self.cpu_gib > 0 or self.ssd_gib > 0


_PAGED: dict[str, Any] = dict(
    async_load="schedule", io_path="gds", gds=True, block_factor=4, stores="step"
)
# LMCache's per-object retrieval work.  object_us: LMCache 0.5.6's own LocalCPUBackend
# calls per object (contains + pin, get_blocking, ref count down, unpin, the request's
# touch_cache), the min_us of analysis/lmcache_object.csv's lookup row (python -m
# analysis.measure_lmcache_object, 2026-12-02).  file_us: open+read+close of a tmpfs
# file (python -m analysis.lmcache_object_cost)
LMCACHE_OBJECT_US, LMCACHE_FILE_US = 4.59, 24.5
SERVING_DESIGNS.assume(
    DesignAssumption(
        "object_us", LMCACHE_OBJECT_US, LMCACHE_OBJECT_US / 2, 2 * LMCACHE_OBJECT_US,
        "LMCache 0.5.6's lookup measured on a shared 2-core VM (analysis/lmcache_object.csv); "
        "the seed ran v0.3.10 on its own Xeon: assumption, half to twice it",
    )
)  # fmt: skip
SERVING_DESIGNS.assume(
    DesignAssumption(
        "file_us", LMCACHE_FILE_US, 12.0, 49.0,
        "open+read+close of a tmpfs file measured here (24.5 us); on the seed's ext4/XFS "
        "SSD with a cold dentry cache it costs more: assumption, half to twice it",
    )
)  # fmt: skip
# LMCache keeps KV in chunks of 256 tokens whatever the engine's GPU block (``chunk_size``,
# default 256: lmcache/v1/config.py; one object, one key, per chunk); seed 004 runs
# LMCache v0.3.10 and names no chunk size, so its default
LMCACHE_CHUNK_TOKENS = 256
_LMCACHE: dict[str, Any] = dict(
    cpu_to_ssd="write_through", io_path="kernel_fs", parallel=False, dram_modules=1, ssds=1,
    object_us=LMCACHE_OBJECT_US, file_us=LMCACHE_FILE_US, chunk_tokens=LMCACHE_CHUNK_TOKENS,
)  # fmt: skip
_POOL: dict[str, Any] = {
    **_LMCACHE,
    "pool": True,
    "dram_modules": 0,
    "ssds": 0,
    "io_path": "passthrough",
    "parallel": True,
    "layerwise": True,
    "async_load": "arrival",
}

# seed 001: SSD-backed PagedAttention (capacities set by the scenario)
register("gpu-only", DesignParams)
register("paged-cpu", DesignParams, preset={**_PAGED, "cpu_gib": 1.0})
register("paged-cpu-ssd", DesignParams, preset={**_PAGED, "cpu_gib": 1.0, "ssd_gib": 64.0})
register("paged-ssd", DesignParams, preset={**_PAGED, "ssd_gib": 64.0})
# seed 004: LMCache baselines, unified KV pooling, ablations
register("lmcache", DesignParams, preset=_LMCACHE)
register("lmcache-lp", DesignParams, preset={**_LMCACHE, "layerwise": True})
register(
    "lmcache-lp-async",
    DesignParams,
    preset={**_LMCACHE, "layerwise": True, "async_load": "arrival"},
)
register("pool", DesignParams, preset=_POOL)
# seed 002's baselines: vLLM + LMCache loads a hit in the forward pass, one stream
# (``lmcache`` above); SGLang HiCache loads it back when the request is scheduled,
# layer by layer under the compute (its hierarchical GPU/host radix cache)
register("hicache", DesignParams, preset={"layerwise": True, "async_load": "schedule"})
register("pool-orchestrator-only", DesignParams, preset={**_POOL, "io_path": "kernel_fs"})
register(
    "pool-passthrough-only",
    DesignParams,
    preset={**_POOL, "pool": False, "dram_modules": 1, "ssds": 1, "parallel": False},
)
DESIGNS = SERVING_DESIGNS


def get_design(name: str, overrides: dict[str, Any] | None = None) -> DesignParams:
    """The registered design ``name`` with ``overrides`` applied and checked."""
    return SERVING_DESIGNS.params(name, overrides or {})

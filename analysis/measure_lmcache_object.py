"""Time LMCache's own CPU work per KV object (chunk) on this machine, with LMCache.

``PYTHONPATH=<lmcache>:<its deps> python -m analysis.measure_lmcache_object``
writes ``analysis/lmcache_object.csv``.  LMCache is not a kvtier dependency: the
wheel (``pip download lmcache --no-deps``; 0.5.6 on 2026-12-02, CPU-only import
with ``torch_dev=StubCPUDevice``) is unpacked with its pure-Python and CPU
dependencies (cachetools, msgspec, nvtx, prometheus_client, sortedcontainers,
blake3, numba, aiohttp, pyzmq, redis, safetensors, transformers, cryptography)
installed with ``pip install --target``; no GPU, no CUDA kernels run.

What is timed, per object of a request's retrieval, besides moving the bytes
(which kvtier charges on the data path) -- LMCache's own calls, not an
imitation:

* ``lookup``: ``LocalCPUBackend.contains(key, pin=True)`` (the lookup pass of
  the vLLM connector pins every hit), ``get_blocking(key)`` (lock, dict, ref
  count up), then ``ref_count_down()`` and ``unpin()`` once the copy is done,
  and the request's ``touch_cache()`` (the LRU update of every key it pinned)
  shared over its objects: lmcache/v1/storage_backend/local_cpu_backend.py;
* ``hash``: ``ChunkedTokenDatabase.process_tokens`` over a request's tokens
  (the chunk keys: one hash of 256 tokens per object; lmcache/v1/token_database.py),
  per object.

Objects of 256 tokens (LMCache's default ``chunk_size``), a request of
``OBJECTS`` of them (a 32K prefix); the object's tensor is one layer's K and V of
8 KV heads x 128 dims, bf16 (its size does not enter these calls).  Each cell:
``REPEATS`` timed requests after ``WARMUP``; min and median of the per-object mean.

What it cannot say: the seed (004) ran LMCache v0.3.10 with vLLM; this is v0.5.6,
whose local CPU backend makes the same calls per object (contains + pin,
get_blocking, touch_cache, ref counts); the per-object ``to_gpu`` kernel launch
needs a GPU and is not timed.  This VM is shared (its load average is in each
row), so the minimum is the cost on an unshared core.  kvtier's ``object_us``
(:mod:`sim.serving.designs`) is the ``lookup`` row's ``min_us``; the chunk
hashes are made once per chunk of a request, not per retrieved object (a
layer-wise retrieval's objects are (chunk, layer)s), and are not charged.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import statistics
import time
from pathlib import Path

OUT = Path(__file__).with_name("lmcache_object.csv")
CHUNK = 256  # tokens per object: LMCache's default chunk_size (lmcache/v1/config.py)
OBJECTS = 128  # a request of 32K tokens
REPEATS = 200
WARMUP = 20


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _setup():
    import torch
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.pin_monitor import PinMonitor
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    from lmcache.v1.token_database import ChunkedTokenDatabase

    config = LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=True)
    PinMonitor.GetOrCreate(config)  # the engine creates it at start-up (pin timeouts)
    shape = torch.Size([2, CHUNK, 8 * 128])  # K and V of one layer's chunk
    nbytes = shape.numel() * 2
    pool = torch.empty(nbytes * OBJECTS + (1 << 20), dtype=torch.uint8)
    alloc = TensorMemoryAllocator(pool)
    backend = LocalCPUBackend(config, memory_allocator=alloc)
    keys = [CacheEngineKey("m", 1, 0, h, torch.bfloat16) for h in range(OBJECTS)]
    for k in keys:
        obj = alloc.allocate(shape, torch.bfloat16)
        backend.submit_put_task(k, obj)
    # Llama-3.1-8B's KV: (K/V, layers, chunk, KV heads, head dim)
    meta = LMCacheMetadata(
        model_name="m", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=(2, 32, CHUNK, 8, 128), chunk_size=CHUNK,
    )  # fmt: skip
    db = ChunkedTokenDatabase(config, meta)
    return backend, keys, db, torch


def lookup(backend, keys) -> float:
    """Seconds for one request's objects: pin on lookup, get, release, touch."""
    t = time.perf_counter()
    for k in keys:
        backend.contains(k, pin=True)
    objs = [backend.get_blocking(k) for k in keys]
    for o in objs:
        o.ref_count_down()
        o.unpin()
    backend.touch_cache()
    return time.perf_counter() - t


def hashes(db, tokens) -> float:
    """Seconds to make one request's chunk keys."""
    t = time.perf_counter()
    for _ in db.process_tokens(tokens=tokens):
        pass
    return time.perf_counter() - t


def measure() -> list[dict]:
    backend, keys, db, torch = _setup()
    tokens = torch.randint(0, 128_000, (CHUNK * OBJECTS,), dtype=torch.long)
    rows = []
    for name, fn in (
        ("lookup", lambda: lookup(backend, keys)),
        ("hash", lambda: hashes(db, tokens)),
    ):
        for _ in range(WARMUP):
            fn()
        per = [fn() / OBJECTS * 1e6 for _ in range(REPEATS)]
        rows.append({"part": name, "min_us": min(per), "median_us": statistics.median(per)})
    import lmcache

    meta = {
        "objects": OBJECTS,
        "chunk_tokens": CHUNK,
        "repeats": REPEATS,
        "lmcache": getattr(lmcache, "__version__", "unknown"),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "loadavg_1min": f"{os.getloadavg()[0]:.2f}",
        "date": datetime.date.today().isoformat(),
    }
    return [
        {**r, "min_us": round(r["min_us"], 3), "median_us": round(r["median_us"], 3), **meta}
        for r in rows
    ]


def main() -> None:
    rows = measure()
    with OUT.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['part']}: {r['median_us']:.2f} us per object (min {r['min_us']:.2f})")


if __name__ == "__main__":
    main()

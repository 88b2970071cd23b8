"""Measure LMCache's CPU work per retrieved KV object on this machine.

``python -m analysis.lmcache_object_cost`` times, in a Python loop, what
LMCache (v0.3.x) does for every chunk object it retrieves, besides moving
the bytes (which kvtier charges on the data path):

* **lookup** (``LocalCPUBackend`` / ``LocalDiskBackend.get_blocking`` /
  ``batched_get_non_blocking``, lmcache/v1/storage_backend/): a
  ``threading.Lock`` acquire/release, a dict lookup, the LRU policy's
  ``update_on_hit`` (an ``OrderedDict.move_to_end``), a metadata read and a
  ``MemoryObj`` whose tensor is a ``view`` of a slice of the pinned buffer
  (``local_cpu_backend.allocate``); a ``ref_count_up`` under its own lock;
* **file** (``LocalDiskBackend.read_file``, disk objects only, buffered
  path): ``open(path, "rb")``, ``readinto`` of the chunk and ``close``; timed
  on a one-page file so that the per-page copy (kvtier's
  ``kernel_fs_per_io_us``) is left out: what remains is open + close + one
  read syscall on a tmpfs file.

Not measured (no GPU here): the per-object ``to_gpu`` kernel launch.  The
file figure goes, with this script named, into ``sim.serving.designs``
(``file_us``); the lookup here is an imitation, kept for comparison: the
model's ``object_us`` is LMCache's own lookup, timed by
``analysis/measure_lmcache_object.py`` (6.81 us here against LMCache's 4.59 on
the same VM, 2026-12-02).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections import OrderedDict

N = 20_000


def _best(fn, reps: int = 5) -> float:
    """Median over ``reps`` runs of the mean time per call of ``fn(N)``, in us."""
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(N)
        runs.append((time.perf_counter() - t) / N * 1e6)
    return statistics.median(runs)


def lookup_us() -> float:
    import torch

    lock, ref_lock = threading.Lock(), threading.Lock()
    chunk = 256 * 2 * 8 * 128  # one layer's K and V of a 256-token chunk, 8 KV heads
    pinned = torch.empty(chunk * 64, dtype=torch.bfloat16)
    table: OrderedDict = OrderedDict((i, (i % 64, (2, 256, 1024))) for i in range(N))
    refs = [0] * N

    def run(n: int) -> None:
        for i in range(n):
            with lock:
                slot, shape = table[i]
                table.move_to_end(i)
            t = pinned[slot * chunk : (slot + 1) * chunk].view(shape)
            with ref_lock:
                refs[i] += 1
            del t

    return _best(run)


def file_us() -> float:
    d = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        path = os.path.join(tmp, "chunk.pt")
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        buf = bytearray(4096)

        def run(n: int) -> None:
            for _ in range(n):
                with open(path, "rb") as f:
                    f.readinto(buf)

        return _best(run)


if __name__ == "__main__":
    print(f"lookup per object: {lookup_us():.2f} us")
    print(f"open + read + close per disk object (one page): {file_us():.2f} us")

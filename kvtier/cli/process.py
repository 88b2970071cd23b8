"""How a ``kvtier`` process uses the host: one BLAS thread, freed memory kept.

Two settings, both measured on the default (``make sim``; 2-core VM,
2026-12-02, perf and ``/usr/bin/time``, 3 interleaved runs each):

* **One BLAS thread.**  The simulator's matrix products are small, or spread
  over threads already (:mod:`sim.policies.swarm.cograph` runs its blocks on
  a thread pool); a threaded BLAS under them adds threads that spin for work
  between calls.  With OpenBLAS's default (one thread per core) the default
  took 29.6-33.4 CPU s, with one thread 27.4-28.4, the same summary to the
  byte.
* **Freed memory kept.**  glibc hands allocations over 128 KiB (its dynamic
  threshold, at most 32 MiB) straight to ``mmap`` and returns them on free,
  so every large numpy temporary is faulted in and zeroed again: the kernel's
  ``clear_page`` was 16.5% of the default's cycles (perf), 6 of its 30 CPU s
  in system time.  Serving allocations up to 32 MiB (glibc's ceiling for
  ``M_MMAP_THRESHOLD`` on 64-bit) from the heap and never trimming it cut
  minor faults from 207K to 149K and system time by about 2 s, at 65 MB more
  peak memory (1.63 GB).  Elsewhere than glibc (musl, macOS) nothing changes.

Neither changes a result: BLAS thread counts change no product kvtier reads
(:mod:`sim.policies.swarm.cograph` decides every pair exactly), and the
allocator decides only where memory comes from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from contextlib import AbstractContextManager

from threadpoolctl import threadpool_limits

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
TRIM_THRESHOLD = (1 << 31) - 1  # an int: never trim the heap in practice


def keep_freed_memory() -> bool:
    """glibc's allocator keeps freed blocks up to 32 MiB for reuse (module doc);
    whether it was set (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def one_blas_thread() -> AbstractContextManager[object]:
    """BLAS on one thread for the ``with`` block (module doc)."""
    return threadpool_limits(limits=1, user_api="blas")

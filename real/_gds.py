"""GPUDirect Storage reads through kvikio (cuFile), where a CUDA GPU and kvikio exist.

:func:`gds_status` says whether plan ops with ``io_path='gds'`` can read
straight into GPU memory here, and if not, why (one line).  A
:class:`GdsReader` serves the thread engine: each read lands in a per-thread
GPU buffer through ``kvikio.CuFile.pread`` and is then copied to the host slot
so the replayer verifies it like any other read (the copy is inside the op's
measured time; it is small next to the SSD read at PCIe rates).  Where kvikio
runs in its POSIX compatibility mode (no cuFile driver) the note says so: the
data still reaches the GPU, but not by DMA from the SSD.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path


@functools.cache
def gds_status() -> tuple[bool, str]:
    """(usable, why) for GPUDirect Storage reads via kvikio."""
    try:
        import cupy
        import kvikio
        import kvikio.defaults
    except ImportError as exc:
        return False, f"GPUDirect Storage needs kvikio and cupy ({exc.name} is not installed)"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any CUDA failure means "no GPU here"
        return False, f"no usable CUDA device ({type(exc).__name__}: {exc})"
    if n == 0:
        return False, "no CUDA device"
    compat = bool(kvikio.defaults.compat_mode())
    how = " in POSIX compatibility mode (no cuFile driver: not true GDS)" if compat else ""
    return True, f"GPUDirect Storage via kvikio {kvikio.__version__}{how}"


class GdsReader:
    """Reads ``fd`` ranges of the given files into GPU memory, then into host buffers."""

    def __init__(self, paths: dict[int, str]) -> None:
        import kvikio

        self._files = {fd: kvikio.CuFile(Path(p), "r") for fd, p in paths.items()}
        self._local = threading.local()

    def read(self, fd: int, buf: memoryview, offset: int) -> int:
        import cupy
        import numpy as np

        dev = getattr(self._local, "buf", None)
        if dev is None or dev.size < len(buf):
            dev = self._local.buf = cupy.empty(len(buf), dtype=cupy.uint8)
        n = int(self._files[fd].pread(dev[: len(buf)], len(buf), offset).get())
        dev[:n].get(out=np.frombuffer(buf, dtype=np.uint8)[:n])
        return n

    def close(self) -> None:
        for f in self._files.values():
            f.close()

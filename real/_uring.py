"""A small ring over the ``liburing`` Python binding, and a safe probe of it.

The replayer needs five things from io_uring: queue a read or write
of one buffer with a 64-bit tag, submit the batch, wait (with a timeout) for at
least one completion, drain every ready completion, and close.  Two generations
of the binding expose them differently, so each gets a thin adapter:

* ``liburing`` 2026.x (Zig): ``Ring``, ``Iovec([buf])``, ``CqeIter`` +
  ``io_uring_cq_advance``; its wheel is built for recent CPUs (it executes
  AVX-512 instructions, so it dies with SIGILL on an AVX2-only CPU) and asks
  for Linux 6.14+;
* ``liburing`` 2024.x (Cython): ``io_uring``, ``iovec(buf)``,
  ``io_uring_peek_cqe`` + ``io_uring_cqe_seen``; runs on any x86-64 and on
  the 5.x kernels of GPU servers.

A binding that crashes the interpreter cannot be caught with ``try``, so
:func:`probe` first checks the kernel and then runs a read/write round trip
through :func:`open_ring` in a child process; the replayer uses io_uring only
when that child exits cleanly, and otherwise says why (one line).
"""

from __future__ import annotations

import errno
import functools
import importlib.metadata
import mmap
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

_QUIET = (errno.ETIME, errno.EINTR, errno.EAGAIN, errno.EBUSY)


class Ring(Protocol):
    def queue(self, tag: int, fd: int, write: bool, buf: memoryview, offset: int, flags: int):
        """Add one readv/writev to the submission queue (not yet submitted)."""

    def submit(self) -> None: ...

    def wait(self, timeout: float | None) -> list[tuple[int, int]]:
        """Block until a completion or ``timeout`` seconds; return all ready (tag, result)."""

    def close(self) -> None: ...


def binding_version() -> str | None:
    try:
        return importlib.metadata.version("liburing")
    except importlib.metadata.PackageNotFoundError:
        return None


def open_ring(entries: int) -> Ring:
    import liburing

    return _ZigRing(entries) if hasattr(liburing, "Ring") else _CythonRing(entries)


def async_flag() -> int:
    """IOSQE_ASYNC: punt to io-wq at once (rings against kernel-throttled devices)."""
    import liburing

    return int(getattr(liburing, "IOSQE_ASYNC", 1 << 4))  # 2024.x keeps it in a .pxd


class _ZigRing:
    def __init__(self, entries: int) -> None:
        import liburing as lu

        self._lu = lu
        self._ring = lu.Ring()
        lu.io_uring_queue_init(entries, self._ring)
        self._cqe = lu.Cqe()
        self._iov: dict[int, object] = {}

    def queue(self, tag, fd, write, buf, offset, flags):
        lu = self._lu
        sqe = lu.io_uring_get_sqe(self._ring)
        if sqe is None:
            raise RuntimeError("io_uring submission queue is full")
        iov = lu.Iovec([buf])
        (lu.io_uring_prep_writev if write else lu.io_uring_prep_readv)(sqe, fd, iov, offset)
        if flags:
            lu.io_uring_sqe_set_flags(sqe, flags)
        lu.io_uring_sqe_set_data64(sqe, tag)
        self._iov[tag] = iov  # the kernel reads the iovec array until completion

    def submit(self) -> None:
        self._lu.io_uring_submit(self._ring)

    def wait(self, timeout):
        lu, out = self._lu, []
        try:
            if timeout is None:
                lu.io_uring_wait_cqe(self._ring, self._cqe)
            elif timeout > 0:
                lu.io_uring_wait_cqe_timeout(self._ring, self._cqe, lu.timespec(timeout))
        except OSError as exc:
            if exc.errno not in _QUIET:
                raise
        n = 0
        for _ in lu.CqeIter(self._ring, self._cqe):
            entry = self._cqe[0]
            out.append((entry.user_data, entry.res))
            n += 1
        if n:
            lu.io_uring_cq_advance(self._ring, n)
        for tag, _ in out:
            self._iov.pop(tag, None)
        return out

    def close(self) -> None:
        self._lu.io_uring_queue_exit(self._ring)


class _CythonRing:
    def __init__(self, entries: int) -> None:
        import liburing as lu

        self._lu = lu
        self._ring = lu.io_uring()
        lu.io_uring_queue_init(entries, self._ring, 0)
        self._cqe = lu.io_uring_cqe()
        self._get_sqe, self._set_flags = lu.io_uring_get_sqe, lu.io_uring_sqe_set_flags
        self._prep_read, self._prep_write = lu.io_uring_prep_read, lu.io_uring_prep_write
        self._set_data = lu.io_uring_sqe_set_data64

    def queue(self, tag, fd, write, buf, offset, flags):
        sqe = self._get_sqe(self._ring)
        if not sqe:
            raise RuntimeError("io_uring submission queue is full")
        # plain read/write of one buffer: the kernel takes its address from the SQE, so
        # no iovec object has to live until completion (one Python object less per I/O)
        (self._prep_write if write else self._prep_read)(sqe, fd, buf, len(buf), offset)
        if flags:
            self._set_flags(sqe, flags)
        self._set_data(sqe, tag)

    def submit(self) -> None:
        self._lu.io_uring_submit(self._ring)

    def wait(self, timeout):
        lu, ring, cqe = self._lu, self._ring, self._cqe
        try:
            if timeout is None:
                lu.io_uring_wait_cqe(ring, cqe)  # returns -errno; EINTR is fine
            elif timeout > 0:
                lu.io_uring_wait_cqe_timeout(ring, cqe, lu.timespec(timeout))
        except OSError as exc:
            if exc.errno not in _QUIET:
                raise
        out = []
        while lu.io_uring_peek_cqe(ring, cqe) == 0:
            out.append((cqe.user_data, cqe.res))
            lu.io_uring_cqe_seen(ring, cqe)
        return out

    def close(self) -> None:
        self._lu.io_uring_queue_exit(self._ring)


# ---- can we use it here? ---------------------------------------------------------------------
def kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return 0, 0


@functools.cache
def probe() -> tuple[bool, str]:
    """(usable, why): whether io_uring works here through the installed binding."""
    version = binding_version()
    if version is None:
        return False, "the liburing Python binding is not installed (pip install 'kvtier[real]')"
    try:
        disabled = Path("/proc/sys/kernel/io_uring_disabled").read_text().strip()
    except OSError:
        disabled = "0"
    if disabled == "2":
        return False, "io_uring is disabled on this kernel (kernel.io_uring_disabled=2)"
    kernel = kernel_version()
    if version.startswith("2026") and kernel < (6, 14):
        return False, f"liburing {version} needs Linux 6.14+, this kernel is {platform.release()}"
    root = str(Path(__file__).resolve().parent.parent)
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from real._uring import _self_test; _self_test()"
    )
    # twice at most: a child that fails by exiting (not by a signal) may have lost a race
    # with another process importing the binding at the same moment (a test worker
    # replacing liburing's __pycache__ entry: FileNotFoundError on its .pyc); a binding
    # or kernel that cannot do io_uring fails both times
    for _ in range(2):
        try:
            child = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"the io_uring self-test could not run: {exc}"
        if child.returncode <= 0:
            break
    if child.returncode < 0:
        sig = signal.Signals(-child.returncode).name
        hint = (
            " (its wheel uses CPU instructions this CPU lacks, e.g. AVX-512;"
            " liburing 2024.5.3 runs on any x86-64)"
            if sig == "SIGILL"
            else ""
        )
        return False, f"the liburing {version} binding crashed with {sig}{hint}"
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"io_uring self-test failed with liburing {version}: {last}"
    return True, f"io_uring via liburing {version} on Linux {platform.release()}"


def _self_test() -> None:  # pragma: no cover - runs in the probe's child process
    """Write a block through the ring, read it back, compare; exit 0 when all is well."""
    ring = open_ring(8)
    with tempfile.TemporaryFile() as fh:
        fd = fh.fileno()
        src, dst = mmap.mmap(-1, 4096), mmap.mmap(-1, 4096)
        src[:] = os.urandom(4096)
        ring.queue(1, fd, True, memoryview(src), 0, 0)
        ring.submit()
        done = ring.wait(5.0)
        assert done == [(1, 4096)], f"write completion {done}"
        ring.queue(2, fd, False, memoryview(dst), 0, async_flag())
        ring.submit()
        done = ring.wait(5.0)
        assert done == [(2, 4096)], f"read completion {done}"
        assert src[:] == dst[:], "read back different data"
    ring.close()

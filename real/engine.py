"""I/O engines of the replayer: io_uring, a thread pool, and GPUDirect Storage reads.

An engine moves bytes and nothing else; the scheduler (:mod:`real.scheduler`)
decides what is in flight.  Every engine has the same four calls::

    queue(tag, fd, write, buf, offset, flags)   # one readv/writev of one buffer
    submit()                                    # hand the queued batch over
    wait(timeout) -> [(tag, result), ...]       # >= 1 completion, or [] at timeout
    close()

``result`` is the byte count or ``-errno``, as in a CQE.

* :class:`RawEngine`: one raw ring for all devices (:mod:`real._rawring`).
  :meth:`~RawEngine.prime` gives every in-flight buffer slot its own SQE for
  good (descriptor, buffer, tag; descriptors and buffer arenas registered with
  the kernel where it allows), so a device's share of a round is its geometry
  written into those SQEs and one ``push_slots``; one ``io_uring_enter`` per
  round submits and waits; ``wait`` returns ``(tags, results)`` arrays.
  ``uring``/``auto`` pick it first.
* :class:`UringEngine` (``liburing``, or the fallback when the raw ring cannot be
  set up, with the reason in the note): one ring over the liburing binding
  (:mod:`real._uring`); a batch
  is one ``io_uring_submit``; completions are drained in bulk.
* :class:`ThreadEngine`: ``os.preadv``/``os.pwritev`` on a pool with one
  worker per in-flight slot, completions posted to a queue; for kernels or
  CPUs where the io_uring binding does not work.
* GPUDirect Storage: with ``flags & GDS`` a thread-engine read goes through
  kvikio into GPU memory (:mod:`real._gds`) and is copied back for
  verification.

:func:`make_engine` picks one: ``uring`` (or a :class:`RealError` saying why
not), ``threads``, or ``auto`` = io_uring where its probe passes, else threads
with a one-line note saying why.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import queue
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from real import _gds, _rawring, _uring
from real.errors import RealError

ENGINES = ("auto", "uring", "liburing", "threads")
REPLAY_ENGINES = ("auto", "fio", "python", *ENGINES[1:])  # real.replay.replay's choices
TMPFS_MAGIC = 0x01021994  # statfs f_type of tmpfs / shmem (linux/magic.h)
_libc = ctypes.CDLL(None, use_errno=True)
GDS = 1 << 30  # engine flag: read into GPU memory (not an io_uring flag)
MAX_THREADS = 256


class Engine(Protocol):
    name: str

    def queue(
        self, tag: int, fd: int, write: bool, buf: memoryview, offset: int, flags: int
    ) -> None: ...

    def submit(self) -> None: ...

    def wait(self, timeout: float | None) -> list[tuple[int, int]]: ...

    def close(self) -> None: ...


class UringEngine:
    """All devices share one ring sized to the total in-flight slots."""

    name = "io_uring"

    def __init__(self, slots: int) -> None:
        entries = 1 << max(3, (max(1, slots) - 1).bit_length())
        self._ring = _uring.open_ring(min(entries, 32768))
        self.async_flag = _uring.async_flag()
        self.queue = self._ring.queue  # one call less per I/O

    def queue(self, tag, fd, write, buf, offset, flags):  # replaced per instance above
        self._ring.queue(tag, fd, write, buf, offset, flags)

    def submit(self) -> None:
        self._ring.submit()

    def wait(self, timeout):
        return self._ring.wait(timeout)

    def close(self) -> None:
        self._ring.close()


class RawEngine:
    """All devices share one raw ring (:mod:`real._rawring`), driven a batch at a time.

    Instead of ``queue`` per I/O the scheduler hands a device's share of a round
    over as arrays: :meth:`push` writes whole SQEs; after :meth:`prime` (one SQE
    per in-flight buffer slot, its descriptor, buffer, flags and tag written
    once) :meth:`push_slots` rewrites only offset, length and opcode.
    :meth:`submit` is deferred to :meth:`wait`, so one ``io_uring_enter`` both
    submits a round and waits for its first completion; :meth:`wait` returns
    ``(tags, results)`` as two arrays.
    """

    name = "io_uring"
    batched = True
    async_flag = _rawring.IOSQE_ASYNC

    def __init__(self, slots: int) -> None:
        entries = 1 << max(3, (max(1, slots) - 1).bit_length())
        self._ring = _rawring.RawRing(min(entries, 32768))
        self.sq_off = self.sq_len = self._sq_op = None

    def prime(self, dev: np.ndarray, fds: list[int], spans, addrs, flags) -> bool:
        """Fix SQE ``g`` to slot ``g`` (tag ``g + 1``); False when the ring has too few SQEs.

        ``dev[g]``: the slot's device, whose descriptor is ``fds[dev]`` and whose
        buffer arena is ``spans[dev]`` = (address, bytes); ``addrs[g]``, ``flags[g]``:
        the slot's buffer and SQE flags.  The descriptors are registered (SQEs name
        them by index, ``IOSQE_FIXED_FILE``) and so are the arenas (reads and
        writes become ``READ_FIXED``/``WRITE_FIXED`` of buffer ``dev``), each where
        the kernel allows it; :attr:`fixed` says which.  Afterwards ``sq_off``/
        ``sq_len`` are the SQEs' offset and length fields by slot: the scheduler
        writes an I/O's geometry straight into its SQE.
        """
        ring, n = self._ring, len(dev)
        if n > ring.sq_n:
            return False
        sq = ring.sqes[:n]
        sq["fd"], sq["flags"] = np.asarray(fds)[dev], flags
        self.fixed = []
        with contextlib.suppress(OSError):
            ring.register_files(list(fds))
            sq["fd"], sq["flags"] = dev, flags | _rawring.IOSQE_FIXED_FILE
            self.fixed.append("files")
        self._ops = (_rawring.OP_READ, _rawring.OP_WRITE)
        if all(size <= _rawring.MAX_FIXED_BUFFER for _, size in spans):
            with contextlib.suppress(OSError):
                ring.register_buffers(list(spans))
                sq["buf_index"] = dev
                self._ops = (_rawring.OP_READ_FIXED, _rawring.OP_WRITE_FIXED)
                self.fixed.append("buffers")
        sq["opcode"], sq["addr"] = self._ops[0], addrs
        sq["user_data"] = np.arange(1, n + 1, dtype=np.uint64)
        self.sq_off, self.sq_len, self._sq_op = sq["off"], sq["len"], sq["opcode"]
        return True

    def push_slots(self, g: np.ndarray, write) -> None:
        """Queue primed slots ``g`` (geometry already in ``sq_off``/``sq_len``); ``write``
        is None when all are reads, else a mask."""
        if write is not None:
            self._sq_op[g] = np.where(write, self._ops[1], self._ops[0])
        self._ring.push_idx(g)

    def push(self, fd, write, flags, offs, addrs, lens, tags) -> None:
        if isinstance(write, np.ndarray):
            op = (
                np.where(write, _rawring.OP_WRITE, _rawring.OP_READ)
                if write.any()
                else _rawring.OP_READ
            )
        else:
            op = _rawring.OP_WRITE if write else _rawring.OP_READ
        self._ring.push(op, flags, fd, offs, addrs, lens, tags)

    def submit(self) -> None:
        """Nothing once primed (:meth:`wait` submits; one SQE per slot cannot overflow),
        else submit when the SQ is half full."""
        if self.sq_off is None and self._ring.pending > self._ring.sq_n // 2:
            self._ring.enter(0)

    def wait(self, timeout):
        """Submit what was pushed, wait for one completion (or ``timeout``), reap them all."""
        ring = self._ring
        if ring.pending or timeout is None or timeout > 0:
            ring.enter(1, timeout)
        return ring.reap()

    def close(self) -> None:
        self._ring.close()


class ThreadEngine:
    """Synchronous ``preadv``/``pwritev`` on a pool: same semantics, no io_uring."""

    name = "threads"
    async_flag = 0

    def __init__(self, slots: int, gds: _gds.GdsReader | None = None) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(slots, MAX_THREADS)), thread_name_prefix="kvtier-io"
        )
        self._done: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._batch: list[tuple] = []
        self._gds = gds

    def queue(self, tag, fd, write, buf, offset, flags):
        self._batch.append((tag, fd, write, buf, offset, flags))

    def submit(self) -> None:
        for args in self._batch:
            self._pool.submit(self._run, *args)
        self._batch.clear()

    def _run(self, tag, fd, write, buf, offset, flags) -> None:
        try:
            if flags & GDS and self._gds is not None:
                n = self._gds.read(fd, buf, offset)
            elif write:
                n = os.pwritev(fd, [buf], offset)
            else:
                n = os.preadv(fd, [buf], offset)
        except OSError as exc:
            n = -(exc.errno or errno.EIO)
        self._done.put((tag, n))

    def wait(self, timeout):
        try:
            if timeout is None:
                first = self._done.get()
            elif timeout > 0:
                first = self._done.get(timeout=timeout)
            else:
                first = self._done.get_nowait()
        except queue.Empty:
            return []
        out = [first]
        try:
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def on_tmpfs(fd: int) -> bool:
    """Whether ``fd`` is a file on tmpfs (``fstatfs``), whose O_DIRECT reads io_uring
    serves from its io-wq workers anyway: issued with ``IOSQE_ASYNC`` they skip the
    inline attempt, which measured 1.4-1.6 us of the submitting thread's system time
    per 4 KiB read against 0.4-0.6 us (and 2-4x the IOPS at QD 128) on a 6.18 kernel."""
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first long
    if _libc.fstatfs(fd, buf) != 0:
        return False
    return struct.unpack_from("l", buf)[0] == TMPFS_MAGIC


def make_engine(name: str, slots: int, gds: _gds.GdsReader | None = None) -> tuple[Engine, str]:
    """An engine for ``slots`` in-flight I/Os, and a one-line note on the choice.

    GPUDirect reads (``gds``) need the thread engine, so they make ``auto`` pick it.
    """
    if name not in ENGINES:
        raise RealError(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")
    if name == "threads":
        return ThreadEngine(slots, gds), "thread-pool preadv/pwritev engine (as requested)"
    if gds is None and name in ("auto", "uring"):
        ok, why = _rawring.available()
        if ok:
            return RawEngine(slots), why
        raw_why = f"raw io_uring ring unavailable ({why}); "
    else:
        raw_why = ""
    ok, why = _uring.probe()
    if gds is not None:
        if name == "uring":
            raise RealError("GPUDirect Storage reads need --engine threads or auto")
        return ThreadEngine(slots, gds), "thread-pool engine: GPUDirect Storage reads use kvikio"
    if ok:
        return UringEngine(slots), raw_why + why
    if name in ("uring", "liburing"):
        raise RealError(f"io_uring is not usable here: {why}")
    return ThreadEngine(slots), f"io_uring unavailable ({why}); using the thread-pool preadv engine"

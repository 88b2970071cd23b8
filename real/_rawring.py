"""An io_uring driven a batch at a time: raw syscalls, the rings as numpy views.

The liburing Python bindings cost about 4 us of Python per I/O (get_sqe, prep,
set_data per SQE; peek and seen per CQE).  This ring has no per-I/O Python at
all: :meth:`RawRing.push` writes N submission entries with a handful of
vectorised numpy stores into the mmap'ed SQE array, :meth:`RawRing.enter`
submits them and waits in one ``io_uring_enter``, and :meth:`RawRing.reap`
copies every ready completion out of the CQ ring as two arrays.

Layout (``linux/io_uring.h``): ``io_uring_setup`` fills ``io_uring_params``
with the offsets of head, tail, mask and entry array inside the SQ and CQ
rings, which are mmap'ed from the ring's descriptor at ``IORING_OFF_SQ_RING``
(one mapping for both rings when the kernel has ``IORING_FEAT_SINGLE_MMAP``)
and ``IORING_OFF_SQES``.  The SQ index array is set once to the identity, so
the SQE of ring position ``p`` is entry ``p & mask``.

Memory order: the kernel reads the SQ tail with acquire semantics and publishes
the CQ tail with release semantics; user space must store the SQEs before the
tail, and load the CQ tail before the CQEs.  On x86-64 (total store order, no
load-load reordering) plain stores and loads in program order give exactly
that, and every numpy store here is a separate C call, so nothing is reordered
across it.  Other architectures would need explicit fences: :func:`available`
refuses them, and the replayer falls back to the liburing binding.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
from pathlib import Path

import numpy as np

SYS_SETUP, SYS_ENTER, SYS_REGISTER = 425, 426, 427  # same on x86-64 and aarch64
REGISTER_BUFFERS, REGISTER_FILES = 0, 2
OP_READ_FIXED, OP_WRITE_FIXED = 4, 5
IOSQE_FIXED_FILE = 1 << 0
MAX_FIXED_BUFFER = 1 << 30  # the kernel's limit on one registered buffer
OFF_SQ_RING, OFF_CQ_RING, OFF_SQES = 0, 0x8000000, 0x10000000
FEAT_SINGLE_MMAP, FEAT_EXT_ARG = 1 << 0, 1 << 8
ENTER_GETEVENTS, ENTER_EXT_ARG = 1 << 0, 1 << 3
OP_READ, OP_WRITE = 22, 23
IOSQE_ASYNC = 1 << 4

SQE = np.dtype(
    [
        ("opcode", "u1"),
        ("flags", "u1"),
        ("ioprio", "<u2"),
        ("fd", "<i4"),
        ("off", "<u8"),
        ("addr", "<u8"),
        ("len", "<u4"),
        ("rw_flags", "<u4"),
        ("user_data", "<u8"),
        ("buf_index", "<u2"),
        ("personality", "<u2"),
        ("file_index", "<i4"),
        ("rest", "V16"),
    ]
)
CQE = np.dtype([("user_data", "<u8"), ("res", "<i4"), ("flags", "<u4")])
assert SQE.itemsize == 64 and CQE.itemsize == 16


class _SqOff(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("head", "tail", "mask", "entries", "flags")] + [
        ("dropped", ctypes.c_uint32),
        ("array", ctypes.c_uint32),
        ("resv1", ctypes.c_uint32),
        ("user_addr", ctypes.c_uint64),
    ]


class _CqOff(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("head", "tail", "mask", "entries")] + [
        ("overflow", ctypes.c_uint32),
        ("cqes", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("resv1", ctypes.c_uint32),
        ("user_addr", ctypes.c_uint64),
    ]


class _Params(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint32)
        for n in ("sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle")
    ] + [
        ("features", ctypes.c_uint32),
        ("wq_fd", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 3),
        ("sq_off", _SqOff),
        ("cq_off", _CqOff),
    ]


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int64), ("nsec", ctypes.c_int64)]


class _GeteventsArg(ctypes.Structure):
    _fields_ = [
        ("sigmask", ctypes.c_uint64),
        ("sigmask_sz", ctypes.c_uint32),
        ("min_wait_usec", ctypes.c_uint32),
        ("ts", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# io_uring_enter(fd, to_submit, min_complete, flags, arg, argsz) through syscall(2) with
# a fixed prototype: ctypes converts plain ints with no per-call wrapper objects
_enter = ctypes.CFUNCTYPE(
    ctypes.c_long,
    ctypes.c_long,
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_uint,
    ctypes.c_void_p,
    ctypes.c_size_t,
    use_errno=True,
)(("syscall", _libc))


def available() -> tuple[bool, str]:
    """(usable, why not): whether this machine can run :class:`RawRing`."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False, f"the raw ring relies on x86-64 memory order, this is {platform.machine()}"
    try:
        if Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() == "2":
            return False, "io_uring is disabled on this kernel (kernel.io_uring_disabled=2)"
    except OSError:
        pass
    try:
        RawRing(8).close()
    except OSError as exc:
        return False, f"io_uring_setup failed: {exc.strerror}"
    return True, "raw io_uring ring (batched numpy SQEs/CQEs)"


class RawRing:
    """One io_uring of ``entries`` SQEs (CQ twice that); see the module docstring."""

    def __init__(self, entries: int) -> None:
        p = _Params()
        fd = _syscall(SYS_SETUP, ctypes.c_uint(entries), ctypes.byref(p))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd = int(fd)
        self._maps: list[mmap.mmap] = []
        try:
            self._map_rings(p)
        except BaseException:
            self.close()
            raise
        self.ext_arg = bool(p.features & FEAT_EXT_ARG)
        self._ts = _Timespec()
        self._arg = _GeteventsArg(0, 0, 0, ctypes.addressof(self._ts))
        self._argp = ctypes.addressof(self._arg)
        self.pending = 0  # pushed, not yet submitted

    def _map_rings(self, p: _Params) -> None:
        sq_size = p.sq_off.array + p.sq_entries * 4
        cq_size = p.cq_off.cqes + p.cq_entries * CQE.itemsize
        rw = mmap.PROT_READ | mmap.PROT_WRITE
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        if p.features & FEAT_SINGLE_MMAP:
            sq = cq = mmap.mmap(self.fd, max(sq_size, cq_size), flags, rw, offset=OFF_SQ_RING)
            self._maps.append(sq)
        else:
            sq = mmap.mmap(self.fd, sq_size, flags, rw, offset=OFF_SQ_RING)
            cq = mmap.mmap(self.fd, cq_size, flags, rw, offset=OFF_CQ_RING)
            self._maps += [sq, cq]
        sqes = mmap.mmap(self.fd, p.sq_entries * SQE.itemsize, flags, rw, offset=OFF_SQES)
        self._maps.append(sqes)
        sq32, cq32 = np.frombuffer(sq, np.uint32), np.frombuffer(cq, np.uint32)
        self.sq_n, self.cq_n = int(p.sq_entries), int(p.cq_entries)
        self._sq_head, self._sq_tail = sq32[p.sq_off.head // 4 :], sq32[p.sq_off.tail // 4 :]
        self._cq_head, self._cq_tail = cq32[p.cq_off.head // 4 :], cq32[p.cq_off.tail // 4 :]
        self._array = sq32[p.sq_off.array // 4 : p.sq_off.array // 4 + self.sq_n]
        self._array[:] = np.arange(self.sq_n)
        self.sqes = np.frombuffer(sqes, SQE)
        self.sqes.view(np.uint8)[:] = 0  # fields never set below stay 0 for good
        self.cqes = np.frombuffer(cq, CQE, self.cq_n, p.cq_off.cqes)
        self._cq_ud = self.cqes["user_data"].view(np.int64)  # strided views: reap copies
        self._cq_res = self.cqes["res"]
        self._tail = int(self._sq_tail[0])

    def register_buffers(self, spans: list[tuple[int, int]]) -> None:
        """Register ``(address, bytes)`` buffers: buffer ``i`` is ``buf_index`` i of
        ``OP_READ_FIXED``/``OP_WRITE_FIXED``, pinned once instead of per I/O."""
        vecs = (_Iovec * len(spans))(*[_Iovec(a, n) for a, n in spans])
        self._register(REGISTER_BUFFERS, ctypes.byref(vecs), len(spans))

    def register_files(self, fds: list[int]) -> None:
        """Register descriptors: with ``IOSQE_FIXED_FILE`` an SQE's fd is an index here."""
        arr = (ctypes.c_int * len(fds))(*fds)
        self._register(REGISTER_FILES, ctypes.byref(arr), len(fds))

    def _register(self, opcode: int, arg, n: int) -> None:
        r = _syscall(
            SYS_REGISTER, ctypes.c_uint(self.fd), ctypes.c_uint(opcode), arg, ctypes.c_uint(n)
        )
        if r < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"io_uring_register: {os.strerror(err)}")

    def space(self) -> int:
        """SQEs that can be pushed now."""
        return self.sq_n - (self._tail - int(self._sq_head[0])) % (1 << 32)

    def push(self, opcode, flags, fd, off, addr, length, user_data) -> None:
        """Queue ``len(off)`` SQEs (arrays or scalars, broadcast); published, not submitted."""
        n = len(off)
        if n > self.space():
            raise RuntimeError(f"io_uring submission queue is full ({n} > {self.space()})")
        start = self._tail % self.sq_n
        cut = min(n, self.sq_n - start)
        for lo, hi, a, b in ((0, cut, start, start + cut), (cut, n, 0, n - cut)):
            if hi <= lo:
                continue
            s = self.sqes[a:b]
            self._array[a:b] = np.arange(a, b, dtype=np.uint32)  # push_idx may have changed it
            for name, v in (
                ("opcode", opcode),
                ("flags", flags),
                ("fd", fd),
                ("off", off),
                ("addr", addr),
                ("len", length),
                ("user_data", user_data),
            ):
                s[name] = v[lo:hi] if isinstance(v, np.ndarray) else v
        self._tail = (self._tail + n) % (1 << 32)
        self._sq_tail[0] = self._tail  # after the SQE stores: see the module docstring
        self.pending += n

    def push_idx(self, idx: np.ndarray) -> None:
        """Queue the SQEs already written at entries ``idx`` (through the SQ index array).

        An SQE is read by the kernel when it is submitted, so entry ``s`` may be
        rewritten once the I/O it described has been submitted; the replayer
        keeps SQE ``s`` for buffer slot ``s`` and rewrites only offset and length.
        """
        n = len(idx)
        start = self._tail % self.sq_n
        cut = min(n, self.sq_n - start)
        self._array[start : start + cut] = idx[:cut]
        if cut < n:
            self._array[: n - cut] = idx[cut:]
        self._tail = (self._tail + n) % (1 << 32)
        self._sq_tail[0] = self._tail  # after the index stores: see the module docstring
        self.pending += n

    def enter(self, wait: int = 0, timeout: float | None = None) -> None:
        """Submit what was pushed and wait for ``wait`` completions (or ``timeout`` s)."""
        flags, arg, argsz = 0, None, 0
        if wait:
            flags = ENTER_GETEVENTS
            if timeout is not None and self.ext_arg:
                self._ts.sec = int(timeout)
                self._ts.nsec = int((timeout - int(timeout)) * 1e9)
                flags |= ENTER_EXT_ARG
                arg, argsz = self._argp, ctypes.sizeof(self._arg)
        while True:
            r = _enter(SYS_ENTER, self.fd, self.pending, wait, flags, arg, argsz)
            if r >= 0:
                self.pending -= r
                if self.pending == 0 or wait:
                    return
                continue
            err = ctypes.get_errno()
            if err in (errno.ETIME, errno.EINTR, errno.EAGAIN, errno.EBUSY):
                return
            raise OSError(err, f"io_uring_enter: {os.strerror(err)}")

    def reap(self) -> tuple[np.ndarray, np.ndarray]:
        """(user_data, res) of every ready completion, in order, as int64 and int32 arrays
        (copies: the CQ head is advanced and the kernel may reuse the entries)."""
        head, tail = int(self._cq_head[0]), int(self._cq_tail[0])
        n = (tail - head) % (1 << 32)
        a = head % self.cq_n
        if a + n <= self.cq_n:
            ud, res = self._cq_ud[a : a + n].copy(), self._cq_res[a : a + n].copy()
        else:
            b = a + n - self.cq_n
            ud = np.concatenate([self._cq_ud[a:], self._cq_ud[:b]])
            res = np.concatenate([self._cq_res[a:], self._cq_res[:b]])
        self._cq_head[0] = tail  # after the copies: the kernel may reuse the entries
        return ud, res

    def close(self) -> None:
        """Unmap and close (idempotent); every I/O must have completed or been abandoned."""
        self.sqes = self.cqes = self._cq_ud = self._cq_res = None  # type: ignore[assignment]
        self._sq_head = self._sq_tail = self._cq_head = self._cq_tail = None  # type: ignore
        self._array = None  # type: ignore[assignment]
        for m in self._maps:
            with contextlib.suppress(BufferError):  # a view still held: unmapped at exit
                m.close()
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

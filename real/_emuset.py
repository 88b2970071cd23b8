"""One set of emulated SSDs as it lives on the machine: its backing files, loop
devices and blkio cgroup, and their removal.

:class:`EmulatedSet` is a context manager; leaving it -- normally, by an
exception or a signal (:mod:`real._signals`) -- detaches the loop devices,
removes the cgroup and deletes the files, each registered in
:data:`real.cleanup.REGISTRY` as it is made.  It never touches loop devices or
cgroups it did not create.

The backing files are checked for space (:func:`check_space`) and allocated
(:func:`allocate`; written through when they must reach a disk, which
:func:`in_memory` tells apart from tmpfs).  :mod:`real.emulate` builds and
scales the set.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from hwprofiles.schema import HardwareProfile
from real import blkio
from real._signals import phase
from real.capacity import Rates
from real.cleanup import REGISTRY
from real.errors import RealError
from real.targets import Target


class EmulatedSet:
    """The emulated devices of one :func:`emulate` call; close (or leave ``with``) to remove.

    ``targets``: one :class:`Target` per SSD node, in node order.
    ``profile`` / ``profile_path``: the scaled profile, as loaded from its YAML.
    ``scale``: the factor applied to the source's bandwidth and IOPS.
    ``mode``: ``throttle`` (kernel limits, loop devices) or ``pacing``.
    ``cgroup``: the blkio group to join (None when pacing).
    ``sustainable``: measured rates of the backing store (None if ``scale`` was given).
    ``note``: one line describing the set (printed by the CLI).
    """

    def __init__(self, workdir: Path, source: HardwareProfile, mode: str) -> None:
        self.workdir = workdir
        self.source = source
        self.mode = mode
        self.targets: tuple[Target, ...] = ()
        self.profile: HardwareProfile | None = None
        self.profile_path: Path | None = None
        self.scale = 1.0
        self.sustainable: Rates | None = None
        self.replayer_iops: float | None = None  # the replayer's ceiling the scale obeys
        self.note = ""
        self.group: blkio.ThrottleGroup | None = None
        self.loops: list[tuple[str, Path]] = []
        self.closed = False
        atexit.register(self.close)

    @property
    def cgroup(self) -> Path | None:
        return self.group.path if self.group else None

    def join(self, pid: int | None = None) -> None:
        """Put process ``pid`` (default: this one) under the devices' limits."""
        if self.group is not None:
            self.group.join(pid)

    def leave(self, pid: int | None = None) -> None:
        if self.group is not None:
            self.group.leave(pid)

    @contextlib.contextmanager
    def joined(self, pid: int | None = None) -> Iterator[EmulatedSet]:
        """``with es.joined():`` -- this process is throttled inside the block."""
        self.join(pid)
        try:
            yield self
        finally:
            self.leave(pid)

    def close(self) -> None:
        """Detach the loop devices, remove the cgroup, delete the files (idempotent)."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        problems = []
        if self.group is not None:
            try:
                self.group.remove()
            except RealError as exc:
                problems.append(str(exc))
        for dev, backing in reversed(self.loops):
            blkio.loop_detach(dev, backing)
        shutil.rmtree(self.workdir, ignore_errors=True)
        REGISTRY.forget("tree", path=str(self.workdir))
        if problems:
            raise RealError("; ".join(problems))

    def __enter__(self) -> EmulatedSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_space(where: Path, need: int) -> None:
    try:
        st = os.statvfs(where)
    except OSError as exc:
        raise RealError(f"{where}: {exc.strerror}") from None
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise RealError(f"{where}: {need / 2**30:.2f} GiB needed, {free / 2**30:.2f} GiB free")


def in_memory(path: Path) -> bool:
    """Whether ``path`` lies on tmpfs/ramfs (allocated pages are real storage there)."""
    best, fstype = "", ""
    target = str(path.resolve())
    with open("/proc/self/mounts") as fh:
        for line in fh:
            parts = line.split()
            mnt = parts[1]
            if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(
                best
            ):
                best, fstype = mnt, parts[2]
    return fstype in ("tmpfs", "ramfs")


def allocate(path: Path, size: int, fill: bool) -> None:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
            if fill:
                chunk = bytes(8 << 20)
                for off in range(0, size, len(chunk)):
                    os.pwrite(fd, chunk[: size - off], off)
                    phase("fill")
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RealError(f"cannot create {path} ({size} bytes): {exc.strerror}") from None

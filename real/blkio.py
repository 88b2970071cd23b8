"""Kernel pieces of an emulated SSD: loop devices and a cgroup v1 blkio throttle group.

An emulated SSD (:mod:`real.emulate`) is a file turned into a block device
with ``losetup --direct-io=on`` (so O_DIRECT reaches the backing store, not
the page cache) whose read/write bandwidth and IOPS are capped by the block
layer's throttling (``blkio.throttle.*_device`` of a cgroup v1 blkio group).
Throttling applies to the I/O of the processes in the group, so whoever
replays a plan -- kvtier's replayer or fio -- joins the group first
(:meth:`ThrottleGroup.join`, or ``cgroup=`` of :func:`real.fio.run_fio`).

Ownership is strict: :func:`loop_detach` only detaches a device whose
backing file is still the one kvtier attached, and :class:`ThrottleGroup`
only creates and removes its own directory (``kvtier-<pid>-<k>``), moving
the processes it holds back to the groups they came from first.  Both
record what they create in :data:`real.cleanup.REGISTRY` (the marker
``kvtier real cleanup`` goes by after a crash).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from real.cleanup import REGISTRY, REMOVERS
from real.errors import RealError
from real.targets import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup/blkio")
_THROTTLE_FILES = (
    ("read_bps", "blkio.throttle.read_bps_device"),
    ("write_bps", "blkio.throttle.write_bps_device"),
    ("read_iops", "blkio.throttle.read_iops_device"),
    ("write_iops", "blkio.throttle.write_iops_device"),
)


def throttle_unavailable(root: str | Path = CGROUP_ROOT) -> str | None:
    """Why kernel throttling of loop devices cannot be used here, or None if it can."""
    if os.geteuid() != 0:
        return "not running as root (loop devices and cgroups need root)"
    if shutil.which("losetup") is None:
        return "losetup is not installed"
    if not (Path(root) / "blkio.throttle.read_bps_device").exists():
        return f"no cgroup v1 blkio throttling at {root}"
    return None


# ---- loop devices -------------------------------------------------------------
def loop_attach(backing: str | Path) -> str:
    """Attach ``backing`` to a free loop device with direct I/O; return ``/dev/loopN``."""
    cmd = ["losetup", "--direct-io=on", "--find", "--show", str(backing)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RealError(f"losetup cannot attach {backing}: {done.stderr.strip()}")
    dev = done.stdout.strip()
    REGISTRY.add("loop", dev=dev, backing=str(Path(backing).resolve()))
    if loop_dio(dev) is False:
        loop_detach(dev, backing)
        raise RealError(f"{dev}: the kernel refused direct I/O on {backing} (filesystem?)")
    return dev


def loop_backing(dev: str) -> str | None:
    """The backing file of loop device ``dev`` (None when it is not attached)."""
    try:
        return (Path("/sys/block") / Path(dev).name / "loop/backing_file").read_text().strip()
    except OSError:
        return None


def loop_dio(dev: str) -> bool | None:
    """Whether ``dev`` does direct I/O on its backing file (None if unknown)."""
    try:
        return (Path("/sys/block") / Path(dev).name / "loop/dio").read_text().strip() == "1"
    except OSError:
        return None


def loop_detach(dev: str, backing: str | Path) -> bool:
    """Detach ``dev`` if it is still attached to ``backing``; True if it was detached."""
    if loop_backing(dev) != str(Path(backing).resolve()):
        return False
    done = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True, timeout=60)
    if done.returncode == 0:
        REGISTRY.forget("loop", dev=dev)
    return done.returncode == 0


REMOVERS["loop"] = lambda entry: loop_detach(entry["dev"], entry["backing"])


def dev_number(dev: str) -> str:
    """``MAJ:MIN`` of block device ``dev`` (as the blkio throttle files want)."""
    rdev = os.stat(dev).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


# ---- throttle group -----------------------------------------------------------
def _cgroup_of(pid: int, root: Path) -> Path:
    """The blkio cgroup directory process ``pid`` is in now."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return root
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return root / path.lstrip("/")
    return root


class ThrottleGroup:
    """A cgroup v1 blkio group ``<root>/<name>`` that kvtier created and will remove.

    ``limit(dev, limits)`` caps one device; ``join(pid)`` puts a process (and
    the children it starts later) under the caps; ``remove()`` moves every
    member back where it came from and deletes the group.
    """

    def __init__(self, root: str | Path, name: str) -> None:
        self.root = Path(root)
        self.path = self.root / name
        self._origin: dict[int, Path] = {}
        try:
            self.path.mkdir()
        except OSError as exc:
            raise RealError(f"cannot create cgroup {self.path}: {exc.strerror}") from None
        REGISTRY.add("cgroup", path=str(self.path))

    def limit(self, dev: str, limits: Limits) -> None:
        number = dev_number(dev)
        for field, filename in _THROTTLE_FILES:
            value = int(getattr(limits, field))
            if value > 0:
                self._write(self.path / filename, f"{number} {value}")

    def limits(self) -> dict[str, dict[str, int]]:
        """What the kernel holds: ``{"MAJ:MIN": {"read_bps": ..., ...}}``."""
        out: dict[str, dict[str, int]] = {}
        for field, filename in _THROTTLE_FILES:
            for line in (self.path / filename).read_text().splitlines():
                number, value = line.split()
                out.setdefault(number, {})[field] = int(value)
        return out

    def join(self, pid: int | None = None) -> None:
        """Move process ``pid`` (default: this one) into the group."""
        pid = os.getpid() if pid is None else pid
        self._origin.setdefault(pid, _cgroup_of(pid, self.root))
        self._write(self.path / "cgroup.procs", str(pid))

    def leave(self, pid: int | None = None) -> None:
        """Move ``pid`` back to the group it was in before :meth:`join`."""
        pid = os.getpid() if pid is None else pid
        self._move_out(pid)

    @contextlib.contextmanager
    def joined(self, pid: int | None = None) -> Iterator[ThrottleGroup]:
        self.join(pid)
        try:
            yield self
        finally:
            self.leave(pid)

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Empty the group (members go back to their origin) and delete it."""
        if not self.path.exists():
            return
        for pid in self.members():
            self._move_out(pid)
        try:
            self.path.rmdir()
        except OSError as exc:
            raise RealError(f"cannot remove cgroup {self.path}: {exc.strerror}") from None
        REGISTRY.forget("cgroup", path=str(self.path))

    def _move_out(self, pid: int) -> None:
        origin = self._origin.pop(pid, self.root)
        if not (origin / "cgroup.procs").exists() or origin == self.path:
            origin = self.root
        try:
            (origin / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # the process has exited: nothing to move
                raise RealError(
                    f"cannot move pid {pid} out of {self.path}: {exc.strerror}"
                ) from None

    @staticmethod
    def _write(path: Path, text: str) -> None:
        try:
            path.write_text(text)
        except OSError as exc:
            raise RealError(f"cannot write '{text}' to {path}: {exc.strerror}") from None

"""The replayer's data files: where each SSD node of a plan lives, made safe.

:func:`prepare_targets` turns a plan and the places the user chose into one
:class:`~real.targets.Target` per SSD node, and fills each with self-checking
KV-shaped blocks (format in :mod:`real._blocks`) covering the plan's largest
offset + extent on that node.  The result, :class:`DataFiles`, owns what it
created and removes it on :meth:`DataFiles.cleanup` (or on leaving its
``with`` block, Ctrl-C included).

Places, one per SSD node (nodes in natural order: ``ssd2`` before ``ssd10``):

* a targets directory: one sub-directory per node (``DIR/ssd0/``, perhaps a
  mount point the user made), holding ``kvtier-ssd0.dat``;
* a directory: the file ``kvtier-<node>.dat`` is created in it;
* a path that does not exist: that file is created;
* an existing regular file or a raw block device: used only with
  ``allow_write_existing=True`` (``--i-own-this-device``), and a block device
  holding a filesystem or partition table (``blkid -p``, or superblock magic
  where blkid is missing) is refused even then.

Files are created with ``O_EXCL``, preallocated with ``posix_fallocate`` (so a
full disk fails before any data is written) and filled with O_DIRECT writes.
Any failure (no space, I/O error, no O_DIRECT on that filesystem) removes every
file and directory created so far and raises a one-line
:class:`~real.errors.RealError` naming the node, the path and the offset.

The plan's read/write I/Os (:func:`kvtier.contracts.plan.io_extents`: the regular
``offset``/``stride`` pattern, or one I/O per extent of a scattered op) must be
4 KiB-aligned in offset and length, the granularity of the block format and of
O_DIRECT on 4Kn devices; the files cover every byte range any I/O touches.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import io_extents
from kvtier.contracts.units import fmt_bytes
from real._blocks import BLOCK, BlockFormat
from real._signals import phase
from real.cleanup import REGISTRY, file_id
from real.errors import RealError
from real.ownership import HEAD, check_write, has_kvtier_magic, magic_signature, signature
from real.targets import Limits, Target

FILL_CHUNK = 4 << 20
PathLike = str | Path


# ---- the plan's footprint ---------------------------------------------------------------
def natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class IOLayout:
    """Every I/O the plan's read/write ops issue, exactly as the plan states it.

    Op ``j`` (``node[j]`` indexes ``nodes``; -1 for copy/compute) issues, in
    order, the I/Os ``first[j]:first[j + 1]``: ``length[k]`` bytes at byte
    ``offset[k]`` of its node's file (:func:`kvtier.contracts.plan.io_extents`: the
    regular pattern or the op's extents, never merged or re-split).
    """

    nodes: list[str]
    node: np.ndarray
    first: np.ndarray  # n_ops + 1 pointers into offset/length
    offset: np.ndarray
    length: np.ndarray

    @property
    def io_node(self) -> np.ndarray:
        """The node index of every I/O."""
        return np.repeat(self.node, np.diff(self.first))

    def extents(self) -> dict[str, int]:
        """Bytes each node needs from offset 0 (a multiple of 4 KiB, at least one block)."""
        need = np.full(len(self.nodes), BLOCK, dtype=np.int64)
        np.maximum.at(need, self.io_node, self.offset + self.length)
        return dict(zip(self.nodes, need.tolist(), strict=True))

    def largest_io(self) -> np.ndarray:
        """Per node, the longest I/O issued to it (its buffer slot size)."""
        big = np.zeros(len(self.nodes), dtype=np.int64)
        np.maximum.at(big, self.io_node, self.length)
        return big


def io_layout(plan: pa.Table) -> IOLayout:
    """The plan's I/O geometry; a :class:`RealError` names the first unaligned op and I/O."""
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    src = np.asarray(plan.column("src").to_pylist(), dtype=object)
    dst = np.asarray(plan.column("dst").to_pylist(), dtype=object)
    is_io = np.isin(kind, ["read", "write"])
    dev = np.where(kind == "read", src, dst)
    nodes = sorted({str(d) for d in dev[is_io]}, key=natural_key)
    index = {n: i for i, n in enumerate(nodes)}
    node = np.array([index[d] if io else -1 for d, io in zip(dev, is_io, strict=True)], np.int64)
    ios = io_extents(plan, np.nonzero(is_io)[0])
    bad = (ios.offset % BLOCK != 0) | (ios.length % BLOCK != 0) | (ios.length <= 0)
    if bad.any():
        k = int(np.argmax(bad))
        j = int(ios.op[k])
        i = k - int(ios.ptr[np.searchsorted(ios.ptr, k, side="right") - 1])
        what = "extent" if len(plan.column("extents")[j]) else "I/O"
        raise RealError(
            f"op {j}: {kind[j]} {what} {i} of {dev[j]} (offset {int(ios.offset[k])}, length "
            f"{int(ios.length[k])}) is not made of whole 4 KiB blocks; the replayer needs "
            "4 KiB-aligned offsets and lengths"
        )
    count = np.zeros(len(kind), dtype=np.int64)
    count[is_io] = np.diff(ios.ptr)
    first = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    return IOLayout(nodes, node, first, ios.offset, ios.length)


# ---- what kvtier owns ---------------------------------------------------------------------
@dataclass
class DataFiles:
    """The prepared targets (``node -> Target``) and what was created for them.

    ``allow_write_existing``: the user allowed writing targets kvtier did not create.
    """

    targets: dict[str, Target]
    seed: int
    allow_write_existing: bool = False
    created_files: list[Path] = field(default_factory=list)
    created_dirs: list[Path] = field(default_factory=list)

    def cleanup(self) -> None:
        """Remove every file and directory created for this run (idempotent)."""
        for path in reversed(self.created_files):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            REGISTRY.forget("file", path=str(path))
        self.created_files.clear()
        for path in reversed(self.created_dirs):
            with contextlib.suppress(OSError):  # not empty: something else lives there now
                path.rmdir()
            REGISTRY.forget("dir", path=str(path))
        self.created_dirs.clear()

    def keep(self) -> None:
        """Leave what was created in place (``--keep-files``): no longer ours to remove."""
        for path in self.created_files:
            REGISTRY.forget("file", path=str(path))
        for path in self.created_dirs:
            REGISTRY.forget("dir", path=str(path))
        self.created_files.clear()
        self.created_dirs.clear()

    def __enter__(self) -> DataFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def prepare_targets(
    plan: pa.Table,
    where: PathLike | Sequence[PathLike] | Mapping[str, PathLike],
    *,
    seed: int = 0,
    allow_write_existing: bool = False,
    limits: Limits | Mapping[str, Limits] | None = None,
    pacing: bool = False,
    queue_depth: int = 0,
    log: Callable[[str], None] | None = None,
) -> DataFiles:
    """Create and fill one data file (or claim one device) per SSD node of ``plan``.

    ``where``: a targets directory (one sub-directory per node), a sequence of
    paths (one per SSD node, in natural order) or a mapping ``node -> path``.
    ``limits``/``pacing``/``queue_depth`` are copied into each :class:`Target`.
    """
    layout = io_layout(plan)
    extents = layout.extents()
    files = DataFiles({}, seed, allow_write_existing)
    try:
        places = _places(where, layout.nodes, files)
        for node in layout.nodes:
            lim = limits.get(node, Limits()) if isinstance(limits, Mapping) else limits
            target, fd = _claim(node, places[node], extents[node], files, allow_write_existing)
            try:
                if log:
                    log(f"{node}: filling {fmt_bytes(extents[node])} of {target.path}")
                _fill(fd, target, BlockFormat(node, seed), extents[node])
            finally:
                os.close(fd)
            files.targets[node] = replace(
                target, limits=lim or Limits(), pacing=pacing, queue_depth=queue_depth
            )
    except BaseException:
        files.cleanup()
        raise
    return files


def fill_targets(targets: Mapping[str, Target], plan: pa.Table, seed: int = 0) -> None:
    """Fill targets made elsewhere (e.g. loop devices of ``--emulate``) for ``plan``.

    Only targets kvtier created (``created=True``) are written.
    """
    extents = io_layout(plan).extents()
    for node, need in extents.items():
        if node not in targets:
            raise RealError(f"no target for {node}: the plan reads or writes it")
        t = targets[node]
        check_write(node, t.path, t.created, False, "a target kvtier created")
        if t.size < need:
            raise RealError(f"{node}: {t.path} holds {t.size} bytes, the plan needs {need}")
        fd = _open_direct(node, Path(t.path), os.O_RDWR)
        try:
            _fill(fd, t, BlockFormat(node, seed), need)
        finally:
            os.close(fd)


# ---- places and claims --------------------------------------------------------------------
def _places(where, nodes: list[str], files: DataFiles) -> dict[str, Path]:
    if isinstance(where, Mapping):
        missing = [n for n in nodes if n not in where]
        if missing:
            raise RealError(f"no target given for {', '.join(missing)}")
        return {n: Path(where[n]) for n in nodes}
    if isinstance(where, (str, Path)):
        root = Path(where)
        _mkdir(root, files)
        out = {}
        for n in nodes:
            _mkdir(root / n, files)
            out[n] = root / n
        return out
    paths = [Path(p) for p in where]
    if len(paths) != len(nodes):
        raise RealError(
            f"the plan uses {len(nodes)} SSD node(s) ({', '.join(nodes)}) but {len(paths)} "
            "target(s) were given: give one per node, or a targets directory"
        )
    return dict(zip(nodes, paths, strict=True))


def _mkdir(path: Path, files: DataFiles) -> None:
    if path.is_dir():
        return
    if not path.parent.is_dir():
        raise RealError(f"{path.parent}: no such directory")
    try:
        path.mkdir()
    except OSError as exc:
        raise RealError(f"{path}: cannot create directory: {exc.strerror}") from None
    files.created_dirs.append(path)
    REGISTRY.add("dir", **file_id(path))


def _claim(
    node: str, place: Path, need: int, files: DataFiles, allow_existing: bool
) -> tuple[Target, int]:
    path = place / f"kvtier-{node}.dat" if place.is_dir() else place
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _create(node, path, need, files)
    flag = "--i-own-this-device"
    if stat.S_ISBLK(st.st_mode):
        check_write(
            node, path, False, allow_existing, flag, "is a block device kvtier did not set up"
        )
        fd = _open_direct(node, path, os.O_RDWR | os.O_EXCL)
        size = os.lseek(fd, 0, os.SEEK_END)
        if size < need:
            os.close(fd)
            raise RealError(f"{node}: {path} holds {fmt_bytes(size)}, the plan needs {need} bytes")
        return Target(node, str(path), size, kind="block", created=False), fd
    if not stat.S_ISREG(st.st_mode):
        raise RealError(f"{node}: {path} is neither a regular file nor a block device")
    ours = " (a kvtier data file left by --keep-files?)" if has_kvtier_magic(path) else ""
    check_write(
        node, path, False, allow_existing, flag, f"exists and was not created by this run{ours}"
    )
    fd = _open_direct(node, path, os.O_RDWR)
    size = max(st.st_size, need)
    _preallocate(fd, node, path, size)
    return Target(node, str(path), size, kind="file", created=False), fd


def _create(node: str, path: Path, need: int, files: DataFiles) -> tuple[Target, int]:
    if not path.parent.is_dir():
        raise RealError(f"{node}: {path.parent}: no such directory")
    fd = _open_direct(node, path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    files.created_files.append(path)
    REGISTRY.add("file", **file_id(path))
    _preallocate(fd, node, path, need)
    return Target(node, str(path), need, kind="file", created=True), fd


def _open_direct(node: str, path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_DIRECT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise RealError(
                f"{node}: {path}: this filesystem does not support O_DIRECT; "
                "choose a directory on a local disk (or /dev/shm on Linux 6.6+)"
            ) from None
        if exc.errno == errno.EBUSY:
            raise RealError(f"{node}: {path} is in use (mounted or held open)") from None
        raise RealError(f"{node}: cannot open {path}: {exc.strerror}") from None


def _preallocate(fd: int, node: str, path: Path, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        raise io_failure(node, path, "preallocating", 0, size, exc.errno) from None


def _fill(fd: int, target: Target, fmt: BlockFormat, size: int) -> None:
    buf = mmap.mmap(-1, FILL_CHUNK)
    mv = memoryview(buf)
    try:
        for off in range(0, size, FILL_CHUNK):
            n = min(FILL_CHUNK, size - off)
            fmt.render(off // BLOCK, mv[:n])
            try:
                done = os.pwrite(fd, mv[:n], off)
            except OSError as exc:
                raise io_failure(target.node, target.path, "writing", off, n, exc.errno) from None
            if done != n:
                raise RealError(
                    f"{target.node}: short write to {target.path} at offset {off}: "
                    f"{done} of {n} bytes"
                )
            phase("fill")
    finally:
        # a signal may leave a slice of ``mv`` alive in the traceback: then the mapping
        # is freed with it instead of here (closing it would raise BufferError)
        with contextlib.suppress(BufferError):
            mv.release()
            buf.close()


def io_failure(node: str, path: PathLike, what: str, offset: int, length: int, err: int | None):
    """A :class:`RealError` for a failed I/O, naming node, path, offset and the cause."""
    err = err or errno.EIO
    name = errno.errorcode.get(err, str(err))
    hint = {
        errno.ENOSPC: "; free space or choose another directory",
        errno.EIO: "; the device reported an I/O error",
    }.get(err, "")
    return RealError(
        f"{node}: {os.strerror(err)} ({name}) {what} {fmt_bytes(length)} of {path} "
        f"at offset {offset}{hint}"
    )


# ---- what a target holds (kept here for callers of the old names) ------------------------
block_signature = signature
_has_magic = has_kvtier_magic


def _magic_signature(path: PathLike) -> str | None:
    try:
        with open(path, "rb", buffering=0) as fh:
            return magic_signature(fh.read(HEAD))
    except OSError as exc:
        raise RealError(f"cannot read {path} to check what it holds: {exc.strerror}") from None

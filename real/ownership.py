"""The one check every write to a target goes through.

kvtier writes freely only to what it created (``Target.created``: its data
files, its emulated loop devices).  Anything else -- a file or block device
the user named -- is written only when the user said so with the command's
flag (``--allow-write``, ``--i-own-this-device``) *and* it holds nothing
recognisable: a filesystem or partition table is refused even then.
:func:`check_write` is called by the data-file fill (:mod:`real.datafile`),
the replayer's device open (:mod:`real._devices`) and the fio replay
(:mod:`real.iolog`), so the rule is the same on every path.

What a target holds (:func:`signature`): a target whose first block is a
kvtier block (:data:`real._blocks.MAGIC`) holds nothing to protect;
otherwise ``blkid -p`` where installed, then the superblock magics below
(whatever blkid did not recognise, or all of them where it is missing).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from real._blocks import MAGIC
from real.errors import RealError

PathLike = str | Path

_MAGICS = (  # (offset, bytes, what)
    (1080, b"\x53\xef", "an ext2/3/4 filesystem"),
    (0, b"XFSB", "an XFS filesystem"),
    (65536 + 64, b"_BHRfS_M", "a btrfs filesystem"),
    (0, b"LUKS\xba\xbe", "a LUKS volume"),
    (4096 - 10, b"SWAPSPACE2", "a swap area"),
    (4096 - 10, b"SWAP-SPACE", "a swap area"),
    (512, b"EFI PART", "a GPT partition table"),
    (3, b"NTFS    ", "an NTFS filesystem"),
)
HEAD = 65536 + 64 + 8  # bytes read to look for any of them


def magic_signature(head: bytes) -> str | None:
    """What the first :data:`HEAD` bytes of a target say it holds (None: nothing known)."""
    for off, magic, what in _MAGICS:
        if head[off : off + len(magic)] == magic:
            return what
    if head[510:512] == b"\x55\xaa":  # an MBR: refuse when any partition entry is in use
        types = [head[446 + 16 * i + 4] for i in range(4)]
        if any(types):
            return "an MBR partition table"
    return None


def _head(path: PathLike, n: int) -> bytes:
    try:
        with open(path, "rb", buffering=0) as fh:
            return fh.read(n)
    except OSError as exc:
        raise RealError(f"cannot read {path} to check what it holds: {exc.strerror}") from None


def has_kvtier_magic(path: PathLike) -> bool:
    return _head(path, len(MAGIC)) == MAGIC


def signature(path: PathLike) -> str | None:
    """What recognisable data ``path`` (file or block device) holds, or None."""
    head = _head(path, HEAD)
    if head[: len(MAGIC)] == MAGIC:
        return None
    return _blkid(path) or magic_signature(head)


def _blkid(path: PathLike) -> str | None:
    try:
        out = subprocess.run(
            ["blkid", "-p", "-o", "export", str(path)], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode == 0:
        info = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        if "PTTYPE" in info and "TYPE" not in info:
            return f"a {info['PTTYPE']} partition table"
        return f"a {info.get('TYPE', 'unknown')} {info.get('USAGE', 'filesystem')}"
    if out.returncode == 8:
        return "several signatures (blkid: ambivalent result)"
    return None


def check_write(
    node: str,
    path: PathLike,
    created: bool,
    allowed: bool,
    flag: str,
    what: str = "was not created by kvtier; refusing to write it",
) -> None:
    """Refuse (:class:`RealError`) a write to ``path`` that kvtier may not make.

    ``created``: kvtier made it (always writable).  ``allowed``: the user passed
    ``flag`` for targets kvtier did not create; even then a filesystem or
    partition table is never overwritten.  ``what`` says why it is not kvtier's.
    """
    if created:
        return
    if not allowed:
        raise RealError(f"{node}: {path} {what}; pass {flag} if it is yours to overwrite")
    sig = signature(path)
    if sig:
        raise RealError(f"{node}: {path} holds {sig}; refusing to overwrite it")

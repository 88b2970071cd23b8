"""Where a plan's SSD nodes land on this machine.

A :class:`Target` maps one plan node (``ssd0``) to a path: a regular file
kvtier created (in a directory the user chose), a loop device kvtier set up
over such a file (``--emulate``), or -- only with an explicit flag -- a raw
block device the user named.  :class:`Limits` are the per-device rates the
device is held to: by the kernel (cgroup blkio throttling) or, where that is
unavailable, by user-space pacing in the replayer (``pacing=True``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-device ceilings; ``0`` means unlimited."""

    read_bps: int = 0
    write_bps: int = 0
    read_iops: int = 0
    write_iops: int = 0

    @property
    def unlimited(self) -> bool:
        return not (self.read_bps or self.write_bps or self.read_iops or self.write_iops)


@dataclass(frozen=True)
class Target:
    """One plan SSD node on this machine.

    ``path``: file or block device read and written with O_DIRECT.
    ``size``: bytes usable from offset 0 (the plan's offsets must fit).
    ``kind``: ``file`` | ``loop`` | ``block``.
    ``created``: kvtier created it (and may write and delete it).
    ``limits``: rates the device is held to; ``pacing`` says the replayer
    enforces them itself (no kernel throttling available).
    ``queue_depth``: in-flight I/O slots of this device (0 = the plan's).
    ``latency_s``: (read, write) access latency a paced device adds to an op's paced
    finish, the emulated device's as the simulator holds it (:mod:`real._pacing`);
    0: none beyond what its I/Os really take.
    """

    node: str
    path: str
    size: int
    kind: str = "file"
    created: bool = True
    limits: Limits = Limits()
    pacing: bool = False
    queue_depth: int = 0
    latency_s: tuple[float, float] = (0.0, 0.0)

"""One target device as the replay loop sees it: descriptor, buffers, pacing, measures.

A :class:`Device` owns an O_DIRECT descriptor of its target and a page-aligned
anonymous ``mmap`` arena cut into ``qd`` slots of the device's largest I/O, one
per in-flight I/O.  It keeps the measures the records report (definitions in
:data:`kvtier.contracts.records.DEVICE_RECORD_SCHEMA`): bytes and I/Os completed (reads
counted once verified), ``busy_s`` (time with at least one I/O in flight, so
``util_mean = busy_s / makespan``) and, for the replay-only stats, the integral
of the in-flight count over time (``inflight_mean``: that integral over ``qd x
makespan``) and the most in flight (``inflight_peak``: over ``qd``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kvtier.contracts.records import DEVICE_RECORD_SCHEMA
from real._blocks import BlockFormat
from real._pacing import Pacer
from real.errors import RealError
from real.ownership import check_write
from real.targets import Target


@dataclass(eq=False)
class Device:
    name: str
    target: Target
    fd: int
    fmt: BlockFormat
    qd: int
    pacer: Pacer | None
    slots: list[memoryview]
    free: list[int]
    arena: np.ndarray  # the slots as rows of u64 words (qd x slot // 8), for batch checks
    flags: int = 0  # engine flags for every I/O (IOSQE_ASYNC on kernel-throttled devices)
    active: deque = field(default_factory=deque)  # started ops with I/Os left to issue
    inflight: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    n_ios: int = 0
    busy_s: float = 0.0
    busy_since: float = 0.0
    area: float = 0.0
    t_last: float = 0.0
    peak: int = 0

    def issued(self, now: float, n: int = 1) -> None:
        """``n`` I/Os issued at time ``now``."""
        if self.inflight == 0:
            self.busy_since = now
        self.area += self.inflight * (now - self.t_last)
        self.t_last = now
        self.inflight += n
        self.peak = max(self.peak, self.inflight)

    def completed(self, t: float, n: int = 1) -> None:
        """``n`` I/Os completed at time ``t``."""
        self.area += self.inflight * (t - self.t_last)
        self.t_last = t
        self.inflight -= n
        if self.inflight == 0:
            self.busy_s += t - self.busy_since

    def counted(self, write: bool, size: int) -> None:
        self.n_ios += 1
        if write:
            self.bytes_written += size
        else:
            self.bytes_read += size

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.slots = []


def open_device(
    target: Target, seed: int, qd: int, slot: int, write: bool, allow_write: bool
) -> Device:
    """Open ``target`` for ``qd`` in-flight I/Os of at most ``slot`` bytes."""
    name = target.node
    if write:
        check_write(name, target.path, target.created, allow_write, "--i-own-this-device")
    flags = (os.O_RDWR if write else os.O_RDONLY) | os.O_DIRECT | os.O_CLOEXEC
    try:
        fd = os.open(target.path, flags)
    except OSError as exc:
        raise RealError(f"{name}: cannot open {target.path}: {exc.strerror}") from None
    arena = mmap.mmap(-1, qd * slot)
    view = memoryview(arena)
    paced = target.pacing and not target.limits.unlimited
    return Device(
        name,
        target,
        fd,
        BlockFormat(name, seed),
        qd,
        Pacer(target.limits) if paced else None,
        [view[i * slot : (i + 1) * slot] for i in range(qd)],
        list(range(qd)),
        np.frombuffer(arena, dtype=np.uint64).reshape(qd, slot // 8),
    )


def device_records(devs: list[Device], makespan: float) -> pa.Table:
    """The shared device columns as this replay measured them."""
    rows: dict[str, list] = {f.name: [] for f in DEVICE_RECORD_SCHEMA}
    for d in devs:
        for col, val in (
            ("device", d.name),
            ("type", "ssd"),
            ("bytes_read", d.bytes_read),
            ("bytes_written", d.bytes_written),
            ("n_ios", d.n_ios),
            ("busy_s", d.busy_s),
            ("util_mean", d.busy_s / makespan if makespan > 0 else 0.0),
        ):
            rows[col].append(val)
    return pa.Table.from_pydict(rows, schema=DEVICE_RECORD_SCHEMA)


def inflight_stats(devs: list[Device], makespan: float) -> dict[str, dict[str, float]]:
    """Replay-only measures: time-average and peak of in-flight I/Os over ``qd``."""
    return {
        "inflight_mean": {
            d.name: d.area / (d.qd * makespan) if makespan > 0 else 0.0 for d in devs
        },
        "inflight_peak": {d.name: d.peak / d.qd for d in devs},
    }

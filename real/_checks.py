"""What the replay loop checks when I/Os complete: transfer errors and the data read.

``done`` entries are ``(device, op, offset, size, slot, result)``: an I/O of
``size`` bytes at byte ``offset`` of the device's file whose buffer is the
device's slot ``slot``, and the CQE-style ``result`` (bytes or ``-errno``).
"""

from __future__ import annotations

import numpy as np

from real._blocks import BLOCK
from real._devices import Device
from real.datafile import io_failure
from real.errors import RealError


def io_error(d: Device, write: bool, off: int, size: int, res: int) -> RealError:
    """The error for an I/O that failed (``res < 0``) or moved fewer bytes than asked."""
    what = "writing" if write else "reading"
    if res < 0:
        return io_failure(d.name, d.target.path, what, off, size, -res)
    return RealError(
        f"{d.name}: short {what[:-3]} of {d.target.path} at offset {off}: "
        f"{res} of {size} bytes (was the file truncated?)"
    )


def verify_reads(done: list[tuple], write: list[bool]) -> None:
    """Check every read of ``done`` (``write[op]`` says which ops write); raise on the first
    bad block.  Single-block reads of a device are checked in one numpy comparison
    (:meth:`~real._blocks.BlockFormat.first_bad_block`), larger ones one by one."""
    single: dict[Device, tuple[list[int], list[int]]] = {}
    for d, j, off, size, slot, _ in done:
        if write[j]:
            continue
        if size == BLOCK:
            slots, offs = single.setdefault(d, ([], []))
            slots.append(slot)
            offs.append(off)
            continue
        bad = d.fmt.first_mismatch(d.slots[slot][:size], off // BLOCK)
        if bad >= 0:
            raise mismatch(d, d.slots[slot], off, bad)
    for d, (slots, offs) in single.items():
        blocks = np.asarray(offs, dtype=np.uint64) // np.uint64(BLOCK)
        row = d.fmt.first_bad_block(d.arena[slots, : BLOCK // 8], blocks)
        if row >= 0:
            raise mismatch(d, d.slots[slots[row]], offs[row], 0)


def mismatch(d: Device, buf: memoryview, off: int, bad: int) -> RealError:
    """The error for block ``bad`` of the I/O at ``off`` whose data is in ``buf``."""
    at = off + bad * BLOCK
    got = bytes(buf[bad * BLOCK : (bad + 1) * BLOCK])
    return RealError(
        f"{d.name}: data mismatch in {d.target.path} at offset {at}: "
        f"{d.fmt.describe(got, at // BLOCK)}"
    )

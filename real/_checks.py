"""The errors the replay loop raises when I/Os complete: failed or short transfers and
data that is not what its blocks must hold (the checks themselves are batched in
:mod:`real._iobatch`)."""

from __future__ import annotations

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


def mismatch(d: Device, buf: memoryview, off: int, bad: int) -> RealError:
    """The error for block ``bad`` of the I/O at ``off`` whose data is in ``buf``."""
    at = off + bad * BLOCK
    got = bytes(buf[bad * BLOCK : (bad + 1) * BLOCK])
    return RealError(
        f"{d.name}: data mismatch in {d.target.path} at offset {at}: "
        f"{d.fmt.describe(got, at // BLOCK)}"
    )

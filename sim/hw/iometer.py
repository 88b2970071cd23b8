"""What a simulated SSD did: the measures its records report.

The executor (:func:`sim.executor.launch`) calls :meth:`IoMeter.begin` when a
read/write op's SSD part starts (its base-latency phase) and
:meth:`IoMeter.end` when the op's data flow has moved its last byte, so the
bytes and I/Os counted are what the flows moved, not what the plan asked for,
and ``busy_s`` is the time with at least one op of the device between those
two instants (the latency phase counts as in flight, as a real device's
access latency does).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class IoMeter:
    """Counters of one SSD; ``inflight`` ops are in their latency or data phase."""

    bytes_read: int = 0
    bytes_written: int = 0
    n_ios: int = 0
    busy_s: float = 0.0
    inflight: int = 0
    since: float = 0.0  # start of the current busy period

    def begin(self, now: float) -> None:
        """An op's SSD part starts (its latency phase, then its data flow)."""
        if self.inflight == 0:
            self.since = now
        self.inflight += 1

    def end(self, now: float, write: bool, nbytes: float, n_ios: int) -> None:
        """An op's data flow completed, having moved ``nbytes`` in ``n_ios`` I/Os."""
        self.inflight -= 1
        if self.inflight == 0:
            self.busy_s += now - self.since
        self.n_ios += n_ios
        if write:
            self.bytes_written += round(nbytes)
        else:
            self.bytes_read += round(nbytes)

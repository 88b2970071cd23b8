"""User-space pacing: per-device token buckets for bytes and I/Os.

Where the kernel offers no block throttling (or the user is not root) the
replayer itself holds each device to its :class:`~real.targets.Limits`: an
I/O is issued only when every bucket it draws from (read or write bytes, read
or write I/Os) holds enough tokens; otherwise the device waits until the
fullest-needed bucket has refilled.  A bucket starts full and holds at most
``burst`` tokens: 5 ms of its rate, but never less than the largest single
I/O, so large I/Os are not starved.  Over a run of ``B`` bytes at rate ``r``
the issue times therefore satisfy ``T >= (B - burst) / r`` -- the lower bound
the tests check.
"""

from __future__ import annotations

from real.targets import Limits

BURST_S = 0.005


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate = float(rate)
        self.burst = float(burst)
        self.tokens = self.burst
        self.t = 0.0

    def delay(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` tokens are available (0 when they are now)."""
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        return 0.0 if self.tokens >= amount else (amount - self.tokens) / self.rate

    def take(self, amount: float) -> None:
        self.tokens -= amount


class Pacer:
    """The buckets of one device; ``max_io``: its largest I/O in bytes."""

    def __init__(self, limits: Limits, max_io: int) -> None:
        def bucket(rate: float, unit: float) -> TokenBucket | None:
            return TokenBucket(rate, max(rate * BURST_S, unit)) if rate > 0 else None

        self._buckets = {
            False: (bucket(limits.read_bps, max_io), bucket(limits.read_iops, 1)),
            True: (bucket(limits.write_bps, max_io), bucket(limits.write_iops, 1)),
        }

    def delay(self, write: bool, size: int, now: float) -> float:
        """Seconds until an I/O of ``size`` bytes may be issued; takes the tokens if 0."""
        by_bytes, by_ios = self._buckets[write]
        wait = 0.0
        if by_bytes is not None:
            wait = by_bytes.delay(size, now)
        if by_ios is not None:
            wait = max(wait, by_ios.delay(1, now))
        if wait == 0.0:
            if by_bytes is not None:
                by_bytes.take(size)
            if by_ios is not None:
                by_ios.take(1)
        return wait

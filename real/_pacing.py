"""User-space pacing: a device's time as a token bucket, shared max-min by its ops.

Where the kernel offers no block throttling (or the user is not root) the
replayer itself holds each device to its :class:`~real.targets.Limits`.  As in
the simulator (:func:`sim.hw.machine.ssd_rates`: a flow of I/Os of ``size``
runs at ``min(bandwidth, IOPS x size)`` of a device whose capacity is 1), an I/O
*costs* device time::

    cost = max(size / bps, 1 / iops)      (a rate of 0 is no limit: its term is 0)

with the read or write figures by direction, and reads and writes draw on the
same time.  The bucket refills at one second per second *while the device has
work waiting* (a started op with I/Os not yet issued), starts empty and holds
at most ``burst``: :data:`BURST_S`, but never less than the costliest single
I/O, so large I/Os are not starved.  Over I/Os of total cost ``C`` issued from
an idle device the last is therefore issued at ``T >= C`` after the first op
started -- the lower bound the tests check.

Idle time banks nothing (:meth:`Pacer.resume`).  A device's time that no I/O
asked for is lost, in the simulator (a fluid device serves at its rate from
when work arrives) as on a real SSD.  So a device that runs out of I/Os to issue
starts its next work empty: what its bucket held then was time no waiting I/O
took (the loop woke late, an op's credit came back), and its I/Os in flight had
their device time before they were issued (the simulator charges their latency
apart).  Until 2026-11-25 the bucket also filled while the device was idle and
started full, so an op arriving after a pause ran its first ``burst`` (5 ms) of
device time at the backing store's speed: PQCache's 33 x 4 KiB fetch, 1.27 ms
at the device's 25,962 IOPS, measured 0.63-1.03 ms, and the design steps came
out 9-46% faster than the model (:mod:`kvtier.compare.replayer`).

Sharing (:meth:`Pacer.share`).  Each round the bucket's tokens are handed to the
device's ops that can issue (started, under their queue depth) by max-min: an
op asks for the cost of the I/Os it could issue now, less the *credit* it
holds; the ops asking least get all they ask, the rest an equal share.  What an
op gets is its credit, spent I/O by I/O in plan order (an I/O is issued when the
credit covers it) and kept across rounds.  So an op waiting for a large I/O
accrues its share while the small I/Os of the others go on at theirs -- the
simulator's max-min sharing of the device -- instead of holding them behind it.
"""

from __future__ import annotations

import numpy as np

from real._rrstream import water_fill
from real.targets import Limits

BURST_S = 0.005
TOL_S = 1e-9  # credit short of an I/O's cost by this little (rounding) still covers it
MIN_WAKE_S = 1e-6


def io_costs(limits: Limits, write: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Device seconds of each I/O (``write``: its direction, ``size``: its bytes)."""
    out = np.zeros(len(size))
    for w, bps, iops in (
        (False, limits.read_bps, limits.read_iops),
        (True, limits.write_bps, limits.write_iops),
    ):
        mine = write == w
        by_bytes = size[mine] / bps if bps > 0 else 0.0
        by_ios = 1.0 / iops if iops > 0 else 0.0
        out[mine] = np.maximum(by_bytes, by_ios)
    return out


def max_min(demand: np.ndarray, pool: float) -> np.ndarray:
    """``pool`` split by max-min over ``demand``: all of it where it fits, else the
    largest level ``L`` with ``sum(min(demand, L)) = pool``."""
    total = float(demand.sum())
    if total <= pool:
        return demand.copy()
    if len(demand) == 1:  # one op asking more than there is: all of it
        return np.array([pool])
    s = np.sort(demand)
    m = len(s)
    below = np.concatenate(([0.0], np.cumsum(s)[:-1]))  # what the smaller demands take
    filled = below + s * (m - np.arange(m))  # taken when the level reaches s[i]
    i = int(np.searchsorted(filled, pool))
    level = (pool - below[i]) / (m - i)
    return np.minimum(demand, level)


def plan_costs(
    pacers: list, first: np.ndarray, dev_of: np.ndarray, write: np.ndarray, size: np.ndarray
) -> np.ndarray | None:
    """Prefix sums of a plan's I/O costs (entry ``i``: the device seconds of I/Os
    ``0 .. i - 1``; I/Os of unpaced devices cost 0), or None when no device is paced.
    ``pacers[k]``: device ``k``'s :class:`Pacer` or None; op ``j`` (of device
    ``dev_of[j]``, writing where ``write[j]``) issues I/Os ``first[j]:first[j + 1]``
    of ``size`` bytes."""
    paced = [k for k, p in enumerate(pacers) if p is not None]
    if not paced:
        return None
    io_op = np.repeat(np.arange(len(first) - 1), np.diff(first))
    io_dev, io_write = dev_of[io_op], write[io_op]
    cost = np.zeros(len(io_op))
    for k in paced:
        mine = io_dev == k
        cost[mine] = io_costs(pacers[k].limits, io_write[mine], size[mine])
    return np.concatenate(([0.0], np.cumsum(cost)))


class Pacer:
    """The bucket of one device (``limits``; ``max_io``: its largest I/O in bytes)."""

    def __init__(self, limits: Limits, max_io: int) -> None:
        self.limits = limits
        big = io_costs(limits, np.array([False, True]), np.array([max_io, max_io], float))
        self.burst = max(BURST_S, float(big.max()))
        self.tokens = 0.0  # an idle device holds no banked time (see the module doc)
        self.t = 0.0
        self.credit: dict[int, float] = {}  # op -> device seconds it holds

    def refill(self, now: float) -> float:
        """The tokens (device seconds) in the bucket at ``now``."""
        self.tokens = min(self.burst, self.tokens + (now - self.t))
        self.t = now
        return self.tokens

    def resume(self, now: float) -> None:
        """Work arrives at ``now`` on a device that had none waiting since its last
        round (the round that issued its last I/O): it starts empty, as at the
        start.  What the bucket held then was device time no waiting I/O took (the
        loop woke late, an op's credit came back), and the time since fills nothing."""
        self.tokens = min(self.tokens, 0.0)
        self.t = max(self.t, now)

    def delay(self, write: bool, size: int, now: float) -> float:
        """Seconds until one I/O of ``size`` bytes may be issued; takes its tokens if 0."""
        cost = float(io_costs(self.limits, np.array([write]), np.array([size], float))[0])
        have = self.refill(now)
        if have >= cost:
            self.tokens -= cost
            return 0.0
        return cost - have

    def share(self, demand: np.ndarray, now: float) -> np.ndarray:
        """Hand the bucket out by max-min over ``demand`` (device seconds each op could
        spend now, beyond its credit); returns what each op gets."""
        give = max_min(demand, self.refill(now))
        self.tokens -= float(give.sum())
        return give

    def admit(
        self, ops: list[int], start, avail, cum: np.ndarray, room: int, now: float
    ) -> tuple[np.ndarray, float]:
        """One round: how many I/Os each of ``ops`` issues, and when the device next
        wakes (0: when an I/O completes or an op starts).

        Op ``ops[i]``'s next I/O is plan I/O ``start[i]``; it may issue ``avail[i]``
        now, which cost ``cum[start + avail] - cum[start]`` (``cum``:
        :func:`plan_costs`).  Each asks that beyond its credit (:meth:`share`) and
        takes the I/Os its credit then covers; the device's ``room`` free slots go
        round robin (:func:`~real._rrstream.water_fill`).  When ops are left waiting
        for tokens, the ``h`` of them each get at least ``1 / h`` of the refill, so
        the first is served ``h x`` its shortfall later."""
        held = np.fromiter((self.credit.get(j, 0.0) for j in ops), float, len(ops))
        credit = held + self.share(np.maximum(cum[start + avail] - cum[start] - held, 0.0), now)
        covered = np.searchsorted(cum, cum[start] + credit + TOL_S, "right") - 1 - start
        afford = np.minimum(covered, avail)
        take = np.asarray(water_fill(afford.tolist(), room), np.int64)
        credit -= cum[start + take] - cum[start]
        self.credit.update(zip(ops, credit.tolist(), strict=True))
        hungry = (afford == take) & (take < avail)
        if not hungry.any():
            return take, 0.0
        nxt = (start + take)[hungry]
        need = float((cum[nxt + 1] - cum[nxt] - credit[hungry]).min())
        return take, now + int(hungry.sum()) * max(need, MIN_WAKE_S)

    def release(self, j: int) -> None:
        """Op ``j`` issued its last I/O: what credit it has left goes back to the bucket."""
        self.tokens = min(self.burst, self.tokens + max(0.0, self.credit.pop(j, 0.0)))

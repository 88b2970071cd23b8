"""User-space pacing: a device's time, shared by its started ops, on its own clock.

Where the kernel offers no block throttling (or the user is not root) the
replayer itself holds each device to its :class:`~real.targets.Limits`.  As in
the simulator (:func:`sim.hw.machine.ssd_rates`: a flow of I/Os of ``size``
runs at ``min(bandwidth, IOPS x size)`` of a device whose capacity is 1), an I/O
*costs* device time::

    cost = max(size / bps, 1 / iops)      (a rate of 0 is no limit: its term is 0)

with the read or write figures by direction, and reads and writes draw on the
same time.  An op's cost is the sum over its I/Os.

Pacing at completion (since 2026-12-02).  A paced op's I/Os are issued as an
unpaced op's are (as many as the slots allow, one batch a round); what the pacer
holds back is the op's *end*.  The device's time is a fluid shared equally by
its started ops (processor sharing: each op has all its I/Os queued, so each
could use the whole device, and max-min gives each ``1 / h`` of it while ``h``
ops have work left), as the simulator's flows share a device's rate.  When the
op's cost has been served it has its *paced finish* ``F``; it ends at::

    end = max(F - late + L, last completion)

``L`` is the device's unloaded access latency, the simulator's latency phase
(:mod:`sim.executor`): the least time from an op's issue to its first completion
over the device's ops so far in the replay (an op's own first completion also
counts the other ops' I/Os queued ahead of it on the device).  ``late`` is how long after the op
could start (its dependencies ended, its release came) the loop noticed and
started it: on the device's clock the op starts when it could, as a copy or
compute op does on its GPU's (:mod:`real.scheduler`), so the loop's lateness
costs the op nothing unless its I/Os themselves end later.  The fluid's finish
times are worked out in closed form (:meth:`Pacer.advance`), so the loop wakes
once per op end, not once per I/O its tokens cover.

Why.  The token bucket this replaced (2026-11-25 to 2026-12-02) admitted each
I/O when its credit covered it, so an IOPS-bound op was admitted a few I/Os per
loop pass: Swarm's 96 I/O ops took 422 device rounds over 126 passes, and the
loop's CPU (86-98 ms for a 73 ms replay against 26 ms modelled) bound the
replay, 16-21% slower than the model (:mod:`kvtier.compare.replayer`).  Idle
time banks nothing: a device with no started op does nothing, and the next op's
share starts when the loop starts it.
"""

from __future__ import annotations

import math

import numpy as np

from real.targets import Limits

TOL_S = 1e-12  # work left below this (rounding) is done


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


def op_costs(
    pacers: list, first: np.ndarray, dev_of: np.ndarray, write: np.ndarray, size: np.ndarray
) -> np.ndarray | None:
    """Device seconds of each op's I/Os (0 for ops of unpaced devices and copy or
    compute ops), or None when no device is paced.  ``pacers[k]``: device ``k``'s
    :class:`Pacer` or None; op ``j`` (of device ``dev_of[j]``, writing where
    ``write[j]``) issues I/Os ``first[j]:first[j + 1]`` of ``size`` bytes."""
    paced = [k for k, p in enumerate(pacers) if p is not None]
    if not paced:
        return None
    n_ios = np.diff(first)
    io_op = np.repeat(np.arange(len(n_ios)), n_ios)
    io_dev, io_write = dev_of[io_op], write[io_op]
    cost = np.zeros(len(io_op))
    for k in paced:
        mine = io_dev == k
        cost[mine] = io_costs(pacers[k].limits, io_write[mine], size[mine])
    return np.bincount(io_op, weights=cost, minlength=len(n_ios))


class Pacer:
    """One device's time shared equally by its started ops (``limits``: its rates)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.left: dict[int, float] = {}  # started op -> device seconds it still needs
        self.t = 0.0  # the fluid's time: ``left`` is as of then
        self.finish: dict[int, float] = {}  # op -> its paced finish, once served

    def start(self, j: int, cost: float, now: float) -> list[int]:
        """Op ``j``, needing ``cost`` device seconds, starts at ``now``; the ops served
        by then (:meth:`advance`: ``j`` itself when it needs nothing)."""
        done = self.advance(now)
        self.left[j] = cost
        return done + self.advance(now) if cost <= TOL_S else done

    def next_finish(self) -> float:
        """When the next started op's work is served (inf: none started): the op
        needing least, at ``h`` times its need with ``h`` ops sharing."""
        if not self.left:
            return math.inf
        return self.t + len(self.left) * min(self.left.values())

    def advance(self, now: float) -> list[int]:
        """Run the fluid to ``now``; the ops served by then (their :attr:`finish` set),
        in finishing order."""
        now, done = max(now, self.t), []
        while self.left:
            t_next = self.next_finish()
            if t_next > now:
                share = (now - self.t) / len(self.left)
                for j in self.left:
                    self.left[j] -= share
                break
            served = min(self.left.values())
            for j in list(self.left):  # start order: ties finish in it
                self.left[j] -= served
                if self.left[j] <= TOL_S:
                    del self.left[j]
                    self.finish[j] = t_next
                    done.append(j)
            self.t = t_next
        self.t = max(self.t, now)  # an idle device banks nothing
        return done

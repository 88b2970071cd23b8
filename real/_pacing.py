"""User-space pacing: a device's time, shared by its started ops, on its own clock.

Where the kernel offers no block throttling (or the user is not root) the
replayer itself holds each device to its :class:`~real.targets.Limits`.  As in
the simulator (:func:`sim.hw.machine.ssd_rates`: an op's ``n`` I/Os of ``bytes``
in all run at ``min(bandwidth, IOPS x bytes / n)`` of a device whose capacity is
1) and in the kernel's blk-throttle (a bytes bucket and an I/Os bucket, each
filled at its own rate), an op *costs* device time::

    cost = max(bytes / bps, n / iops)      (a rate of 0 is no limit: its term is 0)

with the read or write figures by direction, and reads and writes draw on the
same time.  Until 2026-12-03 the cost was summed per I/O, ``max(size / bps,
1 / iops)`` each, which charges an op mixing 4 KiB I/Os (bound by IOPS) with
larger ones (bound by bytes) both limits at once: Swarm (static routing)'s
fetch ops, 64 I/Os of 4-40 KiB, cost 3.36 ms each on average against the
model's 2.89 ms at the emulation of h20-8ssd (151.7 MB/s, 24,188 IOPS).

Pacing at completion (since 2026-12-02).  A paced op's I/Os are issued as an
unpaced op's are (as many as the slots allow, one batch a round); what the pacer
holds back is the op's *end*.  The device's time is a fluid shared equally by
its started ops (processor sharing: each op has all its I/Os queued, so each
could use the whole device, and max-min gives each ``1 / h`` of it while ``h``
ops have work left), as the simulator's flows share a device's rate.  When the
op's cost has been served it has its *paced finish* ``F``; it ends at::

    end = max(F - late + L, last completion)

``L`` is the emulated device's access latency, the simulator's latency phase
(:mod:`sim.executor`): the target's ``latency_s`` (read or write), the latency of
its SSD in the profile the plan is simulated on (:func:`kvtier.compare.replayer.paced`;
for the emulations, the replayer's measured QD1 time, :func:`real.validate.engine_costs`).
The pacer enforces it as it enforces the profile's bandwidth and IOPS: they are the
emulated device; what the replay measures is the replayer's loop and the I/Os' own
completions (the ``last completion`` term).  Until 2026-12-03 ``L`` was estimated in
the replay, as the least issue-to-first-completion time over the device's ops so far:
a least statistic, on ops whose first completion waits for a whole round's
submission, so it fell to 0.13-0.2 ms against the model's 0.39 ms QD1 median and
PQCache's short fetch ops (1-37 I/Os on a device) replayed 8-17% faster than
modelled in ten quiet runs (a median first completion of ops issued to an idle
device, tried before, gave 0.91 ms for Swarm (static routing)'s 64-I/O ops and
PQCache -10..-15%).  ``late`` is how long after the op
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


def op_cost_of(
    limits: Limits, write: np.ndarray, nbytes: np.ndarray, n_ios: np.ndarray
) -> np.ndarray:
    """Device seconds of each op (``write``: its direction, ``nbytes``: its bytes,
    ``n_ios``: its I/Os): the binding one of its two limits."""
    out = np.zeros(len(nbytes))
    for w, bps, iops in (
        (False, limits.read_bps, limits.read_iops),
        (True, limits.write_bps, limits.write_iops),
    ):
        mine = write == w
        by_bytes = nbytes[mine] / bps if bps > 0 else 0.0
        by_ios = n_ios[mine] / iops if iops > 0 else 0.0
        out[mine] = np.maximum(by_bytes, by_ios)
    return out


def op_costs(
    pacers: list, first: np.ndarray, dev_of: np.ndarray, write: np.ndarray, size: np.ndarray
) -> np.ndarray | None:
    """Device seconds of each op (0 for ops of unpaced devices and copy or compute
    ops), or None when no device is paced.  ``pacers[k]``: device ``k``'s
    :class:`Pacer` or None; op ``j`` (of device ``dev_of[j]``, writing where
    ``write[j]``) issues I/Os ``first[j]:first[j + 1]`` of ``size`` bytes."""
    paced = [k for k, p in enumerate(pacers) if p is not None]
    if not paced:
        return None
    n_ios = np.diff(first)
    io_op = np.repeat(np.arange(len(n_ios)), n_ios)
    nbytes = np.bincount(io_op, weights=size, minlength=len(n_ios))
    cost = np.zeros(len(n_ios))
    for k in paced:
        mine = dev_of == k
        cost[mine] = op_cost_of(pacers[k].limits, write[mine], nbytes[mine], n_ios[mine])
    return cost


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

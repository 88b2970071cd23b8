"""A device's round robin laid out ahead: one slice of arrays per round.

The simulator shares a device among its started ops one I/O at a time, in
turn (:mod:`real.scheduler`).  While no op's own queue depth binds and no op
starts or runs out, that turn order is fixed: with ops ``o_0 .. o_{m-1}`` in
turn order, the next I/Os are round 0 of every op, then round 1, and so on.
:class:`RoundRobin` writes ``R`` such rounds (``R`` = the fewest I/Os any op
has left, at most ``CHUNK / m``) as arrays of plan I/O index, offset and
length, and a round of the replay loop queues the next slice of them.  When an
op starts (it is appended to the device's ``active`` deque) or the rounds run
out, :meth:`RoundRobin.sync` writes back how far each op got (``p`` entries
consumed: op ``i`` issued ``p // m + (i < p % m)``) and turns the deque as the
one-at-a-time loop would have (the op after the last one served first, ops
with nothing left removed), so the next layout continues the same turn order.
"""

from __future__ import annotations

import numpy as np

CHUNK = 8192  # most I/Os laid out at once


def water_fill(avail: list[int], room: int) -> list[int]:
    """I/Os per op when ``room`` are handed out one at a time in turn (see module doc)."""
    if sum(avail) <= room:
        return list(avail)
    srt, m, used = sorted(avail), len(avail), 0
    level = 0
    for i, a in enumerate(srt):
        if used + a * (m - i) >= room:
            level = (room - used) // (m - i)
            break
        used += a
    take = [min(a, level) for a in avail]
    extra = room - sum(take)
    for k, a in enumerate(avail):
        if extra == 0:
            break
        if a > take[k]:
            take[k] += 1
            extra -= 1
    return take


class RoundRobin:
    """The laid-out turn order of device ``k`` of a :class:`real._iobatch.BatchIO`."""

    def __init__(self, io, k: int) -> None:
        self.io, self.k = io, k
        self.order: list[int] | None = None  # ops in turn order when laid out
        self.m = self.pos = self.size = self.last = self.ptr = 0
        self.start: list[int] = []  # each op's next_io when laid out
        self.exh: list[int] = []  # positions of the ops whose last I/O is in the last round

    def issue(self, room: int) -> int:
        """Queue up to ``room`` I/Os in turn; -1 (nothing queued) when an op's cap binds."""
        io, k = self.io, self.k
        d = io.devs[k]
        count = 0
        while count < room:
            if self.order is None or self.pos == self.size or len(d.active) != self.m:
                self.sync()
                if not d.active:
                    break
                if not self.build():
                    return count or -1
            p = self.pos
            q = min(self.size, p + room - count)
            io._queue(k, d, self.idx[p:q], self.off[p:q], self.len[p:q])
            self.pos = q
            while self.ptr < len(self.exh) and self.last + self.exh[self.ptr] < q:
                io.closing[k].append(self.order[self.exh[self.ptr]])  # last I/O issued
                self.ptr += 1
            count += q - p
        return count

    def sync(self) -> None:
        """Write back each op's progress and turn the device's ``active`` deque."""
        if self.order is None:
            return
        io, d, order = self.io, self.io.devs[self.k], self.order
        full, r = divmod(self.pos, self.m)
        nxt, n_ios = io.next_io, io.n_ios
        for i, j in enumerate(order):
            nxt[j] = self.start[i] + full + (i < r)
        started = list(d.active)[self.m :]  # appended since the layout
        d.active.clear()
        d.active.extend(j for j in order[r:] + order[:r] if nxt[j] < n_ios[j])
        d.active.extend(started)
        self.order = None

    def build(self) -> bool:
        """Lay out the next rounds; False when an op's own queue depth is below the device's."""
        io, d = self.io, self.io.devs[self.k]
        ops = list(d.active)
        if any(io.op_cap[j] < d.qd for j in ops):
            return False
        nxt, n_ios, first = io.next_io, io.n_ios, io.first
        rem = [n_ios[j] - nxt[j] for j in ops]
        m = len(ops)
        rounds = max(1, min(min(rem), CHUNK // m))
        start = np.asarray([first[j] + nxt[j] for j in ops], np.int64)
        if m == 1:
            self.idx = np.arange(start[0], start[0] + rounds)
        else:
            self.idx = (start[None, :] + np.arange(rounds)[:, None]).ravel()
        self.off, self.len = io.io_off[self.idx], io.io_len[self.idx]
        self.order, self.m, self.start = ops, m, [nxt[j] for j in ops]
        self.pos, self.size, self.last, self.ptr = 0, m * rounds, (rounds - 1) * m, 0
        self.exh = [i for i, r in enumerate(rem) if r == rounds]
        return True

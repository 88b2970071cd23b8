"""The replayer's I/O rounds, a batch at a time: pick, queue, complete, drain.

Every in-flight I/O owns one buffer slot; slot ``s`` of device ``d`` is the
*global slot* ``g = base[d] + s`` and its engine tag is ``g + 1``.  Three
arrays indexed by global slot (``slot_op``, ``slot_off``, ``slot_len``) say
what each in-flight I/O is, so completions are accounted with numpy over the
whole round: a tag array in, per-device and per-op counts out, no Python
object per I/O.  With the raw ring (:class:`real.engine.RawEngine`) a device's
share of a round is one vectorised push; the per-I/O engines get one
``queue`` call per I/O.

Fair sharing within a device (the simulator's round robin, one I/O at a time
over the started ops) is computed in closed form: each op may take
``avail = min(I/Os left, its queue depth - its in-flight)``; when the device's
free slots ``room`` fall short of their sum, every op gets ``min(avail,
level)`` with ``level`` the largest water level that fits, and the
``room - sum`` left over go one each to the first ops, in turn order, that
could take more.  The I/Os are queued interleaved (round ``r`` of every op
before round ``r + 1``), as the one-at-a-time loop would have queued them.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from real._blocks import BLOCK
from real._checks import io_error, mismatch
from real._devices import Device
from real.engine import GDS


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


def _counts(ops: np.ndarray) -> list[tuple[int, int]]:
    """(op, count) for the distinct values of ``ops``; a bincount when they are close."""
    lo, hi = int(ops.min()), int(ops.max())
    if lo == hi:
        return [(lo, len(ops))]
    if hi - lo < 4 * len(ops) + 64:
        cnt = np.bincount(ops - lo)
        nz = np.flatnonzero(cnt)
        return list(zip((nz + lo).tolist(), cnt[nz].tolist(), strict=True))
    uniq, cnt = np.unique(ops, return_counts=True)
    return list(zip(uniq.tolist(), cnt.tolist(), strict=True))


class BatchIO:
    """Mixin of :class:`real.scheduler.Replayer`: the I/O half of a round."""

    def _init_slots(self) -> None:
        qds = [d.qd for d in self.devs]
        self.base = np.concatenate([[0], np.cumsum(qds)]).astype(np.int64)
        total = int(self.base[-1])
        self.slot_op = np.zeros(total, np.int64)
        self.slot_off = np.zeros(total, np.int64)
        self.slot_len = np.zeros(total, np.int64)
        self.slot_dev = np.repeat(np.arange(len(qds)), qds)
        self.addr = [np.frombuffer(d.arena, np.uint8).ctypes.data for d in self.devs]
        self.slot_bytes = [d.arena.shape[1] * 8 for d in self.devs]
        for d in self.devs:
            d.free.reverse()  # slot 0 is taken first
        self._batched = bool(getattr(self.engine, "batched", False))
        self._write_np = np.asarray(self.write, dtype=bool)

    # ---- issue ------------------------------------------------------------------------------
    def _issue(self, now: float) -> int:
        """Fill every device's free slots from its started ops; the number of I/Os queued."""
        issued = 0
        for k, d in enumerate(self.devs):
            if not d.active or d.inflight >= d.qd or d.wake > now:
                continue
            if d.pacer is None:
                count = self._issue_batch(k, d, d.qd - d.inflight)
            else:
                count = self._issue_paced(k, d, now)
            if count:
                d.issued(now, count)
                issued += count
        return issued

    def _issue_paced(self, k: int, d: Device, now: float) -> int:
        """One I/O at a time while the device's token buckets allow it."""
        count = 0
        while d.active and d.inflight + count < d.qd:
            j = next((j for j in d.active if self.op_inflight[j] < self.op_cap[j]), None)
            if j is None:
                break
            size = int(self.io_len[self.first[j] + self.next_io[j]])
            wait = d.pacer.delay(self.write[j], size, now)
            if wait > 0:
                d.wake = now + wait
                break
            while d.active[0] != j:
                d.active.rotate(-1)
            count += self._issue_batch(k, d, 1)
        return count

    def _issue_batch(self, k: int, d: Device, room: int) -> int:
        """Queue up to ``room`` I/Os of device ``d`` (index ``k``) in turn order."""
        active, nxt, inflight = d.active, self.next_io, self.op_inflight
        ops = list(active)
        avail = [min(self.n_ios[j] - nxt[j], self.op_cap[j] - inflight[j]) for j in ops]
        take = water_fill(avail, room)
        n = sum(take)
        if n == 0:
            return 0
        starts = [self.first[j] + nxt[j] for j in ops]
        if len(ops) == 1:
            idx = np.arange(starts[0], starts[0] + n)
            op_of = np.full(n, ops[0], np.int64)
        else:
            ks = np.asarray(take, np.int64)
            pos = np.repeat(np.arange(len(ops)), ks)
            within = np.arange(n) - np.repeat(np.cumsum(ks) - ks, ks)
            order = np.argsort(within * len(ops) + pos, kind="stable")
            idx = (np.asarray(starts, np.int64)[pos] + within)[order]
            op_of = np.asarray(ops, np.int64)[pos[order]]
        self._queue(k, d, op_of, idx, ops, take)
        served = 0
        for j, t in zip(ops, take, strict=True):
            nxt[j] += t
            inflight[j] += t
            served += t > 0
            if nxt[j] == self.n_ios[j]:
                active.remove(j)
        if active and len(ops) > 1:
            active.rotate(-(served % len(active)))
        return n

    def _queue(self, k, d: Device, op_of, idx, ops, take) -> None:
        """Give the I/Os ``idx`` (of ops ``op_of``) slots and hand them to the engine."""
        n = len(idx)
        local = d.free[-n:][::-1]
        del d.free[-n:]
        g = self.base[k] + np.asarray(local, np.int64)
        offs, lens = self.io_off[idx], self.io_len[idx]
        self.slot_op[g], self.slot_off[g], self.slot_len[g] = op_of, offs, lens
        self.inflight += n
        write = self._write_np[op_of]
        if any(self.write[j] for j in ops):
            for s, o, size in zip(np.asarray(local)[write], offs[write], lens[write], strict=True):
                d.fmt.render(int(o) // BLOCK, d.slots[s][: int(size)])
        gds = any(self.gds_op[j] for j in ops)
        if self._batched and not gds:
            addrs = self.addr[k] + np.asarray(local, np.uint64) * np.uint64(self.slot_bytes[k])
            self.engine.push(d.fd, write, d.flags, offs, addrs, lens, g + 1)
            return
        for s, gg, j, o, size in zip(
            local, g.tolist(), op_of.tolist(), offs.tolist(), lens.tolist(), strict=True
        ):
            flags = d.flags | (GDS if self.gds_op[j] else 0)
            self._engine_queue(gg + 1, d.fd, self.write[j], d.slots[s][:size], o, flags)

    # ---- complete -------------------------------------------------------------------------
    def _wait(self, timeout: float | None) -> tuple[np.ndarray, np.ndarray]:
        got = self.engine.wait(timeout)
        if isinstance(got, tuple):
            return got
        arr = np.asarray(got, dtype=np.int64).reshape(-1, 2)
        return arr[:, 0], arr[:, 1]

    def _complete(self, tags: np.ndarray, res: np.ndarray, t: float) -> None:
        """Account a round's completions at time ``t``: check, verify as one batch, count."""
        n = len(tags)
        if n == 0:
            self._reaped = None
            return
        g = tags.astype(np.int64) - 1
        self.inflight -= n  # before anything can raise: _drain waits for the rest only
        self._reaped = None
        one = len(self.devs) == 1
        devs = np.zeros(n, np.int64) if one else self.slot_dev[g]
        per_dev = [n] if one else np.bincount(devs, minlength=len(self.devs)).tolist()
        ops, lens = self.slot_op[g], self.slot_len[g]
        for k, c in enumerate(per_dev):
            if c:
                d = self.devs[k]
                d.completed(t, c)
                d.free.extend((g if one else g[devs == k] - self.base[k]).tolist())
        bad = res != lens
        if bad.any():
            i = int(np.argmax(bad))
            d = self.devs[int(devs[i])]
            j = int(ops[i])
            raise io_error(d, self.write[j], int(self.slot_off[g[i]]), int(lens[i]), int(res[i]))
        write = self._write_np[ops]
        writes = bool(write.any())
        if self.verify and not write.all():
            self._verify(g[~write], devs[~write], lens[~write]) if writes else self._verify(
                g, devs, lens
            )
        for k, c in enumerate(per_dev):
            if c:
                d = self.devs[k]
                d.n_ios += c
                if one and not writes:
                    d.bytes_read += int(lens.sum())
                    continue
                mine = devs == k
                w = write[mine]
                d.bytes_written += int(lens[mine][w].sum())
                d.bytes_read += int(lens[mine][~w].sum())
        op_inflight, op_done, n_ios = self.op_inflight, self.op_done, self.n_ios
        for j, c in _counts(ops):
            op_inflight[j] -= c
            op_done[j] += c
            if op_done[j] == n_ios[j]:
                self._end(j, t)

    def _verify(self, g: np.ndarray, devs: np.ndarray, lens: np.ndarray) -> None:
        """Check the reads in slots ``g``; 4 KiB reads of a device in one comparison."""
        offs = self.slot_off[g]
        if len(self.devs) == 1 and bool((lens == BLOCK).all()):  # the common case, short
            d = self.devs[0]
            row = d.fmt.first_bad_block(d.arena[g, : BLOCK // 8], (offs // BLOCK).astype(np.uint64))
            if row >= 0:
                raise mismatch(d, d.slots[int(g[row])], int(offs[row]), 0)
            return
        for k in np.unique(devs).tolist():
            d, mine = self.devs[k], devs == k
            single = mine & (lens == BLOCK)
            if single.any():
                local = g[single] - self.base[k]
                blocks = (offs[single] // BLOCK).astype(np.uint64)
                row = d.fmt.first_bad_block(d.arena[local, : BLOCK // 8], blocks)
                if row >= 0:
                    raise mismatch(d, d.slots[int(local[row])], int(offs[single][row]), 0)
            for i in np.nonzero(mine & (lens != BLOCK))[0].tolist():
                s, off, size = int(g[i] - self.base[k]), int(offs[i]), int(lens[i])
                bad = d.fmt.first_mismatch(d.slots[s][:size], off // BLOCK)
                if bad >= 0:
                    raise mismatch(d, d.slots[s], off, bad)

    def _drain(self, drain_s: float) -> None:
        """Wait for I/Os still in flight (after an error): the kernel owns their buffers.

        I/Os queued but not yet submitted (an interrupt mid-round) are submitted
        first, so that every counted I/O completes.
        """
        with contextlib.suppress(Exception):
            self.engine.submit()
        end = time.monotonic() + drain_s
        while self.inflight > 0 and time.monotonic() < end:
            try:
                tags, _ = self._wait(1.0)
            except OSError:
                break
            self.inflight -= len(tags)

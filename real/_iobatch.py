"""The replayer's I/O rounds, a batch at a time: pick, queue, complete, drain.

Every in-flight I/O owns one buffer slot; slot ``s`` of device ``d`` is the
*global slot* ``g = base[d] + s`` and its engine tag is ``g + 1``.  Arrays
indexed by global slot hold what each busy slot is doing: ``slot_io`` (the
plan I/O, an index into the layout's offset/length arrays), ``slot_off`` and
``slot_len`` (with the raw ring primed, :meth:`real.engine.RawEngine.prime`,
these two *are* the offset and length fields of SQE ``g``, which belongs to
slot ``g`` for good).  A round's completions are accounted with numpy over the
whole round -- tags in, lengths, offsets and device counts out, no Python
object per I/O -- and a device's share of a round is three array stores and
one index push.  Free slots are a stack per device in one array (``free_g``);
a slot's entries are stale while it is free.

Fair sharing within a device is the simulator's round robin, one I/O at a
time over the started ops in turn (:mod:`real._rrstream` when no op's own
queue depth binds: the turn order is laid out ahead as arrays and a round
takes a slice).  When an op's ``queue_depth`` is below the device's, turns
are handed out in closed form: each op may take ``avail = min(I/Os left, its
queue depth - its in-flight)``; when the device's free slots ``room`` fall
short of their sum, every op gets ``min(avail, level)`` with ``level`` the
largest water level that fits, and the ``room - sum`` left over go one each
to the first ops, in turn order, that could take more.  A paced device issues
the same way: its pacer holds back an op's end, not its I/Os (:mod:`real._pacing`).

An op ends when its last I/O has completed: an op whose I/Os have all been
issued is *closing* on its device, and ends in the first round after which no
slot of the device holds one of its I/Os -- on a paced device, not before its
paced end (:meth:`real.scheduler.Replayer._io_done`).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from real._blocks import BLOCK
from real._checks import io_error, mismatch
from real._devices import Device
from real._pacing import op_costs
from real._rrstream import RoundRobin, water_fill
from real.engine import GDS

FEW_BLOCKS = 32  # reads of up to this many blocks (128 KiB) are checked as one batch of rows


class BatchIO:
    """Mixin of :class:`real.scheduler.Replayer`: the I/O half of a round."""

    def _init_slots(self) -> None:
        qds = [d.qd for d in self.devs]
        self.base = np.concatenate([[0], np.cumsum(qds)]).astype(np.int64)
        self._base = self.base.tolist()
        total = int(self.base[-1])
        self.slot_io = np.full(total, -1, np.int64)  # plan I/O of a busy slot (stale when free)
        self.slot_off = np.zeros(total, np.int64)  # its byte offset and length: the raw
        self.slot_len = np.zeros(total, np.int64)  # ring's SQE fields once primed
        self.slot_dev = np.repeat(np.arange(len(qds)), qds)
        stacks = [np.arange(b + q - 1, b - 1, -1) for b, q in zip(self._base, qds, strict=False)]
        self.free_g = np.concatenate(stacks).astype(np.int64)  # top of each stack: slot 0
        self.nfree = list(qds)
        self.closing: list[list[int]] = [[] for _ in self.devs]
        self.rr = [RoundRobin(self, k) for k in range(len(self.devs))]
        self._write_np = np.asarray(self.write, dtype=bool)
        dev_of = np.asarray(self.dev_of)
        self.dev_writes = [bool(self._write_np[dev_of == k].any()) for k in range(len(self.devs))]
        gds = np.asarray(self.gds_op, dtype=bool)
        self.dev_gds = [bool(gds[dev_of == k].any()) for k in range(len(self.devs))]
        self._all_blocks = bool((self.io_len == BLOCK).all())
        self._slotted = False
        pacers = [d.pacer for d in self.devs]
        self.op_cost = op_costs(pacers, self.first_np, dev_of, self._write_np, self.io_len)
        self.dev_paced = [p is not None for p in pacers]

    def _prime_engine(self) -> None:
        """Fix the raw ring's SQE of every slot (after the devices' flags are final)."""
        if not getattr(self.engine, "batched", False):
            return
        flags = np.concatenate([np.full(d.qd, d.flags) for d in self.devs])
        spans = [(np.frombuffer(d.arena, np.uint8).ctypes.data, d.arena.nbytes) for d in self.devs]
        addrs = np.concatenate(
            [
                a + np.arange(d.qd, dtype=np.uint64) * np.uint64(d.arena.shape[1] * 8)
                for (a, _), d in zip(spans, self.devs, strict=True)
            ]
        )
        fds = [d.fd for d in self.devs]
        self._slotted = self.engine.prime(self.slot_dev, fds, spans, addrs, flags)
        if self._slotted:
            self.slot_off, self.slot_len = self.engine.sq_off, self.engine.sq_len

    def op_of(self, ios: np.ndarray) -> np.ndarray:
        """The op of each plan I/O index."""
        return np.searchsorted(self.first_np, ios, side="right") - 1

    # ---- issue ------------------------------------------------------------------------------
    def _issue(self, now: float) -> int:
        """Fill every device's free slots from its started ops; the number of I/Os queued."""
        issued = 0
        for k, d in enumerate(self.devs):
            if not d.active or d.inflight >= d.qd:
                continue
            count = self.rr[k].issue(d.qd - d.inflight)
            if count < 0:  # an op's own queue depth binds: the general path
                count = self._issue_batch(k, d, d.qd - d.inflight)
            if count:
                d.issued(now, count)
                issued += count
        return issued

    def _live_ios(self, k: int) -> np.ndarray:
        """The plan I/Os in flight on device ``k``: its slots not on its free stack."""
        b = self._base[k]
        busy = np.ones(self._base[k + 1] - b, bool)
        busy[self.free_g[b : b + self.nfree[k]] - b] = False
        return self.slot_io[b : self._base[k + 1]][busy]

    def _op_inflight(self, k: int) -> dict[int, int]:
        """In-flight I/Os per op of device ``k`` (from the slots)."""
        live = self._live_ios(k)
        if not len(live):
            return {}
        ops, cnt = np.unique(self.op_of(live), return_counts=True)
        return dict(zip(ops.tolist(), cnt.tolist(), strict=True))

    def _issue_batch(self, k: int, d: Device, room: int, infl: dict | None = None) -> int:
        """Queue up to ``room`` I/Os of device ``d`` (index ``k``) in turn order (water fill);
        ``infl``: in-flight I/Os per op when the caller has counted them."""
        ops = list(d.active)
        infl = self._op_inflight(k) if infl is None else infl
        nxt = self.next_io
        avail = [min(self.n_ios[j] - nxt[j], self.op_cap[j] - infl.get(j, 0)) for j in ops]
        return self._queue_takes(k, d, ops, water_fill(avail, room))

    def _queue_takes(self, k: int, d: Device, ops: list[int], take: list[int]) -> int:
        """Queue ``take[i]`` next I/Os of each op ``ops[i]`` of device ``k``, interleaved
        one per op in turn; ops with nothing left close, and the turn moves on."""
        n = sum(take)
        if n == 0:
            return 0
        active, nxt = d.active, self.next_io
        starts = [self.first[j] + nxt[j] for j in ops]
        ks = np.asarray(take, np.int64)
        pos = np.repeat(np.arange(len(ops)), ks)
        within = np.arange(n) - np.repeat(np.cumsum(ks) - ks, ks)
        order = np.argsort(within * len(ops) + pos, kind="stable")
        idx = (np.asarray(starts, np.int64)[pos] + within)[order]
        self._queue(k, d, idx, self.io_off[idx], self.io_len[idx])
        served = 0
        for j, t in zip(ops, take, strict=True):
            nxt[j] += t
            served += t > 0
            if nxt[j] == self.n_ios[j]:
                active.remove(j)
                self.closing[k].append(j)
        if active and len(ops) > 1:
            active.rotate(-(served % len(active)))
        return n

    def _queue(self, k: int, d: Device, idx: np.ndarray, offs: np.ndarray, lens) -> None:
        """Give the plan I/Os ``idx`` (in issue order) slots and hand them to the engine."""
        n, top = len(idx), self._base[k] + self.nfree[k]
        g = self.free_g[top - n : top][::-1]  # a view (top first), used before the stack regrows
        self.nfree[k] -= n
        self.slot_io[g] = idx
        self.slot_off[g] = offs
        self.slot_len[g] = lens
        self.inflight += n
        write = None
        if self.dev_writes[k]:
            write = self._write_np[self.op_of(idx)]
            for s, o, size in zip(
                (g[write] - self._base[k]).tolist(),
                offs[write].tolist(),
                lens[write].tolist(),
                strict=True,
            ):
                d.fmt.render(o // BLOCK, d.slots[s][:size])
        if self._slotted and not self.dev_gds[k]:
            self.engine.push_slots(g, write)
            return
        ops = self.op_of(idx).tolist()
        for gg, j, o, size in zip(g.tolist(), ops, offs.tolist(), lens.tolist(), strict=True):
            flags = d.flags | (GDS if self.gds_op[j] else 0)
            buf = d.slots[gg - self._base[k]][:size]
            self._engine_queue(gg + 1, d.fd, self.write[j], buf, o, flags)

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
        self._reaped = None
        if n == 0:
            return
        g = tags - 1
        self.inflight -= n  # before anything can raise: _drain waits for the rest only
        lens = self.slot_len[g]
        one = len(self.devs) == 1
        devs = None if one else self.slot_dev[g]
        hit = [0] if one else np.flatnonzero(np.bincount(devs, minlength=len(self.devs))).tolist()
        for k in hit:
            gk = g if one else g[devs == k]
            top = self._base[k] + self.nfree[k]
            self.free_g[top : top + len(gk)] = gk
            self.nfree[k] += len(gk)
            self.devs[k].completed(t, len(gk))
        if (res != lens).any():
            i = int(np.argmax(res != lens))
            d = self.devs[int(self.slot_dev[g[i]])]
            j, o = int(self.op_of(self.slot_io[g[i]])), int(self.slot_off[g[i]])
            raise io_error(d, self.write[j], o, int(lens[i]), int(res[i]))
        write = self._write_np[self.op_of(self.slot_io[g])] if any(self.dev_writes) else None
        if self.verify:
            if one and write is None and self._all_blocks:
                self._check_round(self.devs[0], g)
            else:
                self._verify(g, self.slot_off[g], lens, devs, write)
        self._count(hit, n, lens, devs, write)
        for k in hit:
            if self.closing[k]:
                self._close(k, t)

    def _count(self, hit, n, lens, devs, write) -> None:
        """Bytes and I/Os per device, once verified."""
        if write is None and len(hit) == 1:
            d = self.devs[hit[0]]
            d.n_ios += n
            d.bytes_read += n * BLOCK if self._all_blocks else int(lens.sum())
            return
        for k in hit:
            d = self.devs[k]
            mine = slice(None) if devs is None else devs == k
            w = np.zeros(len(lens), bool)[mine] if write is None else write[mine]
            lk = lens[mine]
            d.n_ios += len(lk)
            d.bytes_written += int(lk[w].sum())
            d.bytes_read += int(lk[~w].sum())

    def _close(self, k: int, t: float) -> None:
        """End the closing ops of device ``k`` with no I/O left in flight."""
        live = self._live_ios(k)
        busy = set(np.unique(self.op_of(live)).tolist()) if len(live) else set()
        ends = [j for j in self.closing[k] if j not in busy]
        if ends:
            self.closing[k] = [j for j in self.closing[k] if j in busy]
            for j in ends:
                if self.dev_paced[k]:
                    self._io_done(j, t)
                else:
                    self._end(j, t)

    def _verify(self, g, offs, lens, devs, write) -> None:
        """Check the reads of a round: a device's reads of up to :data:`FEW_BLOCKS`
        blocks in one comparison (4 KiB reads without expanding), larger ones each
        in one."""
        if write is not None:
            keep = ~write
            g, offs, lens = g[keep], offs[keep], lens[keep]
            devs = None if devs is None else devs[keep]
            if not len(g):
                return
        for k in [0] if devs is None else np.unique(devs).tolist():
            d, mine = self.devs[k], slice(None) if devs is None else devs == k
            local, ok, lk = g[mine] - self._base[k], offs[mine], lens[mine]
            if (lk == BLOCK).all():
                self._check_blocks(d, local, ok)
                continue
            few = lk <= FEW_BLOCKS * BLOCK
            self._check_few(d, local[few], ok[few], lk[few])
            for i in np.flatnonzero(~few).tolist():
                s, off, size = int(local[i]), int(ok[i]), int(lk[i])
                bad = d.fmt.first_mismatch(d.slots[s][:size], off // BLOCK)
                if bad >= 0:
                    raise mismatch(d, d.slots[s], off, bad)

    def _check_round(self, d: Device, g: np.ndarray) -> None:
        """Verify a round of single-block reads of the only device (global slot = local).

        A round reaps most of what it queued, so the reaped slots span a range of
        the arena not much longer than their number: the range is checked whole
        (arena rows and ``slot_off`` as views, nothing gathered but the expected
        images) and only the reaped rows' results count -- the other rows are in
        flight or idle and hold anything.  Sparse rounds gather their rows.
        """
        n = len(g)
        lo, hi = int(g.min()), int(g.max()) + 1
        if hi - lo > 2 * n:
            BatchIO._check_blocks(d, g, self.slot_off[g])
            return
        blocks = self.slot_off[lo:hi] // BLOCK
        if hi - lo == n:  # one run: every row counts
            row = d.fmt.first_bad_block(d.arena[lo:hi, : BLOCK // 8], blocks)
        else:
            ok = d.fmt.good_rows(d.arena[lo:hi, : BLOCK // 8], blocks)[g - lo]
            row = -1 if ok.all() else int(g[int(np.argmin(ok))]) - lo
        if row >= 0:
            raise mismatch(d, d.slots[lo + row], int(blocks[row]) * BLOCK, 0)

    @staticmethod
    def _check_blocks(d: Device, local: np.ndarray, offs: np.ndarray) -> None:
        """Verify the single-block reads in slots ``local`` (at byte ``offs``) of ``d``."""
        if not len(local):
            return
        row = d.fmt.first_bad_block(d.arena[local, : BLOCK // 8], offs // BLOCK)
        if row >= 0:
            raise mismatch(d, d.slots[int(local[row])], int(offs[row]), 0)

    @staticmethod
    def _check_few(d: Device, local: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> None:
        """Verify reads of a few blocks each (slots ``local``, at byte ``offs``, ``lens``
        bytes) as one batch: every block of every read is a row of one comparison
        (:meth:`~real._blocks.BlockFormat.first_bad_block`).  Until 2026-11-25 reads of
        2-4 blocks were checked one by one in Python (~15 us each) and larger ones by
        numpy per read, so Swarm's and PQCache's 8-76 KiB reads cost the replay loop
        more than the 4 KiB batches the model's per-I/O cost is measured on."""
        if not len(local):
            return
        local, offs = local.astype(np.int64), offs.astype(np.int64)
        count = lens.astype(np.int64) // BLOCK
        rows = np.repeat(local, count)
        within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        blocks = np.repeat(offs // BLOCK, count) + within
        first = rows * d.arena.shape[1] + within * (BLOCK // 8)  # each block's first word
        words = d.arena.reshape(-1)[first[:, None] + np.arange(BLOCK // 8)]
        row = d.fmt.first_bad_block(words, blocks)
        if row >= 0:
            i = int(np.searchsorted(np.cumsum(count), row, "right"))
            raise mismatch(d, d.slots[int(local[i])], int(offs[i]), int(within[row]))

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

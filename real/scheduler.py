"""The replay loop: a transfer plan's ops, in dependency order, against real devices.

Each op goes through the simulator's life cycle (:mod:`sim.executor`):
*ready* (every ``depends_on`` op ended) -> *start* (not before ``release_s``)
-> *end*.  A read/write op is exactly the I/Os its plan row states (the
regular pattern or its extents, :func:`real.datafile.io_layout`), issued in
that order, and ends when its last I/O has completed and,
for reads, been verified; a copy or compute op (no GPU here) is waited out for
the seconds the caller gives (the simulator's modelled time).  Times are
seconds from the start of the loop, taken with ``perf_counter``.

A copy or compute op runs on the clock of the GPU or core it stands for, not on
the loop's: it ends exactly its seconds after it started, and an op that waits
on it starts when it ended -- another copy or compute at once, an I/O op when the
loop next issues.  The loop fires timers between its passes, so it notices an end
up to a pass late (a paced pass cost 100-450 us on 4 devices, 2026-11-25/29); a GPU
does not wait for the host to notice before running the next kernel queued on its
stream.  The loop's lateness once stretched each copy and compute of the design
replays (72 per design): median 77-249 us each, p90 up to 838 us.  Six paired
replays of the designs (/dev/shm files paced at the emulation's limits,
2026-11-29), median step error before / after: PQCache -14.5% / -7%, InfLLM -1.6% /
+0.2%, Swarm -30% / -28% (its gap is the loop's own CPU:
:mod:`kvtier.compare.replayer`).

One loop iteration is one *round*: fire due timers (releases, ends of modelled
ops), let every device fill its free in-flight slots from its started ops, hand
the whole batch to the engine in one submit, then wait for completions (or the
next timer) and reap them all.  Slots are per device, so a slow device never
takes a fast one's: a device keeps at most its queue depth in flight
(``Target.queue_depth``, else the larger of the replay's ``qd`` and its ops'
``queue_depth``), an op at most its own ``queue_depth`` (0 = the device's).
Within a device, started ops take turns one I/O at a time (round robin), like
the simulator's fair sharing.  A paced device (:mod:`real._pacing`) issues the
same way; its pacer shares the device's time between its started ops and holds
each op's end until its share has served it (:meth:`Replayer._io_done`), on the
device's own clock: the loop wakes for an op's paced end, not for each I/O.

Every I/O has its own slot of a page-aligned per-device ``mmap`` arena (O_DIRECT
needs aligned memory); a write renders the blocks it stores, a read is checked
against what its blocks must hold (:mod:`real._blocks`) and any error, short
transfer or mismatch stops the run with a :class:`~real.errors.RealError`
after the I/Os still in flight have drained.

Device measures (:mod:`real._devices`, definitions in :mod:`kvtier.contracts.records`):
bytes and I/Os completed (reads once verified); ``busy_s``, the time with at
least one I/O in flight; ``util_mean = busy_s / makespan``.  Replay-only stats:
``inflight_mean``/``inflight_peak``, the time-average and the largest in-flight
count over the device's queue depth.  ``cpu_s`` of an
op is the loop's process CPU time shared over I/O ops by I/O count: per-op CPU
cannot be separated when one thread serves every op.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from kvtier.contracts.plan import depends_csr
from kvtier.contracts.records import Records, op_records
from kvtier.contracts.units import fmt_bytes
from real import _gds
from real._devices import Device, device_records, inflight_stats, open_device
from real._iobatch import BatchIO
from real.datafile import io_layout
from real.engine import make_engine, on_tmpfs
from real.errors import RealError
from real.targets import Target

DEFAULT_QD = 32
ARENA_LIMIT = 4 << 30
DRAIN_S = 30.0  # give up waiting for in-flight I/Os after an error
_START, _END, _HELD = 0, 1, 2  # _HELD: a paced op's end, on its device's clock


class Replayer(BatchIO):
    """Replays one plan once; see :func:`real.replay.replay` for the usual entry point."""

    def __init__(
        self,
        plan: pa.Table,
        targets: Mapping[str, Target],
        *,
        seed: int = 0,
        engine: str = "auto",
        qd: int = DEFAULT_QD,
        nonio_s: Mapping[int, float] | Sequence[float] | None = None,
        verify: bool = True,
        gds: str = "auto",
        allow_write_existing: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.plan, self.n, self.verify, self.notes = plan, plan.num_rows, verify, []
        layout = io_layout(plan)
        missing = [n for n in layout.nodes if n not in targets]
        if missing:
            raise RealError(f"no target for {', '.join(missing)}: the plan reads or writes it")
        self._load_ops(plan, layout, nonio_s)
        self._progress, self._tick = progress, max(1, self.n // 200)
        self.devs: list[Device] = []
        try:
            self._allow_write = allow_write_existing
            gds_reader = self._open_devices(layout, targets, seed, qd, gds)
            slots = sum(d.qd for d in self.devs)
            self.engine, self.engine_note = make_engine(engine, slots, gds_reader)
            self._engine_queue = getattr(self.engine, "queue", None)
            for d in self.devs:
                limited = not d.target.limits.unlimited and not d.target.pacing
                if d.target.kind == "loop" or limited or on_tmpfs(d.fd):
                    d.flags |= getattr(self.engine, "async_flag", 0)
            self._init_slots()
            self._prime_engine()
        except BaseException:
            self._close_devices()
            raise

    # ---- set-up ---------------------------------------------------------------------------
    def _load_ops(self, plan, layout, nonio_s) -> None:
        n = self.n
        kind = plan.column("kind").to_pylist()
        self.write = [k == "write" for k in kind]
        self.dev_of = layout.node.tolist()
        self.first_np = np.asarray(layout.first, np.int64)
        self.first = self.first_np.tolist()  # op j issues I/Os first[j]:first[j + 1]
        self.n_ios = np.diff(layout.first).tolist()
        self.io_off, self.io_len = layout.offset, layout.length
        self.op_qd = plan.column("queue_depth").to_numpy().tolist()
        self.gds_op = [
            p == "gds" and k == "read"
            for p, k in zip(plan.column("io_path").to_pylist(), kind, strict=True)
        ]
        self.release = plan.column("release_s").to_numpy().tolist()
        self.nonio = _durations(nonio_s, n)
        if nonio_s is None and any(d < 0 for d in self.dev_of):
            self.notes.append("copy/compute ops took 0 s: no modelled durations were given")
        offsets, values = depends_csr(plan)
        self.pending = np.diff(offsets).tolist()
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        order = np.argsort(values, kind="stable")
        self.dep_of = owner[order].tolist()
        self.dep_ptr = np.searchsorted(values[order], np.arange(n + 1)).tolist()
        self.ready_s, self.start_s, self.end_s = [np.nan] * n, [np.nan] * n, [np.nan] * n
        self.dep_end = [0.0] * n  # the latest end among each op's dependencies so far
        self.next_io = [0] * n  # I/Os issued per op
        self.op_cap = [0] * n
        self.issue_s = [np.nan] * n  # paced ops: when the loop started them
        self.io_end = [np.nan] * n  # paced ops: when their last I/O was reaped
        self.done = self.inflight = self.passes = 0
        self.paced_ops = self.real_bound = 0  # paced ops ended; of them, ended by their I/Os
        self.timers: list[tuple[float, int, int, int]] = []
        self._reaped: np.ndarray | None = None  # reaped, not yet handed to _complete
        self._seq = 0

    def _open_devices(self, layout, targets, seed, qd, gds) -> _gds.GdsReader | None:
        largest = layout.largest_io()
        budget = min(ARENA_LIMIT, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
        op_qd, write = np.asarray(self.op_qd), np.asarray(self.write)
        for k, name in enumerate(layout.nodes):
            t, mine = targets[name], layout.node == k
            dqd = max(1, t.queue_depth or max(qd, int(op_qd[mine].max())))
            slot = int(largest[k])
            if dqd * slot * len(layout.nodes) > budget:
                raise RealError(
                    f"{name}: {dqd} in-flight I/Os of {fmt_bytes(slot)} need "
                    f"{fmt_bytes(dqd * slot)} of buffers per device; lower --qd"
                )
            writes = bool(write[mine].any())
            self.devs.append(open_device(t, seed, dqd, slot, writes, self._allow_write))
        for j in range(self.n):
            d = self.dev_of[j]
            if d >= 0:
                cap = self.devs[d].qd
                self.op_cap[j] = min(self.op_qd[j] or cap, cap)
        return self._gds_reader(gds)

    def _gds_reader(self, mode: str) -> _gds.GdsReader | None:
        if mode not in ("auto", "host", "require"):
            raise RealError(f"unknown gds mode {mode!r}: choose auto, host or require")
        if not any(self.gds_op) or mode == "host":
            self.gds_op = [False] * self.n
            return None
        ok, why = _gds.gds_status()
        if not ok:
            if mode == "require":
                raise RealError(f"the plan has GPUDirect Storage reads but {why}")
            self.gds_op = [False] * self.n
            self.notes.append(f"io_path 'gds' reads went through host memory: {why}")
            return None
        self.notes.append(why)
        used = {self.dev_of[j] for j in range(self.n) if self.gds_op[j]}
        return _gds.GdsReader({self.devs[d].fd: self.devs[d].target.path for d in used})

    def _close_devices(self) -> None:
        for d in self.devs:
            d.close()

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> Records:
        t0, cpu0 = time.perf_counter(), time.process_time()
        clock = lambda: time.perf_counter() - t0  # noqa: E731
        try:
            # the roots, taken before any runs: a 0 s root ends at once and readies its
            # dependents itself (a scan of ``pending`` would start them a second time)
            for j in [j for j in range(self.n) if self.pending[j] == 0]:
                self._ready(j, 0.0)
            engine = self.engine
            while self.done < self.n:
                now = clock()
                self.passes += 1
                self._pace(now)
                self._fire(now)
                if self._issue(now):
                    engine.submit()
                if self.done == self.n:
                    break
                deadline = self._deadline()
                if self.inflight:
                    timeout = None if deadline == np.inf else max(0.0, deadline - clock())
                    tags, res = self._wait(timeout)
                    self._reaped = tags
                    self._complete(tags, res, clock())
                elif deadline < np.inf:
                    time.sleep(max(0.0, deadline - clock()))
                else:  # pragma: no cover - dependencies only point backwards
                    raise RuntimeError(f"replay stalled with {self.n - self.done} ops left")
            makespan = max(self.end_s, default=0.0)
        finally:
            if self._reaped is not None:  # reaped, not accounted when the error struck
                self.inflight -= len(self._reaped)
            self._drain(DRAIN_S)
            self.engine.close()
            self._close_devices()
        return self._records(makespan, time.process_time() - cpu0)

    def _ready(self, j: int, t: float) -> None:
        self.ready_s[j] = t
        if self.release[j] > t:
            self._timer(self.release[j], _START, j)
        elif self._begin(j, t):
            self._end(j, t)

    def _begin(self, j: int, t: float) -> bool:
        """Start op ``j``; True when it ends at once (a modelled op of 0 s)."""
        self.start_s[j] = t
        d = self.dev_of[j]
        if d >= 0:
            dev = self.devs[d]
            if dev.pacer is not None:  # on the device's clock it starts when it could
                self.issue_s[j], on_dev = t, max(self.dep_end[j], self.release[j])
                self.start_s[j], self.ready_s[j] = on_dev, min(self.ready_s[j], on_dev)
                self._paced(dev.pacer.start(j, float(self.op_cost[j]), t))
            dev.active.append(j)
            return False
        if self.nonio[j] > 0:
            self._timer(t + self.nonio[j], _END, j)
            return False
        return True

    def _end(self, j: int, t: float, seen: float | None = None) -> None:
        """End op ``j`` at ``t`` and every op that, as a result, starts and ends at once.

        ``seen``: when the loop noticed (a timer's end, ``t``, fires between the loop's
        passes, so up to a pass late).  An op that waited on it starts when the last of
        its dependencies ended: a copy or compute at that time, on the clock of the
        GPU or core it stands for, which does not wait for the host's loop; an I/O op
        not before ``seen``, as the loop issues it."""
        seen = t if seen is None else seen
        stack = [(j, t)]
        while stack:
            j, t = stack.pop()
            self.end_s[j] = t
            self.done += 1
            if self._progress and (self.done % self._tick == 0 or self.done == self.n):
                self._progress(self.done, self.n)
            for k in self.dep_of[self.dep_ptr[j] : self.dep_ptr[j + 1]]:
                self.pending[k] -= 1
                if t > self.dep_end[k]:
                    self.dep_end[k] = t
                if self.pending[k] == 0:
                    tk = self.dep_end[k] if self.dev_of[k] < 0 else max(self.dep_end[k], seen)
                    self.ready_s[k] = tk
                    if self.release[k] > tk:
                        self._timer(self.release[k], _START, k)
                    elif self._begin(k, tk):
                        stack.append((k, tk))

    def _pace(self, now: float) -> None:
        """Run every paced device's time to ``now``."""
        for d in self.devs:
            if d.pacer is not None and d.pacer.left:
                self._paced(d.pacer.advance(now))

    def _paced(self, served: list[int]) -> None:
        """The ops ``served`` had their share of their device's time."""
        for j in served:
            if self.io_end[j] == self.io_end[j]:  # its I/Os are all done too
                self._hold(j)

    def _io_done(self, j: int, t: float) -> None:
        """Paced op ``j``'s last I/O was reaped at ``t``."""
        self.io_end[j] = t
        if j in self.devs[self.dev_of[j]].pacer.finish:
            self._hold(j)

    def _hold(self, j: int) -> None:
        """End paced op ``j`` at ``max(F - late + L, last completion)`` (:mod:`real._pacing`):
        a timer on the device's clock, which fires at once when that time has passed.
        ``F`` counts from when the op could start (its :attr:`start_s`), not from when
        the loop noticed it could (``issue_s``): the device's time shifted back by the
        loop's lateness, as a copy or compute op's is."""
        k = self.dev_of[j]
        fin = self.devs[k].pacer.finish.pop(j)
        late = self.issue_s[j] - self.start_s[j]
        at = fin - late + self.devs[k].target.latency_s[self.write[j]]
        self.paced_ops += 1
        if self.io_end[j] > at:  # the replay's own completions, not the device, set the end
            self.real_bound += 1
        self._timer(max(at, self.io_end[j]), _HELD, j)

    def _timer(self, at: float, what: int, j: int) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (at, self._seq, what, j))

    def _fire(self, now: float) -> None:
        while self.timers and self.timers[0][0] <= now:
            at, _, what, j = heapq.heappop(self.timers)
            # a copy or compute, or a paced op's held end, ends on time
            t = at if self.dev_of[j] < 0 or what == _HELD else now
            if what != _START or self._begin(j, t):
                self._end(j, t, now)

    def _deadline(self) -> float:
        deadline = self.timers[0][0] if self.timers else np.inf
        for d in self.devs:
            if d.pacer is not None and d.pacer.left:
                deadline = min(deadline, d.pacer.next_finish())
        return deadline

    # ---- results ----------------------------------------------------------------------------
    def _records(self, makespan: float, cpu: float) -> Records:
        total_ios = sum(self.n_ios) or 1
        cpu_s = [cpu * k / total_ios for k in self.n_ios]
        ops = op_records(self.plan, self.ready_s, self.start_s, self.end_s, cpu_s, "real")
        devices = device_records(self.devs, makespan)
        inflight = inflight_stats(self.devs, makespan)
        stats = {
            "backend": "real",
            "ops": self.n,
            "ios": sum(d.n_ios for d in self.devs),
            "makespan_s": makespan,
            "cpu_s": cpu,
            "engine": self.engine.name,
            "engine_note": self.engine_note,
            "verified": self.verify,
            "queue_depth": {d.name: d.qd for d in self.devs},
            "paced": [d.name for d in self.devs if d.pacer is not None],
            "loop_passes": self.passes,
            # paced ops whose end their own last completion set, after the emulated
            # device's (the replayer or the backing store bound them: real._pacing)
            "paced_ops": self.paced_ops,
            "paced_real_bound": self.real_bound,
            "cpu_s_method": "process CPU time of the replay loop, shared over I/O ops by I/O count",
            **inflight,
            "notes": self.notes,
        }
        return Records(ops=ops, devices=devices, stats=stats)


def _durations(nonio_s, n: int) -> list[float]:
    if nonio_s is None:
        return [0.0] * n
    if isinstance(nonio_s, Mapping):
        out = [0.0] * n
        for j, s in nonio_s.items():
            out[int(j)] = float(s)
        return out
    arr = np.nan_to_num(np.asarray(nonio_s, dtype=np.float64), nan=0.0)
    if len(arr) != n:
        raise RealError(f"{len(arr)} modelled durations given for a plan of {n} ops")
    return arr.tolist()

"""A flow-level network on simpy: flows share resources by max-min fairness.

Each flow moves an ``amount`` (bytes on links and SSDs, core-seconds on a
CPU, GPU-seconds on a compute engine) across a fixed set of resources.  Rates
are recomputed by progressive filling (:func:`sim.engine.maxmin.maxmin_rates`)
whenever a flow starts or ends, and completions are rescheduled accordingly.

Two devices keep this fast without changing the physics:

* flows that start or end at the same instant are re-rated once: the
  recomputation is a simpy event scheduled at the current time with a
  priority below every ordinary event, so it runs after everything else that
  happens at that instant; completions re-rate at once, after their
  callbacks have started whatever they start (a zero-length interval at
  the old rates changes no work or integral, so this is the same physics);
* there is one completion timer for the whole network (the earliest finish
  among active flows); a timer made stale by a re-rating is ignored;
* allocations are memoised: max-min rates are a pure function of the active
  flows' (path, cap) signatures, and offloading workloads repeat the same
  mix of flows layer after layer.

Per resource the network integrates busy time (at least one flow active),
work done (``sum coef * rate`` over time) and the peak load relative to
capacity, which tests use to check that no resource is ever above capacity.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import simpy
from simpy.events import NORMAL, Event

from sim.engine.maxmin import maxmin_rates

# simpy orders simultaneous events by priority (URGENT=0, NORMAL=1); this runs
# after both, i.e. once everything scheduled for the current instant is done.
LATE = 2
# a flow whose remaining work would take under this long is complete
_DONE_S = 1e-9


class _Late(Event):
    """An event that fires at the current time after all ordinary events."""

    def __init__(self, env: simpy.Environment, callback: Callable[[Event], None]):
        super().__init__(env)
        self.callbacks.append(callback)
        self._ok = True
        self._value = None
        env.schedule(self, LATE)


class _Timer(Event):
    """A bare timeout (no value, no lambda) that calls ``callback(self)`` after ``delay``."""

    def __init__(self, env: simpy.Environment, delay: float, callback: Callable[[Event], None]):
        super().__init__(env)
        self.callbacks.append(callback)
        self._ok = True
        self._value = None
        env.schedule(self, NORMAL, delay)


class Flow:
    """One transfer: ``amount`` units over ``path`` [(resource, coef), ...]."""

    __slots__ = ("path", "amount", "remaining", "rate", "cap", "on_done", "start_s", "end_s", "sig")

    def __init__(
        self,
        path: Sequence[tuple[int, float]],
        amount: float,
        cap: float,
        on_done: Callable[[Flow], None] | None,
        now: float,
    ):
        self.path = tuple(path)
        self.amount = float(amount)
        self.remaining = float(amount)
        self.rate = 0.0
        self.cap = cap
        self.on_done = on_done
        self.start_s = now
        self.end_s = math.nan
        self.sig = -1


class FlowNetwork:
    """Resources with capacities, shared by flows under max-min fairness."""

    def __init__(self, env: simpy.Environment, names: Sequence[str], capacity: Sequence[float]):
        if len(names) != len(capacity):
            raise ValueError("names and capacity differ in length")
        for name, c in zip(names, capacity, strict=True):
            if not c > 0:
                raise ValueError(f"resource {name}: capacity must be > 0, got {c}")
        self.env = env
        self.names = list(names)
        self.capacity = [float(c) for c in capacity]
        n = len(self.names)
        self.load = [0.0] * n  # current sum of coef * rate
        self._loaded: dict[int, float] = {}  # resources with load > 0 -> load
        self.busy_s = [0.0] * n
        self.work = [0.0] * n
        self.peak = [0.0] * n
        self.flows: list[Flow] = []
        self.completed = 0
        self.reratings = 0
        self._last = env.now
        self._dirty = False
        self._timer: Event | None = None
        self._timer_at = math.inf
        self._pending: list[tuple] = []  # delayed starts: (due, seq, path, amount, on_done, cap)
        self._seq = 0
        self._sigs: dict[tuple, int] = {}
        self._memo: dict[tuple[int, ...], tuple[list[float], dict[int, float]]] = {}

    def resource(self, name: str) -> int:
        return self.names.index(name)

    # ---- public -------------------------------------------------------------
    def start(
        self,
        path: Sequence[tuple[int, float]],
        amount: float,
        on_done: Callable[[Flow], None] | None = None,
        cap: float = math.inf,
    ) -> Flow:
        """Start a flow now; ``on_done(flow)`` is called when it completes."""
        if not amount > 0:
            raise ValueError(f"flow amount must be > 0, got {amount}")
        if not cap > 0:
            raise ValueError(f"flow cap must be > 0, got {cap}")
        flow = Flow(path, amount, cap, on_done, self.env.now)
        flow.sig = self._sigs.setdefault((flow.path, cap), len(self._sigs))
        # no _advance here: rates (hence remaining work and the integrals) change
        # only in _rerate, which advances first; the new flow's rate is 0 until then
        self.flows.append(flow)
        self._mark_dirty()
        return flow

    def start_after(
        self,
        delay: float,
        path: Sequence[tuple[int, float]],
        amount: float,
        on_done: Callable[[Flow], None] | None = None,
        cap: float = math.inf,
    ) -> None:
        """Start a flow ``delay`` seconds from now, as :meth:`start` would then.

        The delayed start is kept in the network's own queue and served by its
        one timer, so it costs no simpy event of its own."""
        if delay <= 0.0:
            self.start(path, amount, on_done, cap)
            return
        if not amount > 0:
            raise ValueError(f"flow amount must be > 0, got {amount}")
        if not cap > 0:
            raise ValueError(f"flow cap must be > 0, got {cap}")
        due = self.env.now + delay
        heapq.heappush(self._pending, (due, self._seq, path, amount, on_done, cap))
        self._seq += 1
        if not self._dirty and due < self._timer_at:
            self._arm(delay)

    # ---- internals ----------------------------------------------------------
    def _mark_dirty(self) -> None:
        if not self._dirty:
            self._dirty = True
            _Late(self.env, self._rerate)

    def _advance(self) -> None:
        """Bring remaining work and resource integrals up to now."""
        now = self.env.now
        dt = now - self._last
        if dt <= 0.0:
            return
        for f in self.flows:
            f.remaining -= f.rate * dt
        busy, work = self.busy_s, self.work
        for r, ld in self._loaded.items():
            busy[r] += dt
            work[r] += ld * dt
        self._last = now

    def _rerate(self, _event: Event | None = None) -> None:
        self._dirty = False
        self._advance()
        flows = self.flows
        self.reratings += 1
        key = tuple([f.sig for f in flows])
        hit = self._memo.get(key)
        if hit is None:
            rates = maxmin_rates([f.path for f in flows], [f.cap for f in flows], self.capacity)
            loads: dict[int, float] = {}
            for f, rate in zip(flows, rates, strict=True):
                for r, c in f.path:
                    loads[r] = loads.get(r, 0.0) + c * rate
            for r, ld in loads.items():
                u = ld / self.capacity[r]
                if u > self.peak[r]:
                    self.peak[r] = u
            if len(self._memo) > 65536:
                self._memo.clear()
            self._memo[key] = hit = (rates, loads)
        rates, loads = hit
        for f, rate in zip(flows, rates, strict=True):
            f.rate = rate
        load = self.load
        for r in self._loaded:
            load[r] = 0.0
        for r, ld in loads.items():
            load[r] = ld
        self._loaded = loads
        self._schedule_completion()

    def _schedule_completion(self) -> None:
        """Arm the network's one timer at the earliest finish or delayed start."""
        now = self.env.now
        delay = (
            max(min([f.remaining / f.rate for f in self.flows]), 0.0) if self.flows else math.inf
        )
        if self._pending and self._pending[0][0] < now + delay:
            delay = self._pending[0][0] - now
        if delay == math.inf:
            self._timer, self._timer_at = None, math.inf
            return
        self._arm(max(delay, 0.0))

    def _arm(self, delay: float) -> None:
        """(Re)arm the one timer ``delay`` seconds from now; older timers go stale."""
        self._timer_at = self.env.now + delay
        self._timer = _Timer(self.env, delay, self._on_timer)

    def _start_due(self) -> None:
        """Start the delayed flows due now (within float rounding of the timer's time)."""
        now = self.env.now
        horizon = now + 4 * math.ulp(now)
        pending = self._pending
        while pending and pending[0][0] <= horizon:
            _, _, path, amount, on_done, cap = heapq.heappop(pending)
            flow = Flow(path, amount, cap, on_done, now)
            flow.sig = self._sigs.setdefault((flow.path, cap), len(self._sigs))
            self.flows.append(flow)

    def _on_timer(self, event: Event) -> None:
        if event is not self._timer:
            return  # made stale by a later re-rating
        self._advance()
        now = self.env.now
        done: list[Flow] = []
        keep: list[Flow] = []
        for f in self.flows:
            (done if f.remaining <= f.rate * _DONE_S else keep).append(f)
        self.flows = keep
        for f in done:
            f.remaining = 0.0
            f.end_s = now
        self.completed += len(done)
        self._start_due()
        # re-rate right after the callbacks (flows they start join it) rather than
        # through a late event: one simpy event less per completion; a flow started
        # later at this instant by another event re-rates again, over a zero interval
        pending = self._dirty
        self._dirty = True
        for f in done:
            if f.on_done is not None:
                f.on_done(f)
        if not pending:
            self._rerate()

"""A flow-level network on simpy: flows share resources by max-min fairness.

Each flow moves an ``amount`` (bytes on links and SSDs, core-seconds on a
CPU, GPU-seconds on a compute engine) across a fixed set of resources.  Rates
are recomputed by progressive filling (:func:`sim.engine.maxmin.maxmin_rates`)
whenever a flow starts or ends, and completions are rescheduled accordingly.

Devices that keep this fast without changing the physics:

* flows that start or end at the same instant are re-rated once: the
  recomputation is a simpy event scheduled at the current time with a
  priority below every ordinary event, so it runs after everything else that
  happens at that instant; completions re-rate at once, after their
  callbacks have started whatever they start (a zero-length interval at
  the old rates changes no work or integral, so this is the same physics);
* there is one completion timer for the whole network (the earliest finish
  among active flows, or the earliest delayed start); a timer made stale by a
  re-rating is ignored;
* the network keeps each active flow's rate and projected finish time rather
  than its remaining work (which is ``rate x (fin - now)``), in lists aligned
  with the flows: between re-ratings nothing about a flow changes, so a
  re-rating touches only the flows whose rate changed, and the memo key, the
  earliest finish and "no rate changed" are single list operations;
* the late re-rating's event is one object rescheduled, and a timer simpy has
  stepped is armed again rather than a new one made; a timer at which every
  active flow is done (a serving engine's usual case: one flow alone on its
  links) hands the active lists over whole rather than scanning them;
* delayed starts (an SSD op's access latency) wait in the network's own queue,
  one entry per instant (an op group's reads share it), served by its timer;
* allocations are memoised: max-min rates are a pure function of the active
  flows' (path, cap) signatures (interned as small integers), and offloading
  workloads repeat the same mix of flows layer after layer; a mix not seen
  before re-solves only the connected components that the flows started or
  ended since the last re-rating touch
  (the incremental rule: re-solve only the components a started or ended
  flow touches; tests/sim/test_maxmin.py states it plainly), found from the
  touched resources outward through an index of the active flows on each
  resource, so a re-solve costs the touched components, not every running
  flow (a fleet's instances share no resource); cap-free rates are memoised
  per component's paths, used where the caps provably change no float
  (:mod:`sim.engine.mixsolve`); the new mix's loads are the last mix's with
  the touched components' resources summed again (in mix order, the same
  floats as summing over the whole mix), and only those move the peaks;
* resource integrals are kept per allocation: the time spent in each mix of
  flows is summed, and busy time and work per resource are that time
  weighted by the mix's loads, folded in when read;
* a flow started on resources no other flow crosses (:meth:`FlowNetwork.start_alone`,
  a GPU's compute op) is its own component: its rate is that of the flow alone
  (the same solve, memoised per signature), so its finish time is known at
  once and it is scheduled as its own end's event, with no re-rating of the
  network at its start or its end (nothing else's rate can change) and its
  time summed in a mix of its own (its signature's, alone).  While it runs
  alone the rest of the network is re-rated without it, as before (another
  component); a flow that joins one of its resources makes it an active flow
  at once, at its rate and finish time (joining at rate 0 if it started at
  this instant: its rate, like every rate, is set after every event of the
  instant), placed where the flows started since the last re-rating begin,
  and its scheduled end goes stale.

Per resource the network integrates busy time (at least one flow active),
work done (``sum coef * rate`` over time) and the peak load relative to
capacity, which tests use to check that no resource is ever above capacity.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from operator import ne
from typing import Any

import simpy
from simpy.events import NORMAL

from sim.engine.flows import Flow, Mix, Tick, take_done
from sim.engine.mixsolve import MixSolver

__all__ = ["LATE", "Flow", "FlowNetwork"]

# simpy orders simultaneous events by priority (URGENT=0, NORMAL=1); this runs
# after both, i.e. once everything scheduled for the current instant is done.
LATE = 2
# a flow whose remaining work would take under this long is complete
_DONE_S = 1e-9
# distinct flow mixes remembered before the memo is folded and cleared
_MEMO_MAX = 65536
_NO_FLOWS: list = []  # no flow ended (never appended to)


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
        self._busy = [0.0] * n  # integrals of mixes folded out of the memo
        self._work = [0.0] * n
        self.peak = [0.0] * n
        # the active flows and, index-aligned, their signatures, rates (0 until
        # their first re-rating) and finish times at those rates
        self.flows: list[Flow] = []
        self._fsig: list[int] = []
        self._rate: list[float] = []
        self._fin: list[float] = []
        self.completed = 0
        self.reratings = 0
        self._last = env.now
        self._dirty = False
        self._timer: Tick | None = None
        self._timer_at = math.inf
        # delayed starts: (due, seq, flows due then), and the latest such entry
        self._pending: list[tuple[float, int, list[Flow]]] = []
        self._last_due: tuple[float, int, list[Flow]] | None = None
        self._seq = 0
        self._sigs: dict[tuple, int] = {}
        self._paths: list[tuple[tuple[int, float], ...]] = []
        self._caps: list[float] = []
        self._psig: list[int] = []  # per signature: its path's (sim.engine.mixsolve)
        self._solver = MixSolver(self.capacity)
        # per resource: the active flows crossing it (rated or not); the active
        # flows with no resource; the flows started (the active lists' tail, at
        # rate 0) and the signatures of those ended since the last re-rating
        self._on: list[list[Flow]] = [[] for _ in range(n)]
        self._nopath = 0
        self._nnew = 0
        self._ended: list[int] = []
        self.solved = 0  # flows whose rates a re-solve computed (the solver's work)
        self._memo: dict[tuple[int, ...], Mix] = {}
        self._mix = self._memo[()] = Mix([], {})
        self._key: tuple[int, ...] = ()  # the signatures of the current mix's flows
        # the late re-rating's event: one object, rescheduled (at most one is
        # pending: _dirty); simpy clears an event's callbacks as it steps it
        self._late = Tick(self._rerate)
        self._late_cbs = self._late.callbacks
        self._timer_cbs = [self._on_timer]  # bound once: one timer per re-rating
        self._spare: Tick | None = None  # a stepped timer, to be armed again
        self._integrals: tuple[tuple[int, int], list[float], list[float]] | None = None
        # flows started alone (start_alone): per resource the one running on it, per
        # signature its rate, loads and time alone (a Mix of one flow), the callback
        # of its scheduled end, and the count of such flows' ends and joins
        self._alone: list[Flow | None] = [None] * n
        self._lone: dict[int, Mix] = {}
        self._alone_cbs = [self._alone_end]
        self._lone_events = 0
        # the flow ending alone while its callback runs: the callback is the last
        # thing its end's event does (nothing is scheduled after it in that step)
        self.ending_alone: Flow | None = None

    def resource(self, name: str) -> int:
        return self.names.index(name)

    def intern(self, path: Sequence[tuple[int, float]], cap: float = math.inf) -> int:
        """The signature (a small integer) of flows over ``path`` with rate cap ``cap``."""
        if not cap > 0:
            raise ValueError(f"flow cap must be > 0, got {cap}")
        p = tuple((int(r), float(c)) for r, c in path)
        sig = self._sigs.get((p, cap))
        if sig is None:
            if not p and math.isinf(cap):
                raise ValueError("a flow must cross a resource or have a rate cap")
            sig = self._sigs[(p, cap)] = len(self._paths)
            self._paths.append(p)
            self._caps.append(cap)
            self._psig.append(self._solver.path_sig(p))
        return sig

    # ---- integrals ----------------------------------------------------------
    @property
    def busy_s(self) -> list[float]:
        """Per resource: time with at least one flow on it, up to the last re-rating."""
        return self._fold_integrals()[1]

    @property
    def work(self) -> list[float]:
        """Per resource: the integral of its load (units moved x coef), up to the last re-rating."""
        return self._fold_integrals()[2]

    def _fold_integrals(self) -> tuple[int, list[float], list[float]]:
        """((re-rating count, lone flows' ends and joins), busy, work): the folded
        totals plus every mix's time weighted by its loads, then every lone
        flow's mix's; recomputed only after a re-rating or a lone flow's end."""
        got = self._integrals
        stamp = (self.reratings, self._lone_events)
        if got is None or got[0] != stamp:
            busy, work = list(self._busy), list(self._work)
            for mixes in (self._memo.values(), self._lone.values()):
                for mix in mixes:
                    t = mix.time_s
                    for r, ld in mix.loads.items():
                        busy[r] += t
                        work[r] += ld * t
            got = self._integrals = (stamp, busy, work)
        return got

    # ---- public -------------------------------------------------------------
    def start(
        self,
        path: Sequence[tuple[int, float]],
        amount: float,
        on_done: Callable[[Flow], None] | None = None,
        cap: float = math.inf,
        token: Any = None,
    ) -> Flow:
        """Start a flow now; ``on_done(flow)`` is called when it completes."""
        return self.start_sig(self.intern(path, cap), amount, on_done, token)

    def start_sig(
        self, sig: int, amount: float, on_done: Callable[[Flow], None] | None, token: Any = None
    ) -> Flow:
        """:meth:`start` for a signature from :meth:`intern`."""
        if not amount > 0:
            raise ValueError(f"flow amount must be > 0, got {amount}")
        flow = Flow(sig, float(amount), on_done, token, self.env.now)
        # joins the active set at rate 0: rates, hence finish times and the
        # integrals, change only in _rerate (a flow running alone on one of its
        # resources joins the active set first: _join)
        self._join(flow)
        self.flows.append(flow)
        self._fsig.append(sig)
        self._rate.append(0.0)
        self._fin.append(math.inf)
        self._nnew += 1
        if not self._dirty:
            self._dirty = True
            late = self._late
            late.callbacks = self._late_cbs
            self.env.schedule(late, LATE)  # type: ignore[arg-type]
        return flow

    def start_alone(
        self, sig: int, amount: float, on_done: Callable[[Flow], None] | None, token: Any = None
    ) -> Flow:
        """:meth:`start_sig` for a flow whose resources no other flow crosses
        now (else it is :meth:`start_sig`): it runs alone, its own component,
        at the rate max-min gives one flow on its path (the solve the
        re-rating would make, memoised per signature); it is scheduled as its
        own end's event at ``now + amount / rate`` (the finish time the
        re-rating would set, armed as the timer would be: ``now`` plus that
        time less ``now``), and nothing else is re-rated at its start or end.
        A flow that joins one of its resources before it ends makes it an
        active flow (:meth:`_rejoin`)."""
        if not amount > 0:
            raise ValueError(f"flow amount must be > 0, got {amount}")
        path = self._paths[sig]
        on, alone = self._on, self._alone
        for r, _ in path:
            if on[r] or alone[r] is not None:
                return self.start_sig(sig, amount, on_done, token)
        lone = self._lone.get(sig)
        if lone is None:
            lone = self._lone_mix(sig)
        now = self.env.now
        flow = Flow(sig, float(amount), on_done, token, now)
        for r, _ in path:
            alone[r] = flow
        flow.callbacks = self._alone_cbs
        fin = now + flow.amount / lone.rates[0]
        self.env.schedule(flow, NORMAL, fin - now)  # type: ignore[arg-type]
        return flow

    def start_after(
        self,
        delay: float,
        path: Sequence[tuple[int, float]],
        amount: float,
        on_done: Callable[[Flow], None] | None = None,
        cap: float = math.inf,
        token: Any = None,
    ) -> None:
        """Start a flow ``delay`` seconds from now, as :meth:`start` would then."""
        self.start_sig_after(delay, self.intern(path, cap), amount, on_done, token)

    def start_sig_after(
        self,
        delay: float,
        sig: int,
        amount: float,
        on_done: Callable[[Flow], None] | None,
        token: Any = None,
    ) -> None:
        """:meth:`start_after` for a signature.  The delayed start is kept in the
        network's own queue and served by its one timer: no simpy event of its own."""
        if delay <= 0.0:
            self.start_sig(sig, amount, on_done, token)
            return
        if not amount > 0:
            raise ValueError(f"flow amount must be > 0, got {amount}")
        due = self.env.now + delay
        flow = Flow(sig, float(amount), on_done, token, due)  # start_s: set when it starts
        last = self._last_due
        if last is not None and last[0] == due:
            last[2].append(flow)  # starts due together (an op group's reads) share an entry
        else:
            self._last_due = last = (due, self._seq, [flow])
            heapq.heappush(self._pending, last)
            self._seq += 1
        if not self._dirty and due < self._timer_at:
            self._arm(due)

    # ---- internals ----------------------------------------------------------
    def _rerate(self, _event: object = None) -> None:
        """New rates for the active flows; their finish times follow."""
        self._dirty = False
        now = self.env.now
        self._mix.time_s += now - self._last
        self._last = now
        self.reratings += 1
        fin = self._fin
        if fin:
            key = tuple(self._fsig)
            mix = self._memo.get(key)
            moved: Iterable[int] | None = None  # a remembered mix: any flow may move
            if mix is None:
                mix, moved = self._solve(key)
            self._mix, self._key = mix, key
            new, old = mix.rates, self._rate
            if new != old:
                # finish times at the new rates: the remaining work is was x (fin -
                # now); a new flow (rate 0 so far) has all of its amount left.  Only
                # the flows re-solved can have a new rate (``moved``); of a
                # remembered mix's, those whose rate differs (found in C)
                if moved is None:
                    moved = compress(range(len(new)), map(ne, new, old))
                flows = self.flows
                for k in moved:
                    rate, was = new[k], old[k]
                    if was != rate:
                        fin[k] = (
                            now + (fin[k] - now) * was / rate
                            if was
                            else now + flows[k].amount / rate
                        )
                self._rate = new[:]
            due = min(fin)
        else:  # no flow: the empty mix (always in the memo), rates and finishes unchanged
            self._mix, self._key = self._memo[()], ()
            due = math.inf
        self._nnew = 0
        if self._ended:
            self._ended = []
        pending = self._pending
        if pending and pending[0][0] < due:
            due = pending[0][0]
        if due == math.inf:
            self._timer, self._timer_at = None, math.inf
        elif due != self._timer_at:
            self._arm(due)

    def _solve(self, key: tuple[int, ...]) -> tuple[Mix, Sequence[int]]:
        """Max-min rates for a mix not in the memo (its loads set the peaks), and
        the positions of the flows re-solved (the others keep their rates).

        The incremental rule: the flows that started since the last re-rating
        (the tail at rate 0) and those that ended touch some resources; each
        connected component of the active flows holding a touched resource is
        re-solved alone (flows in mix order), as is every flow with no resource;
        when the changes touch every resource, the whole mix is solved at once.
        The components are found from the touched resources outward (resource
        to the flows on it to their resources), so the work is that of the
        components touched, not of the whole mix."""
        paths, caps, psig = self._paths, self._caps, self._psig
        n = len(key)
        touched = {r for s in self._ended for r, _ in paths[s]}
        for s in key[n - self._nnew :]:
            for r, _ in paths[s]:
                touched.add(r)
        prev = self._mix.loads
        if len(touched) >= len(self.capacity):
            fpaths = [paths[s] for s in key]
            rates = self._solver.component(
                tuple([psig[s] for s in key]), fpaths, [caps[s] for s in key]
            )
            self.solved += n
            moved: Sequence[int] = range(n)
            loads: dict[int, float] = {}
            for path, rate in zip(fpaths, rates, strict=True):
                for r, c in path:
                    loads[r] = loads.get(r, 0.0) + c * rate
            redone: Sequence[int] = list(loads)
        else:
            rates = self._rate[:]
            loads = dict(prev)
            comps = self._components(touched)
            if self._nopath:
                comps += [[k] for k, s in enumerate(key) if not paths[s]]
            moved = []
            for comp in comps:
                sigs = [key[k] for k in comp]
                sub = self._solver.component(
                    tuple([psig[s] for s in sigs]),
                    [paths[s] for s in sigs],
                    [caps[s] for s in sigs],
                )
                for k, rate in zip(comp, sub, strict=True):
                    rates[k] = rate
                moved += comp
            self.solved += len(moved)
            # loads change only on the touched resources and those of the
            # components re-solved (summed in mix order, as over the whole mix)
            for r in touched:
                loads.pop(r, None)
            redone = set()
            for k in moved:
                for r, _ in paths[key[k]]:
                    if r not in redone:
                        redone.add(r)
                        loads.pop(r, None)
            for k in moved:
                rate = rates[k]
                for r, c in paths[key[k]]:
                    loads[r] = loads.get(r, 0.0) + c * rate
        capacity, peak = self.capacity, self.peak
        for r in redone:
            u = loads[r] / capacity[r]
            if u > peak[r]:
                peak[r] = u
        if len(self._memo) >= _MEMO_MAX:
            self._fold()
        mix = self._memo[key] = Mix(rates, loads)
        return mix, moved

    def _lone_mix(self, sig: int) -> Mix:
        """The mix of one flow of ``sig`` alone (its rate as a component of its
        own; its loads set the peaks, as a new mix's do), remembered."""
        path, cap = self._paths[sig], self._caps[sig]
        rate = self._solver.component((self._psig[sig],), [path], [cap])[0]
        loads: dict[int, float] = {}
        for r, c in path:
            loads[r] = loads.get(r, 0.0) + c * rate
        capacity, peak = self.capacity, self.peak
        for r, ld in loads.items():
            u = ld / capacity[r]
            if u > peak[r]:
                peak[r] = u
        mix = self._lone[sig] = Mix([rate], loads)
        return mix

    def _alone_end(self, flow: Flow) -> None:
        """A flow running alone ends (its scheduled event): its time goes to its
        lone mix, its resources are free, then its callback."""
        now = self.env.now
        alone = self._alone
        for r, _ in self._paths[flow.sig]:
            alone[r] = None
        self._lone[flow.sig].time_s += now - flow.start_s
        self._lone_events += 1
        flow.end_s = now
        self.completed += 1
        if flow.on_done is not None:
            self.ending_alone = flow
            flow.on_done(flow)  # the last thing this event does
            self.ending_alone = None

    def _rejoin(self, flow: Flow) -> None:
        """A flow running alone meets another on one of its resources: its time
        alone so far goes to its lone mix and it becomes an active flow, at its
        rate and finish time, placed before the flows started since the last
        re-rating (or, started at this very instant, as one of them: rate 0);
        its scheduled end goes stale (no callbacks)."""
        now = self.env.now
        sig = flow.sig
        path, alone, on = self._paths[sig], self._alone, self._on
        for r, _ in path:
            alone[r] = None
            on[r].append(flow)
        flow.callbacks = []
        lone = self._lone[sig]
        lone.time_s += now - flow.start_s
        self._lone_events += 1
        if flow.start_s == now:
            rate, fin = 0.0, math.inf
            k = len(self.flows)
            self._nnew += 1
        else:
            rate = lone.rates[0]
            fin = flow.start_s + flow.amount / rate
            k = len(self.flows) - self._nnew
        self.flows.insert(k, flow)
        self._fsig.insert(k, sig)
        self._rate.insert(k, rate)
        self._fin.insert(k, fin)

    def _components(self, touched: set[int]) -> list[list[int]]:
        """Positions (in mix order) of the active flows in each connected
        component holding a touched resource: from each touched resource to the
        flows on it, to their resources, and so on."""
        on, paths, flows = self._on, self._paths, self.flows
        seen_r: set[int] = set()
        comps = []
        for r0 in touched:
            if r0 in seen_r or not on[r0]:
                continue
            seen_r.add(r0)
            todo = [r0]
            members: dict[Flow, None] = {}
            while todo:
                for f in on[todo.pop()]:
                    if f not in members:
                        members[f] = None
                        for r, _ in paths[f.sig]:
                            if r not in seen_r:
                                seen_r.add(r)
                                todo.append(r)
            comps.append(sorted([flows.index(f) for f in members]))
        return comps

    def _join(self, flow: Flow) -> None:
        """Index a flow joining the active set by the resources it crosses (a
        flow running alone on one of them joins the active set first)."""
        path = self._paths[flow.sig]
        if path:
            on, alone = self._on, self._alone
            for r, _ in path:
                if alone[r] is not None:
                    self._rejoin(alone[r])
                on[r].append(flow)
        else:
            self._nopath += 1

    def _leave(self, done: list[Flow]) -> None:
        """Unindex flows leaving the active set; their signatures are the ended ones."""
        on, paths, ended = self._on, self._paths, self._ended
        for f in done:
            path = paths[f.sig]
            if path:
                for r, _ in path:
                    on[r].remove(f)
            else:
                self._nopath -= 1
            ended.append(f.sig)

    def _fold(self) -> None:
        """Fold the memo's integrals (and the lone mixes') into the totals and
        forget its mixes (and the lone mixes' times)."""
        _, self._busy, self._work = self._fold_integrals()
        self._memo.clear()
        for lone in self._lone.values():
            lone.time_s = 0.0
        self._mix = self._memo[()] = Mix([], {})

    def _arm(self, due: float) -> None:
        """(Re)arm the one timer at ``due``; older timers go stale.  A timer
        simpy has stepped (fired or stale) is reused rather than a new one made."""
        now = self.env.now
        self._timer_at = due
        tick = self._spare
        if tick is None:
            tick = Tick(self._on_timer)
        else:
            self._spare = None
            tick.callbacks = self._timer_cbs
        self._timer = tick
        self.env.schedule(tick, NORMAL, due - now if due > now else 0.0)  # type: ignore[arg-type]

    def _on_timer(self, event: Tick) -> None:
        """The timer: flows whose finish time has come end (their callbacks run
        in the order they started), delayed starts now due join, then one
        re-rating."""
        self._spare = event  # stepped: free to be armed again
        if event is not self._timer:
            return  # made stale by a later re-rating
        now = self.env.now
        self._timer_at = math.inf
        fin = self._fin
        lim = now + _DONE_S
        if fin and max(fin) <= lim:  # every active flow is done (always so for one)
            done = self.flows
            self.flows, self._fsig, self._rate, self._fin = [], [], [], []
        elif fin and min(fin) <= lim:
            done = take_done(self.flows, self._fsig, self._rate, fin, lim)
        else:
            done = _NO_FLOWS
        if done:
            for f in done:
                f.end_s = now
            self.completed += len(done)
            self._leave(done)
        pending = self._pending
        if pending:
            horizon = now + 4 * math.ulp(now)
            if pending[0][0] <= horizon:
                self._start_due(horizon)
        # re-rate right after the callbacks (flows they start join it) rather than
        # through a late event: one simpy event less per completion; a flow started
        # later at this instant by another event re-rates again, over a zero interval
        was_dirty = self._dirty
        self._dirty = True
        for f in done:
            if f.on_done is not None:
                f.on_done(f)
        if not was_dirty:
            self._rerate()

    def _start_due(self, horizon: float) -> None:
        """Delayed starts due by ``horizon`` join the active flows (at rate 0)."""
        now = self.env.now
        pending = self._pending
        flows, fsig, rate, fin = self.flows, self._fsig, self._rate, self._fin
        while pending and pending[0][0] <= horizon:
            entry = heapq.heappop(pending)
            if entry is self._last_due:
                self._last_due = None
            due = entry[2]
            for flow in due:
                flow.start_s = now
                self._join(flow)
            self._nnew += len(due)
            flows += due  # joining at rate 0, as in start_sig
            fsig += [flow.sig for flow in due]
            rate += [0.0] * len(due)
            fin += [math.inf] * len(due)

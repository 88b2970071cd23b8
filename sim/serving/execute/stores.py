"""Executor side of offloading: the manager's store decisions, run in time.

The block manager (:mod:`sim.serving.policy.manager`) decides what to store,
demote and write through, as plain :class:`~sim.serving.policy.jobs.Transfer` s;
:class:`Offloader` runs each on the :class:`Mover`,
tells the manager when it ended (:meth:`BlockManager.on_stored`) and starts
what follows.  Stores that must wait for a demotion of the first tier to
drain wait on that tier's *drain* event, fired each time one of its
demotions completes, then ask the manager again (only those whose answer
can have changed: :mod:`sim.serving.policy.waiters`; a waiter's groups are never
copied: it is placed from its offset on, :meth:`BlockManager.place_from`,
which says where the suffix that still waits starts).  A store that ends lets
go of the GPU blocks it copied from: ``on_released`` (the engine's wake-up)
is called then, so that a request waiting for GPU blocks that only stores
held is admitted at that instant rather than never.

Each store and transfer runs as callbacks, not as a simpy process: what a
process started now would do at its first step (an urgent event at this
instant: :func:`_soon`) and when the event it waits for fires (a callback
appended where the process would append its resume), in the same order,
without the process's generator and end event.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import URGENT

from sim.serving.execute.transfers import Job, Mover
from sim.serving.policy.jobs import StoreRequest, Transfer
from sim.serving.policy.manager import BlockManager, Placement
from sim.serving.policy.waiters import Waiter, WaitIndex


def _soon(env: simpy.Environment, fn: Callable[[], None]) -> None:
    """Call ``fn`` where a process started now would take its first step:
    an urgent event scheduled at this instant (what ``env.process`` makes)."""
    ev = simpy.Event(env)
    ev._ok, ev._value = True, None
    ev.callbacks.append(lambda _e: fn())
    env.schedule(ev, URGENT)


class Offloader:
    """Runs the manager's stores, demotions and write-throughs on a mover."""

    def __init__(
        self, mgr: BlockManager, mover: Mover, on_released: Callable[[], None] | None = None
    ):
        self.mgr = mgr
        self.on_released = on_released
        self.mover = mover
        self.env = mover.env
        self._drain = {t.name: self.env.event() for t in mgr.tiers}
        self._waiting: list[Waiter] = []  # stores waiting for a drain, in order
        self._index = WaitIndex(mgr.tiers[0]) if mgr.tiers else None

    def store(self, req: StoreRequest | None) -> None:
        """Offload ``req``'s blocks, starting at this instant (after the caller yields)."""
        if req is None:
            return
        _soon(self.env, lambda: self._start_store(req))

    def load(self, t: Transfer) -> Job:
        """Start a load now."""
        return self.mover.start(t)

    def _start_store(self, req: StoreRequest) -> None:
        """Place ``req`` now; what waits waits for the next drain."""
        placed = self._place(req.rid, req.groups, 0)
        rest = placed.waiting
        if placed.rest_at >= 0:
            rest = StoreRequest(req.rid, req.groups[placed.rest_at :])
        if rest is not None:
            assert self._index is not None
            if not self._waiting:  # the first waiter: look at the next drain
                self._drain[self.mgr.tiers[0].name].callbacks.append(self._on_drain)
            self._waiting.append(self._index.register(rest))

    def _place(self, rid: int, groups: list, lo: int, fresh: bool = False) -> Placement:
        """Place request ``rid``'s ``groups[lo:]`` now (:meth:`BlockManager.place_from`;
        ``fresh``: none of its keys is in the first tier, none repeats), start
        its demotions and store; what was decided (what waits, and whether the
        first tier is known blocked now: ``Placement.blocked``)."""
        placed = self.mgr.place_from(rid, groups, lo, fresh)
        batch = placed.demotions  # started first, as they were decided first
        if placed.store is not None:
            batch = [*batch, placed.store]
        if batch:  # consecutive urgent events at this instant: one does as well
            _soon(self.env, lambda: self._begin_all(batch))
        return placed

    def _begin_all(self, batch: list[Transfer]) -> None:
        """:meth:`_begin` each of ``batch`` in order: what as many urgent events
        scheduled one after the other do (nothing can come between them: an
        event scheduled by one of them comes after the last)."""
        for t in batch:
            self._begin(t)

    def _launch(self, t: Transfer) -> None:
        """Run ``t`` from the next urgent instant (as a process would start)."""
        _soon(self.env, lambda: self._begin(t))

    def _begin(self, t: Transfer) -> None:
        """Start ``t`` on the mover; :meth:`_ended` when it is done."""
        job = self.mover.start(t, layers=False)  # nobody waits for a store's layers
        job.done.callbacks.append(lambda _e: self._ended(t))

    def _fresh(self, w: Waiter) -> bool:
        """Whether none of ``w``'s waiting keys was added to the first tier
        since it last looked (:mod:`sim.serving.policy.waiters`): placed again while
        :meth:`~BlockManager.room_blocked`, it would decide what it did last
        time (every key waits; nothing placed, evicted or let go)."""
        assert self._index is not None
        self._index.scan()
        return not w.touched

    def _all_fresh(self) -> bool:
        """Whether no waiting store is touched (:meth:`_fresh` of every one)."""
        assert self._index is not None
        self._index.scan()
        return not self._index.marked

    def _on_drain(self, _event) -> None:
        """A demotion of the first tier drained: the waiting stores, in the order
        they began to wait, place their groups again, except those for which
        that could decide nothing new (:meth:`_fresh`, then
        :meth:`~BlockManager.room_blocked`, looked at once until one of them places;
        once blocked with every later store fresh, those are all skipped at once);
        the ones still waiting keep their order for the next drain."""
        index = self._index
        assert index is not None
        waiting, self._waiting = self._waiting, []
        blocked = None  # room_blocked(), until a placement changes the tier
        for n, w in enumerate(waiting):
            if blocked and self._all_fresh():  # each later one would be skipped
                self._waiting += waiting[n:]
                break
            fresh = self._fresh(w)
            if fresh:
                if blocked is None:
                    blocked = self.mgr.room_blocked()
                if blocked:
                    self._waiting.append(w)
                    continue
            blocked = None
            if fresh and self._place_prefix(w):
                continue
            placed = self._place(w.rid, w.base, w.lo, fresh and w.distinct)
            blocked = True if placed.blocked else None  # else looked at again if need be
            if placed.rest_at >= 0:  # a suffix of its groups waits: w itself
                index.advance(w, placed.rest_at)
                self._waiting.append(w)
            elif placed.waiting is not None:
                self._waiting.append(index.moved(w, placed.waiting))
            else:
                index.remove(w)
        if self._waiting:
            self._drain[self.mgr.tiers[0].name].callbacks.append(self._on_drain)
        else:  # nobody reads the log: stop keeping it
            index.clear()

    def _place_prefix(self, w: Waiter) -> bool:
        """Place only the keys of waiter ``w`` that fit, when that is all placing
        it whole would do (:meth:`BlockManager.fitting_prefix`; none of its keys
        was added since it looked: the caller checked), without going over the
        keys that still wait; ``w`` waits on with them, its place kept.  False
        when not so."""
        assert self._index is not None
        n = len(w.base) - w.lo
        m = self.mgr.fitting_prefix(n)
        if not m:
            return False
        placed = self._place(w.rid, w.base[w.lo : w.lo + m], 0)
        assert placed.waiting is None and placed.rest_at < 0  # every one of them fits
        if m < n:
            self._index.cut(w, m)
            self._waiting.append(w)
        else:
            self._index.remove(w)
        return True

    def _ended(self, t: Transfer) -> None:
        """``t`` ended: the manager's books, what follows, the wake-ups."""
        for follow in self.mgr.on_stored(t):
            self._launch(follow)
        if t.sources and self.on_released is not None:  # GPU blocks let go
            self.on_released()
        if t.tag == "demote":
            assert t.src is not None
            ev, self._drain[t.src.name] = self._drain[t.src.name], self.env.event()
            ev.succeed()

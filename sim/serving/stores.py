"""Executor side of offloading: the manager's store decisions, run in time.

The block manager (:mod:`sim.serving.manager`) decides what to store,
demote and write through, as plain :class:`~sim.serving.jobs.Transfer` s;
:class:`Offloader` runs each as a simpy process on the :class:`Mover`,
tells the manager when it ended (:meth:`BlockManager.on_stored`) and starts
what follows.  Stores that must wait for a demotion of the first tier to
drain wait on that tier's *drain* event, fired each time one of its
demotions completes, then ask the manager again.  A store that ends lets
go of the GPU blocks it copied from: ``on_released`` (the engine's wake-up)
is called then, so that a request waiting for GPU blocks that only stores
held is admitted at that instant rather than never.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.serving.jobs import StoreRequest, Transfer
from sim.serving.manager import BlockManager
from sim.serving.transfers import Job, Mover


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
        self._waiting: list[list] = []  # [store, its keys, log position] waiting for a drain

    def store(self, req: StoreRequest | None) -> None:
        """Offload ``req``'s blocks, starting at this instant (after the caller yields)."""
        if req is not None:
            self.env.process(self._store(req))

    def load(self, t: Transfer) -> Job:
        """Start a load now."""
        return self.mover.start(t)

    def _store(self, req: StoreRequest):
        """A process only so that the store is placed when simpy starts it."""
        rest = self._place(req)
        if rest is not None:
            if not self._waiting:  # the first waiter: look at the next drain
                self._drain[self.mgr.tiers[0].name].callbacks.append(self._on_drain)
            self._enqueue(self._waiting, rest)
        return
        yield  # pragma: no cover - makes this a generator

    def _place(self, req: StoreRequest) -> StoreRequest | None:
        """Place ``req`` now, start its demotions and store; the groups that wait."""
        placed = self.mgr.place_store(req)
        for t in placed.demotions:  # started first, as they were decided first
            self.env.process(self._run(t))
        if placed.store is not None:
            self.env.process(self._run(placed.store))
        return placed.waiting

    def _enqueue(self, queue: list[list], req: StoreRequest) -> None:
        """``req`` waits for a drain of the first tier: its keys, and from where
        in the tier's ``added`` log it has yet to look."""
        tier = self.mgr.tiers[0]
        if tier.added is None:
            tier.added = []
        queue.append([req, {key for key, _ in req.groups}, len(tier.added)])

    def _on_drain(self, _event) -> None:
        """A demotion of the first tier drained: the waiting stores, in the order
        they began to wait, place their groups again, except those for which
        that could decide nothing new (:meth:`BlockManager.keys_added`, then
        :meth:`~BlockManager.room_blocked`, looked at once until one of them places);
        the ones still waiting keep their order for the next drain."""
        tier = self.mgr.tiers[0]
        waiting, self._waiting = self._waiting, []
        blocked = None  # room_blocked(), until a placement changes the tier
        for w in waiting:
            fresh = not self.mgr.keys_added(w[1], w[2])  # none of its keys placed since
            if fresh:
                if blocked is None:
                    blocked = self.mgr.room_blocked()
                if blocked:
                    w[2] = len(tier.added)
                    self._waiting.append(w)
                    continue
            blocked = None
            if fresh and self._place_prefix(w):
                continue
            rest = self._place(w[0])
            if rest is not None:
                self._enqueue(self._waiting, rest)
        if self._waiting:
            self._drain[tier.name].callbacks.append(self._on_drain)
        else:  # nobody reads the log: stop keeping it
            tier.added = None

    def _place_prefix(self, w: list) -> bool:
        """Place only the keys of waiter ``w`` that fit, when that is all placing
        it whole would do (:meth:`BlockManager.fitting_prefix`; none of its keys
        was added since it looked: the caller checked), without going over the
        keys that still wait; ``w`` waits on with them, its place kept.  False
        when not so."""
        req, keys, _since = w
        groups = req.groups
        m = self.mgr.fitting_prefix(len(groups))
        if not m:
            return False
        rest = self._place(StoreRequest(req.rid, groups[:m]))
        assert rest is None  # pragma: no branch - every one of them fits
        if m < len(groups):
            keys.difference_update([key for key, _ in groups[:m]])
            w[0] = StoreRequest(req.rid, groups[m:])
            w[2] = len(self.mgr.tiers[0].added)
            self._waiting.append(w)
        return True

    def _run(self, t: Transfer):
        yield self.mover.start(t).done
        for follow in self.mgr.on_stored(t):
            self.env.process(self._run(follow))
        if t.sources and self.on_released is not None:  # GPU blocks let go
            self.on_released()
        if t.tag == "demote":
            assert t.src is not None
            ev, self._drain[t.src.name] = self._drain[t.src.name], self.env.event()
            ev.succeed()

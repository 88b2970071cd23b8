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
        self._waiters = 0  # stores waiting for the first tier to drain

    def store(self, req: StoreRequest | None) -> None:
        """Offload ``req``'s blocks, starting at this instant (after the caller yields)."""
        if req is not None:
            self.env.process(self._store(req))

    def load(self, t: Transfer) -> Job:
        """Start a load now."""
        return self.mover.start(t)

    def _store(self, req: StoreRequest):
        while True:
            placed = self.mgr.place_store(req)
            for t in placed.demotions:  # started first, as they were decided first
                self.env.process(self._run(t))
            if placed.store is not None:
                self.env.process(self._run(placed.store))
            if placed.waiting is None:
                return
            req = placed.waiting
            yield from self._wait(req)

    def _wait(self, req: StoreRequest):
        """Wait for demotions of the first tier to drain until placing ``req``
        again could decide something new (:meth:`BlockManager.still_blocked`):
        a waiting store looks at the tier once per drain, not at all its keys."""
        tier = self.mgr.tiers[0]
        keys = {key for key, _ in req.groups}
        if tier.added is None:
            tier.added = []
        self._waiters += 1
        since = len(tier.added)
        while True:
            yield self._drain[tier.name]
            if not self.mgr.still_blocked(keys, since):
                break
            since = len(tier.added)
        self._waiters -= 1
        if not self._waiters:  # nobody reads the log: stop keeping it
            tier.added = None

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

"""Executor side of offloading: the manager's store decisions, run in time.

The block manager (:mod:`sim.serving.policy.manager`) decides what to store,
demote and write through, as plain :class:`~sim.serving.policy.jobs.Transfer` s;
:class:`Offloader` runs each on the :class:`Mover`, tells the manager when it
ended (:meth:`BlockManager.on_stored`) and starts what follows.  A store whose
placement evicted victims to the tier below starts when their demotion job
ends (it writes the slots they leave: :mod:`sim.serving.policy.demotions`).
Nothing waits for room: a store that finds none is either tried again at a
later step (``step``) or not offloaded (``eager``).

**Step-synchronous stores** (``stores: step``: the paged designs, vLLM's
offloading connector; read in vLLM's source,
``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`` of
the v0.11 line, ``OffloadingConnectorScheduler`` and
``OffloadingConnectorWorker``, and ``vllm/v1/kv_offload/lru_manager.py`` at
3a04cf8f, ``LRUOffloadingManager``):

* At every scheduler step each scheduled request's new full offload blocks,
  from ``_next_stored_block_idx`` on, are prepared in the first tier
  (``_get_reqs_to_store`` -> ``prepare_store``): all or nothing, LRU victims
  among the ready entries in use by nobody (``ref_cnt == 0``).  When they
  cannot all be placed, ``prepare_store`` returns None, the index does not
  move and the same blocks are tried at the request's next step
  (:meth:`after_step`, called for every request of the batch whose blocks
  are new or whose last store was not prepared, decodes too);
  the request holds its GPU blocks as it always does, nothing more.
* A request's prepared store of one step is one job
  (``prepare_store_kv``: one job per request and step), submitted at the
  start of the next step's forward pass (``start_kv_transfers``: "defer the
  store to the beginning of the next engine step").  kvtier prepares it at
  the end of the step that computed the blocks and starts it at once, the
  same instant while the engine is busy; vLLM prepares it at the step's
  schedule, before the forward pass, seeing the same completions.
* Completions are seen at step boundaries: the worker's ``get_finished``
  after a forward pass reports the jobs that ended, and the scheduler's
  ``update_connector_output`` completes them (``complete_store``: the
  entries become ready).  A job that ends mid-step is queued here and
  applied at the next boundary (:meth:`boundary`, the top of the engine's
  loop); an idle engine is woken (vLLM keeps stepping while transfers are
  pending).
* A finished request whose stores are in flight keeps its GPU blocks
  (``request_finished`` returns ``delay_free_blocks``: "blocks should not be
  freed until the request_id is returned from get_finished()"); they are
  freed at the boundary that sees its last store end (:meth:`release_after`).
  A preempted request's blocks are freed at once but for those its stores
  copy, held until those end (vLLM instead waits for the jobs,
  ``handle_preemptions``: an approximation).

**Eager stores** (``stores: eager``: LMCache's storage manager, SGLang
HiCache, the pool designs built on LMCache): placed as each chunk is
computed, best effort, completions applied when they end.  Each runs as
callbacks, not as a simpy process: what a process started now would do at
its first step (an urgent event at this instant: :func:`_soon`) and when the
event it waits for fires, in the same order.  A store that ends lets go of
the GPU blocks it copied from: ``on_released`` (the engine's wake-up) is
called then, so that a request waiting for GPU blocks that only stores held
is admitted at that instant.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import URGENT

from sim.serving.execute.transfers import Job, Mover
from sim.serving.policy.jobs import StoreRequest, Transfer
from sim.serving.policy.manager import BlockManager, Seq


class _Soon(simpy.Event):
    """An event that has already happened, scheduled urgent at this instant,
    whose one callback calls ``fn``: where a process started now would take
    its first step (simpy's own ``Initialize``, which ``env.process`` makes,
    with a callback in place of the process).  Like simpy's own event
    classes (``Timeout``, ``Initialize``), it sets its outcome when made."""

    def __init__(self, env: simpy.Environment, fn: Callable[[], None]):
        self.env = env
        self.callbacks = [lambda _e: fn()]
        self._ok = True
        self._value = None
        env.schedule(self, URGENT)


def _soon(env: simpy.Environment, fn: Callable[[], None]) -> None:
    """Call ``fn`` where a process started now would take its first step (:class:`_Soon`)."""
    _Soon(env, fn)


class Offloader:
    """Runs the manager's stores, demotions and write-throughs on a mover."""

    def __init__(
        self, mgr: BlockManager, mover: Mover, on_released: Callable[[], None] | None = None
    ):
        self.mgr = mgr
        self.on_released = on_released
        self.mover = mover
        self.env = mover.env
        self.step = mgr.design.stores == "step"
        self._landed: list[Transfer] = []  # step: ended, applied at the next boundary
        self._inflight: dict[int, int] = {}  # step: request -> its stores not seen ending
        self._after: dict[int, Callable[[], None]] = {}  # request -> run once they are

    # ---- what the engine calls --------------------------------------------------------
    def after_step(self, s: Seq, upto: int | None = None, store: bool = True) -> None:
        """``s`` was in the step that just ended: offload its new full blocks
        (``upto``, ``store``: :meth:`BlockManager.computed`) by the design's rule."""
        if not self.step:
            self.store(self.mgr.computed(s, upto, store))
            return
        batch = self.mgr.prepare_store(s, upto, store)
        if batch:  # None: not prepared, tried again at the request's next step
            self._run(batch)

    def store(self, req: StoreRequest | None) -> None:
        """An eager store of ``req``'s blocks, placed at this instant (after the
        caller yields)."""
        if req is None:
            return
        _soon(self.env, lambda: self._place(req))

    def load(self, t: Transfer) -> Job:
        """Start a load now."""
        return self.mover.start(t)

    def storing(self, rid: int) -> bool:
        """Whether request ``rid`` has stores not yet seen ending (step)."""
        return rid in self._inflight

    def release_after(self, rid: int, release: Callable[[], None]) -> None:
        """Call ``release`` at the boundary that sees request ``rid``'s last
        store end (``delay_free_blocks``), or now when none is in flight."""
        if rid in self._inflight:
            self._after[rid] = release
        else:
            release()

    def boundary(self) -> None:
        """A scheduler step boundary: the jobs that ended since the last one
        are completed, in the order they ended (``update_connector_output``),
        what follows them started, and the finished requests whose last store
        is among them let go of their GPU blocks."""
        if not self._landed:
            return
        landed, self._landed = self._landed, []
        for t in landed:
            for follow in self.mgr.on_stored(t):
                self._launch(follow)
            if t.tag == "store" and t.src is None:
                n = self._inflight[t.rid] - 1
                if n:
                    self._inflight[t.rid] = n
                    continue
                del self._inflight[t.rid]
                release = self._after.pop(t.rid, None)
                if release is not None:
                    release()

    # ---- running transfers -----------------------------------------------------------
    def _place(self, req: StoreRequest) -> None:
        """Place an eager store now and start its jobs."""
        placed = self.mgr.place_store(req)
        batch = placed.demotions
        if placed.store is not None:
            batch = [*batch, placed.store]
        if batch:  # consecutive urgent events at this instant: one does as well
            _soon(self.env, lambda: self._run(batch))

    def _run(self, batch: list[Transfer]) -> None:
        """Start ``batch``'s demotions now and its store (the last, if any) when
        they have all ended: it writes the slots their victims leave."""
        demotions = [t for t in batch if t.tag == "demote"]
        stores = [t for t in batch if t.tag != "demote"]
        if self.step:
            for t in stores:
                self._inflight[t.rid] = self._inflight.get(t.rid, 0) + 1
        if not demotions:
            for t in stores:
                self._begin(t)
            return
        left = [len(demotions)]

        def demoted(t: Transfer) -> None:
            self._ended(t)
            left[0] -= 1
            if not left[0]:
                for s in stores:
                    self._begin(s)

        for t in demotions:
            job = self.mover.start(t, layers=False)
            job.done.callbacks.append(lambda _e, t=t: demoted(t))

    def _launch(self, t: Transfer) -> None:
        """Run ``t`` from the next urgent instant (as a process would start)."""
        _soon(self.env, lambda: self._begin(t))

    def _begin(self, t: Transfer) -> None:
        """Start ``t`` on the mover; :meth:`_ended` when it is done."""
        job = self.mover.start(t, layers=False)  # nobody waits for a store's layers
        job.done.callbacks.append(lambda _e: self._ended(t))

    def _ended(self, t: Transfer) -> None:
        """``t`` ended: step, queued for the next boundary (the engine woken
        if idle); eager, the manager's books, what follows, the wake-ups."""
        if self.step:
            self._landed.append(t)
            if self.on_released is not None:
                self.on_released()
            return
        for follow in self.mgr.on_stored(t):
            self._launch(follow)
        if t.sources and self.on_released is not None:  # GPU blocks let go
            self.on_released()

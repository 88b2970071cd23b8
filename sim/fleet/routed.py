"""Identical serving instances behind a router, on one machine.

The instances are engines of :mod:`sim.serving.execute.multi` (one per GPU,
one flow network), built with no requests of their own.  A :class:`Router`
owns the clients instead: one per session, as an engine's own client does
(a request is sent at its ``arrival_s``; a session's turn t+1 only after
reply t has finished, wherever it was served), and when a request is sent
the routing policy (:mod:`sim.fleet.router`, no clock) picks the instance
from what each one shows at that moment (:func:`instance_state`), and the
request is released into that engine (:meth:`Engine.accept`).  Before each
decision the router is told which of the requests it routed have emitted
their first token or finished since the last one (Dynamo's
``mark_prefill_completed`` and ``free``), so a policy that tracks its own
view of the load sees it as of that moment.

Each engine keeps its own records; :func:`fleet_records` joins them into
one run's: the requests of every instance, their ops and plans (op ids
renumbered, instance after instance), the machine's devices, and the
fleet's timeline (each instance's counts summed at every change).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import simpy

from hwprofiles import HardwareProfile
from sim.fleet.router import InstanceState, KeySet, RouterPolicy
from sim.serving.execute.engine import Engine, _session_key
from sim.serving.execute.gcpolicy import relaxed_gc
from sim.serving.execute.multi import Instance, build_instances
from sim.serving.metrics import RequestLog, ServingRecords
from sim.serving.policy.seq import Seq
from sim.serving.requests import Request

_NOTHING = KeySet()  # an instance without a prefix cache: no key is cached


def instance_state(e: Engine) -> InstanceState:
    """What a router sees of engine ``e`` now (:class:`InstanceState`)."""
    gpu = e.mgr.gpu
    return InstanceState(
        queued=len(e.waiting) + len(e.parked),
        running=len(e.running),
        kv_used=gpu.used - gpu.n_evictable,
        kv_blocks=gpu.capacity,
        cached=gpu if gpu.prefix_cache else _NOTHING,  # its keys: read off the slot array
    )


class Router:
    """The clients of a routed run: each request to the instance the policy picks."""

    def __init__(self, engines: Sequence[Engine], policy: RouterPolicy, requests: list[Request]):
        self.engines, self.policy, self.requests = list(engines), policy, requests
        self.env = self.engines[0].env
        self.left = len(requests)  # not yet sent
        # (instance, rid) of the first tokens out and the requests finished since the last decision
        self.first: list[tuple[int, int]] = []
        self.done: list[tuple[int, int]] = []
        self.routed: dict[int, int] = {}  # rid -> instance index

    def start(self) -> None:
        """Register one client per session and hold every engine open."""
        self.watch()
        by_session = sorted(self.requests, key=lambda r: (_session_key(r), r.turn))
        for _, group in groupby(by_session, key=_session_key):
            self.env.process(self._client(list(group)))
        if not self.requests:
            self._close()

    def watch(self) -> None:
        """Hold every engine open and hear of each request's first token and finish."""
        for i, e in enumerate(self.engines):
            e.hold_open()
            e.on_first.append(lambda s, i=i: self.first.append((i, s.req.rid)))
            e.on_finish.append(lambda s, i=i: self.done.append((i, s.req.rid)))

    def send(self, r: Request) -> simpy.Event:
        """Route ``r`` now; the event that fires when its reply has finished."""
        i, s = self.route(r)
        return self.engines[i].finished[s]

    def _client(self, reqs: list[Request]):
        prev = None
        for r in reqs:
            wait = r.arrival_s - self.env.now
            if wait > 0:
                yield self.env.timeout(wait)
            if prev is not None:
                yield prev
            prev = self.send(r)

    def route(self, r: Request, remote: str | None = None, hold: bool = False) -> tuple[int, Seq]:
        """Send ``r`` now to the instance the policy picks (``remote``: the GPU
        its prompt was prefilled on; ``hold``: keep its blocks after it finishes;
        :meth:`Engine.accept`)."""
        self._sync()
        i = self.policy.choose(r, [instance_state(e) for e in self.engines])
        self.routed[r.rid] = i
        s = self.engines[i].accept(r, remote, hold)
        self.left -= 1
        if not self.left:
            self._close()
        return i, s

    def _sync(self) -> None:
        """Tell the policy what its routed requests did since the last decision:
        first tokens, then finishes (collected as the engines make them,
        :attr:`Engine.on_first`, :attr:`Engine.on_finish`; a rejected request
        finishes without a first token)."""
        first, self.first = self.first, []
        for i, rid in first:
            self.policy.prefilled(i, rid)
        done, self.done = self.done, []
        for i, rid in done:
            self.policy.finished(i, rid)

    def _close(self) -> None:
        for e in self.engines:
            e.close()


def run_routed(
    profile: HardwareProfile,
    instances: Sequence[Instance],
    requests: list[Request],
    policy: RouterPolicy,
    n_routed: int | None = None,
) -> tuple[dict[str, ServingRecords], dict[int, int]]:
    """Serve ``requests`` behind ``policy`` on the first ``n_routed`` of
    ``instances`` (all when None: solo, built without requests of their own);
    the others serve their own requests beside them.  Each instance's records
    by name, and each routed request's instance index by request id."""
    n = len(instances) if n_routed is None else n_routed
    if any(i.requests or i.preload or i.role != "solo" for i in instances[:n]):
        raise ValueError("routed instances are solo and get their requests from the router")
    engines = build_instances(profile, instances)
    for e in engines[:n]:
        if e.cfg.max_inflight:
            raise ValueError("max_inflight: a routed run's client is open loop")
        e.log = RequestLog(len(requests))  # rows for whatever the router sends it
    router = Router(engines[:n], policy, requests)
    return run_engines(router, instances, engines), router.routed


def run_engines(
    router: Router, instances: Sequence[Instance], engines: Sequence[Engine]
) -> dict[str, ServingRecords]:
    """Start ``router`` and the engines, run their one clock to the end, and each
    instance's records by name (its log trimmed to the requests it was sent)."""
    router.start()
    for e in engines:
        e.start()
    with relaxed_gc():
        engines[0].env.run()
    out = {}
    for inst, e in zip(instances, engines, strict=True):
        _trim(e.log, len(e.seqs))
        out[inst.name] = e.collect()
    return out


def _trim(log: RequestLog, n: int) -> None:
    """Keep the first ``n`` rows of each of ``log``'s columns."""
    for name, col in vars(log).items():
        setattr(log, name, col[..., :n])


# ---- one run's records from the instances' ------------------------------------------
class FleetPlan:
    """The instances' plans as one: instance after instance, op ids (and the ids
    their dependencies name) shifted past the instances before."""

    def __init__(self, stores: Sequence[Any]):
        self.stores = list(stores)

    def chunks(self):
        base = 0
        for store in self.stores:
            for t in store.chunks():
                yield _shift_ids(t, base, deps=True)
            base += len(store)

    def table(self) -> pa.Table:
        return pa.concat_tables(list(self.chunks())).combine_chunks()


def _shift_ids(t: pa.Table, base: int, deps: bool = False) -> pa.Table:
    if not base:
        return t
    i = t.schema.get_field_index("op_id")
    t = t.set_column(i, "op_id", pc.add(t.column("op_id"), base))
    if deps:
        j = t.schema.get_field_index("depends_on")
        d = t.column("depends_on").combine_chunks()
        shifted = pa.ListArray.from_arrays(d.offsets, pc.add(d.flatten(), base))
        t = t.set_column(j, t.schema.field(j), shifted.cast(t.schema.field(j).type))
    return t


def fleet_timeline(timelines: Sequence[pa.Table]) -> pa.Table | None:
    """The instances' timelines as the fleet's: at every instant one of them
    changes, each count (waiting, loading, running requests, GPU blocks in use)
    summed over the instances as each stands after that instant; one row per
    instant whose sums changed, as an instance's own timeline keeps (None: no
    timeline).  Each instance's rows become steps from the one before it (its
    first from 0); the steps of every instance, in time order, summed as they
    come, give the sums, and the last sums at an instant are the instant's."""
    timelines = [x for x in timelines if x.num_rows]
    if not timelines:
        return None
    table = pa.concat_tables(timelines)
    t = table.column("t_s").to_numpy()
    names = table.column_names[1:]
    counts = np.stack([table.column(n).to_numpy() for n in names], axis=1)
    steps = counts.copy()
    sizes = [len(x) for x in timelines]
    firsts = np.cumsum([0, *sizes[:-1]])
    steps[1:] -= counts[:-1]
    steps[firsts] = counts[firsts]  # an instance's first row: from nothing
    order = np.argsort(t, kind="stable")
    t, sums = t[order], np.cumsum(steps[order], axis=0)
    last = np.append(t[1:] != t[:-1], True)  # an instant's last row: its state
    t, sums = t[last], sums[last]
    changed = np.append(True, np.any(sums[1:] != sums[:-1], axis=1))
    cols = [pa.array(t[changed])] + [pa.array(sums[changed, k]) for k in range(len(names))]
    return pa.Table.from_arrays(cols, schema=table.schema)


def fleet_records(records: Sequence[ServingRecords]) -> ServingRecords:
    """One run's records from each instance's (all on one machine): every
    request and op (op ids renumbered instance after instance), the devices
    as the instance that ran longest measured them (they are the machine's),
    the timeline of the instances' counts summed (:func:`fleet_timeline`), each instance's op count
    (``parts``: a run's blocked I/O is each instance's).  Counts (iterations, each
    tier's evictions) are summed; what timed the GPU compute (``gpu_time``)
    is each distinct source the instances name, in instance order."""
    sizes = [len(r.ops) for r in records]
    bases = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)
    ops = pa.concat_tables([_shift_ids(r.ops, int(b)) for r, b in zip(records, bases, strict=True)])
    reqs = pa.concat_tables([r.requests for r in records if r.requests is not None])
    reqs = reqs.take(pc.sort_indices(reqs, [("request_id", "ascending")]))
    last = max(records, key=lambda r: r.stats.get("makespan_s", 0.0))
    stores = [r.plan_store for r in records]
    counts = dict.fromkeys(k for r in records for k in r.stats if k.endswith("_evictions"))
    sources = dict.fromkeys(r.stats["gpu_time"] for r in records if "gpu_time" in r.stats)
    stats = {
        "makespan_s": last.stats.get("makespan_s", 0.0),
        "ops": int(sum(sizes)),
        "iterations": int(sum(r.stats.get("iterations", 0) for r in records)),
        **{k: int(sum(r.stats.get(k, 0) for r in records)) for k in counts},
    }
    if sources:
        stats["gpu_time"] = "; ".join(sources)
    return ServingRecords(
        ops=ops,
        devices=last.devices,
        stats=stats,
        plan_store=FleetPlan(stores) if all(s is not None for s in stores) else None,  # type: ignore[arg-type]
        requests=reqs,
        timeline=fleet_timeline([r.timeline for r in records if r.timeline is not None]),
        gpus=tuple(g for r in records for g in r.gpus),
        parts=tuple(n for r, size in zip(records, sizes, strict=True) for n in r.parts or (size,)),
    )

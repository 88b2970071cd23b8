"""A serving scenario whose requests a router assigns to identical instances.

``router: NAME`` with ``replicas: N`` runs N instances of the workload's fields
on the profile's first N GPUs (``r0`` on the first, ...); with ``instances``
the router spreads the trace over those named in ``route_to`` (all of them
when empty; each only a name and a GPU), and any other instance serves its
own trace beside them, as in :mod:`sim.scenarios.serving_instances`.  The
trace is the workload's, drawn from the scenario's seed; each request is
assigned when it is sent (:mod:`sim.serving.execute.routed`).  The run's
records are the routed instances' together
(:func:`sim.serving.execute.routed.fleet_records`); the summary adds each
routed instance's requests and GPU hit rate, and ``turn_affinity``: the
share of a session's later turns sent to the instance that served its
previous turn (where that turn's prefix is cached).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from hwprofiles import HardwareProfile
from sim.config import ConfigError, ServingParams
from sim.models import get_model
from sim.scenarios.serving_instances import make_instances
from sim.serving.build import design_devices
from sim.serving.designs import get_design
from sim.serving.execute.multi import Instance
from sim.serving.execute.routed import fleet_records, run_routed
from sim.serving.metrics import ServingRecords, serving_summary
from sim.serving.requests import Request, load_requests
from sim.serving.router import make_router

ROUTER_SALT = 0x5017E  # the router's tie-breaking stream of the scenario's seed


def routed_specs(p: ServingParams, profile: HardwareProfile) -> tuple[list[dict], list[dict]]:
    """(routed instance specs, other instance specs) of the workload."""
    if p.replicas:
        gpus = profile.gpu_names
        if p.replicas > len(gpus):
            raise ConfigError(f"replicas: {profile.name} has {len(gpus)} GPUs, fewer than "
                              f"{p.replicas} replicas (one instance per GPU)")  # fmt: skip
        return [{"name": f"r{k}", "gpu": g} for k, g in enumerate(gpus[: p.replicas])], []
    to = set(p.route_to) or {inst["name"] for inst in p.instances}
    routed = [i for i in p.instances if i["name"] in to]
    return routed, [i for i in p.instances if i["name"] not in to]


def turn_affinity(routed: dict[int, int], reqs: list[Request]) -> float:
    """Share of the turns after a session's first sent to the instance of the
    session's previous turn (NaN when no session has two turns)."""
    last: dict[int, int] = {}
    same = later = 0
    for r in sorted(reqs, key=lambda r: (r.session, r.turn)):
        if r.session < 0:
            continue
        i = routed[r.rid]
        if r.session in last:
            later += 1
            same += last[r.session] == i
        last[r.session] = i
    return same / later if later else float("nan")


def prepare_routed(
    p: ServingParams, profile: HardwareProfile, seed: int, label: str, engine_config, trace_tables
) -> tuple[Callable[..., ServingRecords], Callable[[Any], dict]]:
    """(drive, summarize) of a routed variant; raises ConfigError when it cannot run.
    ``engine_config`` and ``trace_tables`` are :mod:`sim.scenarios.serving`'s."""
    if p.tp > 1:
        raise ConfigError("tp: tensor parallelism with a router is not modelled")
    if p.max_inflight:
        raise ConfigError("max_inflight: a routed run's client is open loop")
    specs, others = routed_specs(p, profile)
    for i, spec in enumerate(specs):
        if spec["gpu"] not in profile.gpu_names:
            raise ConfigError(f"instances[{i}].gpu: {profile.name} has no GPU {spec['gpu']!r}")
    solo = dataclasses.replace(
        p, instances=(), replicas=0, route_to=(), router="none", router_params={}
    )
    card, design = get_model(p.model), get_design(p.design, p.design_params)
    design_devices(design, profile)
    cfg = engine_config(solo, profile)
    table, warm = trace_tables(solo, seed)
    if warm is not None:
        raise ConfigError(f"trace: {p.trace}'s warm-up is placed in one instance; not routed")
    own = make_instances(dataclasses.replace(solo, instances=tuple(others)), profile, seed + 1,
                         engine_config, trace_tables)  # fmt: skip
    names = [s["name"] for s in specs]
    head: dict[str, Any] = {}

    def drive(watch: Any = None) -> ServingRecords:
        reqs = load_requests(table, p.block_tokens)
        routed = [Instance(s["name"], card, design, dataclasses.replace(cfg, gpu=s["gpu"]), [])
                  for s in specs]  # fmt: skip
        rng = np.random.default_rng(np.random.SeedSequence([seed, ROUTER_SALT]))
        policy = make_router(p.router, p.router_params, len(routed), p.block_tokens, rng)
        records, where = run_routed(profile, [*routed, *(b() for b in own)], reqs, policy,
                                    len(routed))  # fmt: skip
        counts = np.bincount(list(where.values()), minlength=len(routed))
        head.update(router=p.router, instances=len(routed), model=card.name,
                    gpu_kv_blocks=cfg.gpu_blocks)  # fmt: skip
        head["turn_affinity"] = turn_affinity(where, reqs)
        for k, name in enumerate(names):
            s = serving_summary(records[name], p.block_tokens)
            head[f"{name}_requests"] = int(counts[k])
            head[f"{name}_hit_rate_gpu"] = s["hit_rate_gpu"]
        for name in (s["name"] for s in others):
            own_s = serving_summary(records[name], p.block_tokens)
            head[f"{name}_ttft_mean_s"] = own_s["ttft_mean_s"]
        return fleet_records([records[n] for n in names])

    def summarize(records: ServingRecords) -> dict:
        row: dict[str, Any] = {"design": label.split(" | ")[0], **head}
        row.update(serving_summary(records, p.block_tokens))
        return row

    return drive, summarize

"""A serving scenario whose requests a router assigns to identical instances.

``router: NAME`` with ``replicas: N`` runs N instances of the workload's fields
on the profile's first N GPUs (``r0`` on the first, ...); with ``instances``
the router spreads the trace over those named in ``route_to`` (all of them
when empty; each only a name and a GPU), and any other instance serves its
own trace beside them, as in :mod:`sim.scenarios.serving_instances`.  The
trace is the workload's, drawn from the scenario's seed; each request is
assigned when it is sent (:mod:`sim.fleet.routed`).  The run's
records are the routed instances' together
(:func:`sim.fleet.routed.fleet_records`); the summary adds each
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
from kvtier.contracts.units import gbps
from sim.config import ConfigError, ServingParams, disagg_decode_router
from sim.fleet.disagg import disagg_records, handoffs, run_disagg
from sim.fleet.routed import fleet_records, run_routed
from sim.fleet.router import make_router
from sim.fleet.scopes import OFFLOAD, ScopeError, level_hits, scoped_tiers
from sim.models import get_model
from sim.registry import Unsupported
from sim.scenarios.serving_instances import make_instances, refuse_unfit
from sim.serving.build import design_devices
from sim.serving.designs import get_design
from sim.serving.execute.multi import Instance
from sim.serving.execute.tp import TensorParallel, rank_card, rank_params, rank_profile
from sim.serving.metrics import ServingRecords, serving_summary
from sim.serving.requests import KeySpace, Request, load_requests

ROUTER_SALT = 0x5017E  # the router's tie-breaking stream of the scenario's seed


def place(profile: HardwareProfile, n: int, tp: int = 1, what: str = "replicas") -> list[str]:
    """The first GPU of each of ``n`` instances of ``tp`` GPUs: instance ``i`` on
    node ``i // (G / tp)`` of a fleet of G-GPU nodes (one node of all the GPUs
    otherwise), on that node's GPUs ``(i mod G/tp) x tp`` onwards, so a tensor-
    parallel group never spans two nodes.  Raises ConfigError (key ``what``) when
    ``n x tp`` exceeds the GPUs or ``tp`` does not divide a node's GPUs."""
    per_node = profile.fleet.gpus_per_node if profile.fleet else profile.gpu.count
    if per_node % tp:
        raise ConfigError(
            f"tp: {tp} does not divide the {per_node} GPUs of a node of {profile.name}"
        )
    if n * tp > profile.gpu.count:
        noun = "replicas" if what == "replicas" else "instances"
        raise ConfigError(f"{what}: {profile.name} has {profile.gpu.count} GPUs, fewer than "
                          f"{n} {noun} x tp {tp} (one instance per {tp} GPU(s))")  # fmt: skip
    slots = per_node // tp
    return [f"gpu{(i // slots) * per_node + (i % slots) * tp}" for i in range(n)]


def routed_specs(p: ServingParams, profile: HardwareProfile) -> tuple[list[dict], list[dict]]:
    """(routed instance specs, other instance specs) of the workload; with
    ``disaggregation`` the prefill instances ``p0``... then the decode ones
    ``d0``..., placed in that order."""
    if p.disaggregation:
        n_p, n_d = p.disaggregation["prefill"], p.disaggregation["decode"]
        gpus = place(profile, n_p + n_d, p.tp, "disaggregation")
        names = [f"p{k}" for k in range(n_p)] + [f"d{k}" for k in range(n_d)]
        return [{"name": n, "gpu": g} for n, g in zip(names, gpus, strict=True)], []
    if p.replicas:
        gpus = place(profile, p.replicas, p.tp)
        return [{"name": f"r{k}", "gpu": g} for k, g in enumerate(gpus)], []
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
    if p.tp > 1 and (p.disaggregation or p.instances):
        why = "disaggregation" if p.disaggregation else "instances listed one by one"
        raise ConfigError(f"tp: tensor parallelism with {why} is not modelled (use replicas)")
    if p.max_inflight:
        raise ConfigError("max_inflight: a routed run's client is open loop")
    specs, others = routed_specs(p, profile)
    for i, spec in enumerate(specs):
        if spec["gpu"] not in profile.gpu_names:
            raise ConfigError(f"instances[{i}].gpu: {profile.name} has no GPU {spec['gpu']!r}")
    solo = dataclasses.replace(
        p, instances=(), replicas=0, route_to=(), router="none", router_params={},
        disaggregation={}, tier_scope="instance",
    )  # fmt: skip
    full = get_model(p.model)
    groups = [[f"gpu{int(s['gpu'][3:]) + k}" for k in range(p.tp)] for s in specs]
    if p.tp > 1:  # each instance's rank 0 on the machine its ranks share (execute.tp)
        try:
            profile = rank_profile(profile, p.tp, groups)
        except Unsupported as e:
            raise ConfigError(str(e)) from None
    card, design = rank_card(full, p.tp), get_design(p.design, rank_params(p).design_params)
    tiered = any(design_devices(design, profile))
    cfg = engine_config(solo, profile)
    table, warm = trace_tables(solo, seed)
    refuse_unfit(table, solo.block_tokens, cfg.gpu_blocks, f"{card.name} on {profile.name}")
    if warm is not None:
        raise ConfigError(f"trace: {p.trace}'s warm-up is placed in one instance; not routed")
    own = make_instances(dataclasses.replace(solo, instances=tuple(others)), profile, seed + 1,
                         engine_config, trace_tables)  # fmt: skip
    if p.disaggregation:
        return _disagg(p, profile, seed, label, specs, card, design, cfg, table, tiered)
    names = [s["name"] for s in specs]
    head: dict[str, Any] = {}
    gpus = [s["gpu"] for s in specs]
    try:  # checked before the run (bad input: exit 2); built anew by each drive
        scoped_tiers(p.tier_scope, design, profile, card, cfg.block_tokens, gpus)
    except ScopeError as e:
        raise ConfigError(str(e)) from None

    def drive(watch: Any = None) -> ServingRecords:
        space = KeySpace()  # the routed requests' and the other instances' keys
        reqs = load_requests(table, p.block_tokens, space=space)
        sets = scoped_tiers(p.tier_scope, design, profile, card, cfg.block_tokens, gpus)
        ranks = [TensorParallel(p.tp, full, g[0], g[1]) if p.tp > 1 else None for g in groups]
        routed = [Instance(s["name"], card, design, dataclasses.replace(cfg, gpu=s["gpu"]), [],
                           tiers=t, tp=r)
                  for s, t, r in zip(specs, sets, ranks, strict=True)]  # fmt: skip
        rng = np.random.default_rng(np.random.SeedSequence([seed, ROUTER_SALT]))
        policy = make_router(p.router, p.router_params, len(routed), p.block_tokens, rng)
        records, where = run_routed(profile, [*routed, *(b(space) for b in own)], reqs, policy,
                                    len(routed))  # fmt: skip
        counts = np.bincount(list(where.values()), minlength=len(routed))
        head.update(router=p.router, instances=len(routed), model=full.name, tp=p.tp,
                    gpu_kv_blocks=cfg.gpu_blocks)  # fmt: skip
        head["turn_affinity"] = turn_affinity(where, reqs)
        head["tier_scope"] = p.tier_scope
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
        row.update(network_summary(records, profile))
        rates = level_hits(p.tier_scope, {t: row[f"hit_rate_{t}"] for t in ("gpu", *OFFLOAD)})
        row.update({f"hit_rate_level_{level}": x for level, x in rates.items()})
        return row

    return drive, summarize


def network_summary(records: ServingRecords, profile: HardwareProfile) -> dict[str, float]:
    """A fleet's network as the run used it (nothing on one machine): ``net_gb`` the
    bytes the NIC ports sent, ``nic_busy_max`` the largest share of the run a NIC
    port (one direction) carried a flow, ``nic_load_max`` its bytes over its
    achievable rate x the run, ``uplink_load_max`` the same for leaf uplinks."""
    if profile.fleet is None:
        return {}
    dev = records.devices.to_pandas()
    dev = dev[dev["type"] == "link"]
    span = float(records.stats.get("makespan_s", 0.0))
    port = dev[dev["device"].str.contains(r"\.nic\d+\.port")]
    up = dev[dev["device"].str.startswith("leaf")]
    caps = {ln.name: gbps(ln.gbps) * profile.efficiency.rdma for ln in profile.topology.links}
    # each port at its own rate (a storage node's NICs may differ from the GPUs')
    loads = [b / (caps[d[:-1]] * span) for d, b in zip(port["device"], port["bytes_read"],
                                                        strict=True) if span > 0]  # fmt: skip
    out = {
        "net_gb": float(port.loc[port["device"].str.endswith(">"), "bytes_read"].sum()) / 1e9,
        "nic_busy_max": float(port["util_mean"].max()) if len(port) else 0.0,
        "nic_load_max": max(loads) if loads else 0.0,
    }
    loads = [b / (caps[d[:-1]] * span) for d, b in zip(up["device"], up["bytes_read"], strict=True)
             if span > 0]  # fmt: skip
    out["uplink_load_max"] = max(loads) if loads else 0.0
    return out


def _disagg(
    p: ServingParams, profile: HardwareProfile, seed: int, label: str, specs: list[dict],
    card: Any, design: Any, cfg: Any, table: Any, tiered: bool = False,
) -> tuple[Callable[..., ServingRecords], Callable[[Any], dict]]:  # fmt: skip
    """(drive, summarize) of a disaggregated variant (:mod:`sim.fleet.disagg`).

    A design with offload tiers keeps them on the **prefill** instances (each its
    own, ``tier_scope`` instance): a prompt's prefix hits load from them before its
    prefill and its blocks are stored there, as Mooncake's prefill nodes reuse the
    KVCache pool's prefixes and Dynamo's KVBM offloads from the prefill workers;
    the decode instances hold the running requests' KV, received whole over the
    network, and keep no tiers (``gpu-only``): a later turn prefills on a prefill
    instance again, so a decode-side copy would never be looked up."""
    n_p = p.disaggregation["prefill"]
    d_name, d_params = disagg_decode_router(p)
    head: dict[str, Any] = {}
    if tiered and p.tier_scope != "instance":
        raise ConfigError(f"tier_scope: {p.tier_scope} with disaggregation is not modelled")
    plain = get_design("gpu-only") if tiered else design

    def drive(watch: Any = None) -> ServingRecords:
        reqs = load_requests(table, p.block_tokens)
        inst = [Instance(s["name"], card, design if k < n_p else plain,
                         dataclasses.replace(cfg, gpu=s["gpu"]), [])
                for k, s in enumerate(specs)]  # fmt: skip
        root = np.random.SeedSequence([seed, ROUTER_SALT])
        rng_p, rng_d = (np.random.default_rng(x) for x in root.spawn(2))
        pol_p = make_router(p.router, p.router_params, n_p, p.block_tokens, rng_p)
        pol_d = make_router(d_name, d_params, len(inst) - n_p, p.block_tokens, rng_d)
        records, router = run_disagg(profile, inst[:n_p], inst[n_p:], reqs, pol_p, pol_d)
        pre = [records[s["name"]] for s in specs[:n_p]]
        dec = [records[s["name"]] for s in specs[n_p:]]
        h = handoffs(dec, router)
        head["turn_affinity"] = turn_affinity(router.routed, reqs)  # of the prefill picks
        wait = h["decode_admit_s"] - h["prefill_end_s"]
        kv = h["kv_end_s"] - h["kv_start_s"]
        head.update(router=p.router, decode_router=d_name, prefill_instances=n_p,
                    decode_instances=len(inst) - n_p, model=card.name,
                    gpu_kv_blocks=cfg.gpu_blocks)  # fmt: skip
        head.update(kv_transfer_mean_s=float(kv.mean()), kv_transfer_p50_s=_pct(kv, 50),
                    kv_transfer_p99_s=_pct(kv, 99), kv_transfer_gb=float(h["kv_bytes"].sum()) / 1e9,
                    decode_wait_mean_s=float(wait.mean()), decode_wait_p99_s=_pct(wait, 99),
                    decode_tpot_mean_s=float(h["decode_tpot_s"].mean()),
                    decode_tpot_p50_s=_pct(h["decode_tpot_s"], 50),
                    decode_tpot_p99_s=_pct(h["decode_tpot_s"], 99))  # fmt: skip
        return disagg_records(pre, dec, reqs)

    def summarize(records: ServingRecords) -> dict:
        row: dict[str, Any] = {"design": label.split(" | ")[0], **head}
        row.update(serving_summary(records, p.block_tokens))
        row.update(network_summary(records, profile))
        rates = level_hits("instance", {t: row[f"hit_rate_{t}"] for t in ("gpu", *OFFLOAD)})
        row.update({f"hit_rate_level_{level}": x for level, x in rates.items()})
        return row

    return drive, summarize


def _pct(x: Any, q: float) -> float:
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else float("nan")

"""A serving scenario of several instances on one machine (``workload.instances``).

Each instance is the workload's fields with its own overrides (model, trace,
design, ...), on its own GPU, with a role (:mod:`sim.serving.execute.multi`).  A
worker lends ``lend_share`` of its KV memory to the master: it keeps the
rest as its own GPU cache.  Each instance's conversation trace is drawn
from its own seed (the scenario's seed plus its index), so two instances
with the same fields still see different sessions.  The run's records are
the master's (or the first instance's); the summary adds every other
instance's mean TTFT and TPOT (the interference a lending worker sees) and
each elastic worker's resizes (``elastic``: :class:`sim.serving.execute.lending.ElasticSpec`,
Algorithm 1 on the clock; without it a worker lends ``lend_share`` throughout).
A worker's ``stream_share`` of its KV memory holds the master's streamed
full-layer blocks (Eq. 2's ``C_worker``, outside ``lend_share``), and a
master with ``lsc: true`` splits its own memory into the layer stream cache
and the regular cache by Eq. 3-5 over them (:mod:`sim.serving.execute.streaming`).
``cache_replies`` (off | gpu | store, :class:`sim.serving.execute.engine.EngineConfig`)
says what an instance keeps of each finished reply's KV for the next turn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from hwprofiles import HardwareProfile
from sim.config import INSTANCE_KEYS, ConfigError, ServingParams
from sim.models import get_model
from sim.scenarios.swift_traces import leval_long_tables, sharegpt_long_tables
from sim.serving.build import design_devices
from sim.serving.designs import get_design
from sim.serving.execute.lending import ElasticSpec
from sim.serving.execute.multi import Instance, run_instances
from sim.serving.metrics import ServingRecords, serving_summary
from sim.serving.requests import KeySpace, Request, load_requests


def instance_params(p: ServingParams, spec: dict) -> ServingParams:
    """The workload's fields with the instance's overrides."""
    over = {k: v for k, v in spec.items() if k not in INSTANCE_KEYS}
    return dataclasses.replace(p, instances=(), **over)


def make_instances(
    p: ServingParams, profile: HardwareProfile, seed: int, engine_config, trace_tables
) -> list[Callable[[KeySpace], Instance]]:
    """One builder per declared instance (requests are loaded when called,
    their keys in the run's key space it is given);
    raises ConfigError naming the instance when it cannot run.  ``engine_config``
    and ``trace_tables`` are :mod:`sim.scenarios.serving`'s (passed in: that
    module imports this one)."""
    out = []
    for i, spec in enumerate(p.instances):
        ip = instance_params(p, spec)
        gpu, role = spec["gpu"], spec.get("role", "solo")
        if gpu not in profile.gpu_names:
            raise ConfigError(f"instances[{i}].gpu: {profile.name} has no GPU {gpu!r}")
        card, design = get_model(ip.model), get_design(ip.design, ip.design_params)
        design_devices(design, profile)
        cfg = engine_config(ip, profile)
        share = spec.get("lend_share", 0.0) if role == "worker" else 0.0
        lent_blocks = math.floor(cfg.gpu_blocks * share)
        stream_blocks = math.floor(cfg.gpu_blocks * spec.get("stream_share", 0.0))
        replies = spec.get("cache_replies", "off")
        own = cfg.gpu_blocks - lent_blocks - stream_blocks
        cfg = dataclasses.replace(cfg, gpu=gpu, gpu_blocks=own, cache_replies=replies)
        lend = lent_blocks * ip.block_tokens * card.kv_bytes_per_token
        stream = stream_blocks * ip.block_tokens * card.kv_bytes_per_token
        if ip.trace == "sharegpt_long":  # seed 002's master workload
            table, warm = sharegpt_long_tables(ip, seed + i)
        elif ip.trace == "leval_long":  # seed 002's L-Eval, synthesised (traces/leval.py)
            table, warm = leval_long_tables(ip, seed + i)
        else:
            table, warm = trace_tables(ip, seed + i)

        el = ElasticSpec(**spec["elastic"]) if role == "worker" and spec.get("elastic") else None

        def build(space: KeySpace, ip=ip, card=card, design=design, cfg=cfg, table=table,
                  warm=warm, spec=spec, role=role, lend=lend, el=el,
                  stream=stream) -> Instance:  # fmt: skip
            reqs = load_requests(table, ip.block_tokens, cfg.cache_replies != "off", space)
            pre: list[Request] = (
                load_requests(warm, ip.block_tokens, space=space) if warm is not None else []
            )
            lsc = role == "master" and spec.get("lsc", False) in (True, "shared")
            shared = lsc and spec.get("lsc") == "shared"
            return Instance(spec["name"], card, design, cfg, reqs, pre, role, lend, el,
                            stream_bytes=stream, lsc=lsc, lsc_shared=shared)  # fmt: skip

        out.append(build)
    return out


def prepare_instances(
    p: ServingParams, profile: HardwareProfile, seed: int, label: str, engine_config, trace_tables
) -> tuple[Callable[..., ServingRecords], Callable[[Any], dict]]:
    """(drive, summarize) of a multi-instance variant."""
    builders = make_instances(p, profile, seed, engine_config, trace_tables)
    roles = [spec.get("role", "solo") for spec in p.instances]
    main = roles.index("master") if "master" in roles else 0
    others: dict[str, ServingRecords] = {}
    head: dict[str, Any] = {}

    def drive(watch: Any = None) -> ServingRecords:
        space = KeySpace()  # every instance's keys: one space a run
        insts = [b(space) for b in builders]
        lending: dict = {}
        records = run_instances(profile, insts, lending, p.copy_sm_share)
        head.update({f"{w}_{k}": v for w, st in lending.items() for k, v in st.items()})
        head.update(model=insts[main].card.name, gpu_kv_blocks=insts[main].cfg.gpu_blocks)
        head["lent_gb"] = sum(i.lend_bytes for i in insts) / 1e9
        names = [i.name for i in insts]
        others.update({n: records[n] for k, n in enumerate(names) if k != main})
        return records[names[main]]

    def summarize(records: ServingRecords) -> dict:
        row: dict[str, Any] = {"design": label.split(" | ")[0], **head}
        row.update(serving_summary(records, p.block_tokens))
        for name, rec in others.items():
            s = serving_summary(rec, p.block_tokens)
            row[f"{name}_ttft_mean_s"] = s["ttft_mean_s"]
            row[f"{name}_tpot_mean_s"] = s["tpot_mean_s"]
        return row

    return drive, summarize


def refuse_unfit(table: Any, block_tokens: int, gpu_blocks: int, what: str) -> None:
    """Refuse, before simulating, a trace with a request no instance can hold: the
    engine reserves a request's whole context (prompt plus output) in GPU blocks and
    rejects one larger than its cache (:meth:`Engine._release`), which would leave it
    out of every percentile.  ``what``: the instance (its model and machine)."""
    if not len(table):
        return
    tokens = table.column("input_tokens").to_numpy() + table.column("output_tokens").to_numpy()
    i = int(np.argmax(tokens))
    if -(-int(tokens[i]) // block_tokens) > gpu_blocks:
        rid = table.column("request_id")[i].as_py()
        raise ConfigError(
            f"trace: request {rid} holds {int(tokens[i]):,} tokens of KV (prompt + output), "
            f"over the GPU KV cache of {gpu_blocks * block_tokens:,} tokens ({what}): "
            "no instance could run it"
        )

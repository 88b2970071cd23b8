"""Serving scenarios: request traces, the variant matrix and the driver.

Two traces come built in; a request trace file is the third way (any format
:mod:`traces.request_readers` reads: kvtier Parquet, Mooncake JSONL, Azure
or Vidur CSV; hashes map onto the engine's blocks, see
:mod:`sim.serving.requests`):

* ``long_doc`` — seed 004's setup (§III-A, §V-A): LMCache's Long Doc QA,
  ``docs`` documents of ``context_tokens`` tokens each, every one served once
  (the warm-up pass, whose KV the design offloads) and then queried again
  with the same prompt, the queries all sent at once (``max_inflight``
  bounds them like the benchmark's client) with ``output_tokens`` to
  generate ("we fix the maximum output length to 100 tokens").  The warm-up
  is not simulated: its blocks are placed in the design's tiers as its own
  store path would (:meth:`sim.serving.policy.manager.BlockManager.preload`), so
  the run measures retrieval, which is what the seed's TTFT and blocked I/O
  figures are about.  The GPU prefix cache is off in that scenario, so
  every hit comes from the offload tiers.
* ``conversation`` — multi-turn chat sessions (seed 001's future work,
  §4.3.2): each turn re-sends the whole history plus a new prompt, so a
  session's turns share a growing prefix.  Sessions start as a Poisson
  process; turns per session are geometric; prompt and reply lengths are
  log-normal around the given medians; a session ends before its history
  would pass ``max_context`` (seed 001 ran with ``--max-model-len 4096``).

A scenario's ``matrix`` (workload field -> values) runs every variant at
every point: ``unified-pooling`` crosses three models with context lengths
1K..128K, each point an independent simulation named
``design | model | context``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from sim.config import ConfigError, ScenarioConfig, ServingParams, Variant
from sim.factors import expand_matrix
from sim.hw.measured import GpuTime, resolve
from sim.models import get_model
from sim.registry import REQUEST_TRACES
from sim.serving.build import (
    GIB,
    build_engine,
    default_gpu_kv_bytes,
    design_devices,
    gpu_blocks,
    make_tiers,
)
from sim.serving.designs import get_design
from sim.serving.execute.engine import EngineConfig
from sim.serving.execute.engine import Progress as EngineProgress
from sim.serving.execute.tp import TensorParallel, rank_card, rank_params, rank_profile
from sim.serving.metrics import ServingRecords, serving_summary
from sim.serving.oracle import accesses, ceilings
from sim.serving.requests import KeySpace, Request, load_requests, request_table


# ---- variants ------------------------------------------------------------------------
def expand_variants(cfg: ScenarioConfig) -> tuple[Variant, ...]:
    """Every variant at every point of its ``matrix`` (the variant's own
    overrides of a matrix field are replaced by the point's value); the
    mechanism is the sweep's (:func:`sim.factors.expand_matrix`)."""
    return expand_matrix(cfg)


def design_label(variant_name: str) -> str:
    return variant_name.split(" | ")[0]


# ---- traces ----------------------------------------------------------------------------
def long_doc_tables(p: ServingParams) -> tuple[pa.Table, pa.Table]:
    """(queries, warm-up) of the Long Doc QA workload; document d is session d."""
    warm = [
        {"request_id": p.docs + d, "arrival_s": 0.0, "session_id": d, "turn": 0,
         "input_tokens": p.context_tokens, "output_tokens": p.output_tokens}
        for d in range(p.docs)
    ]  # fmt: skip
    queries = [{**w, "request_id": d, "turn": 1} for d, w in enumerate(warm)]
    return request_table(queries, p.block_tokens), request_table(warm, p.block_tokens)


def conversation_table(p: ServingParams, seed: int) -> pa.Table:
    """Multi-turn sessions (see the module docstring)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC0A7]))
    rows: list[dict] = []
    start = 0.0
    for session in range(p.sessions):
        start += rng.exponential(1.0 / p.session_rate)
        t, history = start, 0
        for turn in range(int(rng.geometric(1.0 / max(p.turns, 1.0)))):
            prompt = max(1, int(rng.lognormal(np.log(p.prompt_tokens), 1.0)))
            reply = max(1, min(2048, int(rng.lognormal(np.log(p.reply_tokens), 0.7))))
            if history + prompt + reply > p.max_context:
                break
            rows.append(
                {"request_id": len(rows), "arrival_s": t, "session_id": session, "turn": turn,
                 "input_tokens": history + prompt, "output_tokens": reply}
            )  # fmt: skip
            history += prompt + reply
            t += rng.exponential(p.think_s) if p.think_s > 0 else 0.0
    return request_table(rows, p.block_tokens)


def trace_tables(p: ServingParams, seed: int) -> tuple[pa.Table, pa.Table | None]:
    """(requests, warm-up requests or None) of the workload's trace."""
    if p.trace == "long_doc":
        queries, warm = long_doc_tables(p)
        return queries, warm
    if p.trace == "conversation":
        table = conversation_table(p, seed)
    elif p.trace in REQUEST_TRACES:  # drawn n long: the first n requests already
        table = _drawn(p.trace, p.requests, seed)
    else:
        table = file_table(p.trace)
    if p.requests:
        order = np.argsort(table.column("arrival_s").to_numpy(), kind="stable")[: p.requests]
        table = table.take(pa.array(np.sort(order)))
    if p.arrival_scale != 1.0:  # the same requests, arriving arrival_scale times as fast
        i = table.schema.get_field_index("arrival_s")
        scaled = pa.array(table.column(i).to_numpy() / p.arrival_scale)
        table = table.set_column(i, table.schema.field(i), scaled)
    return table, None


@functools.lru_cache(maxsize=2)
def _drawn(trace: str, n: int, seed: int) -> pa.Table:
    """A registered trace drawn ``n`` long with ``seed`` (a pure function of them;
    a table is immutable): drawn once for a run's overload check and the run
    (the whole conversation trace: 0.6 CPU s a draw)."""
    return REQUEST_TRACES.entry(trace).factory(n, seed)


def file_table(path: str) -> pa.Table:
    """A request trace file (kvtier Parquet, Mooncake JSONL, Azure or Vidur CSV,
    read by :func:`traces.request_readers.read_trace`) as an engine request table."""
    from traces.request_readers import read_trace

    if not Path(path).exists():
        raise ConfigError(f"trace: '{path}' is neither conversation, long_doc nor a trace file")
    trace = read_trace(path)
    return trace.table.replace_schema_metadata({"block_tokens": str(trace.block_tokens)})


# ---- driver ----------------------------------------------------------------------------
def engine_config(p: ServingParams, profile: HardwareProfile) -> EngineConfig:
    card = rank_card(get_model(p.model), p.tp)  # ``profile``: the rank's (sim.serving.execute.tp)
    if p.gpu_kv_tokens:
        blocks = p.gpu_kv_tokens // p.block_tokens
    else:
        kv = default_gpu_kv_bytes(profile, card, p.gpu_memory_utilization)
        blocks = gpu_blocks(max(kv, 0.0), card, p.block_tokens)
    if blocks < 1:
        raise ConfigError(
            f"model {card.name} ({card.weight_bytes / GIB:.1f} GiB of weights) leaves no room "
            f"for KV on {profile.name} at gpu_memory_utilization {p.gpu_memory_utilization}"
        )
    gpu_time = GpuTime.of(p)
    # an unknown framework version fails here, before running
    resolve(profile, get_model(p.model), gpu_time, p.tp)
    return EngineConfig(
        gpu_blocks=blocks,
        block_tokens=p.block_tokens,
        max_batch=p.max_batch,
        max_batched_tokens=p.max_batched_tokens,
        prefix_cache=p.gpu_prefix_cache,
        max_inflight=p.max_inflight,
        preempt=p.preempt,
        gpu=profile.gpu_names[0],
        gpu_time=gpu_time,
    )


def prepare(
    p: ServingParams, profile: HardwareProfile, seed: int, name: str
) -> tuple[Callable[[], ServingRecords], Callable[[Any], dict]]:
    """(drive, summarize) of one variant; raises early if it cannot run.  A
    workload declaring ``instances`` runs them all on one machine
    (:mod:`sim.scenarios.serving_instances`); one with a ``router`` sends each
    request to one of its instances on arrival (:mod:`sim.scenarios.serving_routed`)."""
    if p.routed:
        from sim.scenarios.serving_routed import prepare_routed

        return prepare_routed(p, profile, seed, name, engine_config, trace_tables)
    if p.instances:
        from sim.scenarios.serving_instances import prepare_instances

        if p.tp > 1:
            raise ConfigError("tp: tensor parallelism with several instances is not modelled")
        return prepare_instances(p, profile, seed, name, engine_config, trace_tables)
    full = get_model(p.model)
    card, profile = rank_card(full, p.tp), rank_profile(profile, p.tp)
    tp = TensorParallel(p.tp, full) if p.tp > 1 else None
    design = get_design(p.design, rank_params(p).design_params)
    design_devices(design, profile)  # Unsupported if the profile lacks devices
    cfg = engine_config(p, profile)
    table, warm = trace_tables(p, seed)
    from sim.scenarios.serving_instances import refuse_unfit

    refuse_unfit(table, p.block_tokens, cfg.gpu_blocks, f"{card.name} on {profile.name}")

    def drive(watch: EngineProgress | None = None) -> ServingRecords:
        """Run the engine; ``watch(simulated s, requests done, requests)`` as it goes."""
        space = KeySpace()  # the trace's and the warm-up's keys: one space
        reqs = load_requests(table, p.block_tokens, space=space)
        pre: list[Request] = []
        if warm is not None:
            pre = load_requests(warm, p.block_tokens, space=space)
        return build_engine(profile, card, design, cfg, reqs, pre, tp=tp).run(watch)

    def summarize(records: ServingRecords) -> dict:
        head: dict[str, Any] = {"design": design_label(name), "model": full.name, "tp": p.tp}
        if p.trace == "long_doc":
            head["context_tokens"] = p.context_tokens
        out = {**head, "gpu_kv_blocks": cfg.gpu_blocks, **serving_summary(records, p.block_tokens)}
        cap = cache_blocks(design, profile, card, cfg)
        return {**out, **ceiling_columns(table, warm, p.block_tokens, cap)}

    return drive, summarize


def cache_blocks(design, profile: HardwareProfile, card, cfg: EngineConfig) -> int:
    """GPU blocks a design can hold cached: the GPU's (where its prefix cache is
    on) plus each offload tier's bytes in whole offload blocks (``make_tiers``'
    capacities; a tier's copy of a GPU block counts again, so this is at least
    the distinct blocks the design can hold)."""
    tiers, _ = make_tiers(design, profile, card, cfg.block_tokens)
    factor = design.offload_factor(cfg.block_tokens)
    held = sum(int(sum(t.capacity) // (t.layers * t.layer_bytes)) * factor for t in tiers)
    return held + (cfg.gpu_blocks if cfg.prefix_cache else 0)


def ceiling_columns(table: pa.Table, warm: pa.Table | None, block: int, cap: int) -> dict:
    """The trace's hit-rate ceilings at ``cap`` blocks (:mod:`sim.serving.oracle`;
    a warm-up pass fills the cache first and is not counted)."""
    space = KeySpace()
    pre = load_requests(warm, block, space=space) if warm is not None else []
    reqs = pre + load_requests(table, block, space=space)
    n_warm = warm.num_rows if warm is not None else 0
    acc = accesses([r.hashes for r in reqs], [r.input_tokens for r in reqs], block, n_warm)
    c = ceilings(acc, cap)
    return {"cache_blocks": cap, "hit_ceiling_infinite": c.infinite,
            "hit_ceiling_belady": c.belady, "hit_ceiling_lru": c.lru}  # fmt: skip

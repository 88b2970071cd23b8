"""One point of a capacity plan: simulate it, read its SLO metrics and its bottleneck.

A :class:`Question` is what the user asks (model, workload, SLOs, base
profile); a :class:`Point` is one design on one hardware variant.  The
workload is the serving scenario (:mod:`sim.scenarios.serving`): ``long_doc``
(``docs`` documents of ``context_tokens`` each, offloaded then queried at
once, as in seed 004) or a request trace file; TTFT and TPOT percentiles and
output tokens/s come from its request records.

The host-memory KV tier gets what the machine's DRAM leaves after
``host_reserve_gib`` (OS, engine, pinned buffers), so buying DRAM buys KV
capacity and, with each module on its own memory bus, bandwidth.  Replicas on
one node split it, and the question's SSD capacity, evenly (each instance keeps
its own tiers, on its own share of the node's devices: :mod:`sim.fleet.scopes`).

Bottleneck (:mod:`sim.capacity.binding`: bytes, I/Os, core-seconds or FLOPs
over capacity x time): ``bottleneck`` is what binds the TTFT, the resource
with the largest used share inside the P99-TTFT request's window (release to
first token; the whole run where there are no requests: sparse decoding), with
that share and its busy share; ``bottleneck_tpot`` binds the TPOT, the same over
the P99-TPOT request's decode (first token to last; empty where no request
decoded: sparse decoding, one-token outputs); ``bottleneck_run`` is the largest used share
over the whole run (what a longer or busier run would saturate first: the
search's saturation rules read its ``bottleneck_run_ssd_only`` and
``bottleneck_run_gpu_relieved``, :class:`sim.capacity.binding.Binding`); each
label has those two booleans beside it; ``busiest`` is the device or link with
the highest ``util_mean`` (busy seconds over the makespan).

Headroom to an SLO limit ``L`` on a metric ``m`` is ``L / m - 1``
(0.25: 25% slack; negative: missed); for a throughput floor it is ``m / L - 1``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hwprofiles import HardwareProfile
from kvtier.contracts.provenance import file_digest
from sim.capacity.binding import binding, of_run
from sim.capacity.variants import Hardware, derive
from sim.config import ConfigError, ScenarioConfig, ServingParams, SparseDecodeParams, Variant
from sim.registry import SPARSE_DECODE_DESIGNS, Unsupported

# metrics a point reports; the objectives of the search are the first three
OBJECTIVES = ("ttft_p99_s", "tpot_p99_s", "throughput_tok_s")


@dataclass(frozen=True)
class Question:
    """What the plan must serve, and how well."""

    base: str = "h100-2dimm-2ssd"  # base hardware profile (name or path)
    model: str = "Llama-3.1-8B"
    trace: str = "long_doc"  # long_doc | a request trace file | sparse_decode
    sparsity: float = 0.1  # sparse_decode: share of the KV each decode step reads
    steps: int = 4  # sparse_decode: decode steps simulated
    context_tokens: int = 131072
    docs: int = 8
    output_tokens: int = 100
    requests: int = 0  # a trace file: first N requests (0 = all)
    block_tokens: int = 256
    ssd_gib: float = 372.53  # SSD KV capacity of a design that uses SSDs (400 GB)
    host_reserve_gib: float = 16.0  # DRAM not available to the KV tier
    seed: int = 0
    # the trace's arrival rate times this (a request trace; sim.capacity.load probes it)
    arrival_scale: float = 1.0
    slo_ttft_p99_s: float = 10.0  # 0 = no limit
    slo_tpot_p99_s: float = 0.0  # 0 = no limit
    slo_min_tok_s: float = 0.0  # 0 = no floor
    # GPU step time of every point (sim.hw.measured): roofline | measured | auto, as a
    # scenario's gpu_time, framework and framework_version
    gpu_time: str = "roofline"
    framework: str = "vllm"
    framework_version: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def slos(self) -> dict[str, tuple[str, float]]:
        """metric -> (``max`` or ``min``, limit) of the SLOs set."""
        out = {}
        if self.slo_ttft_p99_s > 0:
            out["ttft_p99_s"] = ("max", self.slo_ttft_p99_s)
        if self.slo_tpot_p99_s > 0:
            out["tpot_p99_s"] = ("max", self.slo_tpot_p99_s)
        if self.slo_min_tok_s > 0:
            out["throughput_tok_s"] = ("min", self.slo_min_tok_s)
        return out


@dataclass(frozen=True)
class Point:
    """One design on one hardware variant; with ``replicas`` > 0, that many one-GPU
    instances of it (the machine's GPUs, ``hw.gpus`` = ``replicas``) behind the
    registered ``router`` (:mod:`sim.fleet.router`), each request routed on arrival."""

    design: str
    hw: Hardware
    replicas: int = 0
    router: str = ""

    def flat(self) -> dict[str, Any]:
        # no replicas: the keys of a point stored before replicas were a dimension
        fleet = {"replicas": self.replicas, "router": self.router} if self.replicas else {}
        return {"design": self.design, **asdict(self.hw), **fleet}


@functools.cache
def code_digest() -> str:
    """Digest of the Python sources that make a point's result (the simulator, the
    profiles' loader, the traces, the shared contracts), so a plan store written by
    other code is recomputed rather than read: a modelling change moves results
    without touching the question or the profile."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in ("sim", "hwprofiles", "traces", "kvtier/contracts"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def point_key(q: Question, p: Point) -> str:
    """Hash of the effective configuration: the question (SLOs excluded: they
    judge a result, not make it), the point, the base profile file's bytes and
    the code that simulates it (:func:`code_digest`)."""
    from hwprofiles.loader import PROFILE_DIR, resolve_yaml

    run = {k: v for k, v in q.to_dict().items() if not k.startswith("slo_")}
    base = resolve_yaml(q.base, PROFILE_DIR, "hardware profile")
    blob = json.dumps(
        {"q": run, "p": p.flat(), "base": file_digest(base), "code": code_digest()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def scenario(
    q: Question, design: str, profile: HardwareProfile, tp: int = 1, replicas: int = 0,
    router: str = "none",
) -> ScenarioConfig:  # fmt: skip
    """The scenario of ``design`` on ``profile`` for question ``q``: serving (tensor
    parallel over ``tp`` GPUs, or ``replicas`` one-GPU instances behind ``router``), or
    sparse decoding (``trace: sparse_decode``) of ``docs`` concurrent sessions."""
    if q.trace == "sparse_decode":
        return sparse_scenario(q, design)
    from sim.serving.build import node_devices
    from sim.serving.designs import get_design

    base = get_design(design, {})
    # a preset that sizes its tiers names them (paged-*); lmcache and pool presets
    # leave both to the scenario; gpu-only keeps none
    both = not base.has_offload and design != "gpu-only"
    params: dict[str, Any] = {}
    # replicas on one node split its budgets: the node's DRAM after the reserve and the
    # question's SSD capacity (each instance its own tiers, sim.fleet.scopes)
    nodes = profile.fleet.nodes if profile.fleet is not None else 1
    per_node = -(-replicas // nodes) if replicas else 1
    if base.cpu_gib > 0 or both:
        node_dram = set(node_devices(profile, 0 if profile.fleet is not None else None)[0])
        dram = sum(m.capacity_gib for m in profile.dram if m.name in node_dram)
        params["cpu_gib"] = max(dram - q.host_reserve_gib, 1.0) / per_node
    if base.ssd_gib > 0 or both:
        params["ssd_gib"] = q.ssd_gib / per_node
    w = ServingParams(
        model=q.model, design=design, design_params=params, trace=q.trace,
        requests=q.requests, context_tokens=q.context_tokens, docs=q.docs,
        output_tokens=q.output_tokens, block_tokens=q.block_tokens,
        arrival_scale=q.arrival_scale, gpu_prefix_cache=q.trace != "long_doc", tp=tp,
        **gpu_time(q),
        **({"router": router, "replicas": replicas} if replicas else {}),
    )  # fmt: skip
    return ScenarioConfig("plan", f"kvtier plan: {design}", q.seed, w, (Variant(design),))


def sparse_scenario(q: Question, design: str) -> ScenarioConfig:
    """``docs`` sessions of ``context_tokens`` decoding together, each step reading
    ``sparsity`` of every layer's KV from the tier of the registered sparse-decode
    ``design`` (:mod:`sim.capacity.sparse`, :mod:`sim.scenarios.sparse_decode`)."""
    tier = sparse_tier(design)
    w = SparseDecodeParams(
        model=q.model, context_tokens=q.context_tokens, batch=q.docs, sparsity=q.sparsity,
        steps=q.steps, tier=tier, **gpu_time(q),
    )  # fmt: skip
    return ScenarioConfig("plan", f"kvtier plan: {design}", q.seed, w, (Variant(design),))


def gpu_time(q: Question) -> dict[str, str]:
    """The question's GPU step time as a workload's keys."""
    return {"gpu_time": q.gpu_time, "framework": q.framework,
            "framework_version": q.framework_version}  # fmt: skip


def sparse_tier(design: str) -> str:
    """The KV tier of the registered sparse-decode ``design``; an unregistered name is a
    :class:`ConfigError` naming ``--designs`` and the registered ones."""
    if design not in SPARSE_DECODE_DESIGNS:
        known = ", ".join(SPARSE_DECODE_DESIGNS.names())
        raise ConfigError(f"--designs: sparse_decode takes {known}; got {design!r}")
    return SPARSE_DECODE_DESIGNS.create(design).tier


def metrics_of(q: Question, summary: dict[str, Any]) -> dict[str, float]:
    """The objectives of a run: serving's request percentiles, or for sparse decoding
    TPOT = one decode step (every session gets a token per step), throughput = tokens/s
    *per session* (the floor the question sets), TTFT not modelled (NaN)."""
    if q.trace != "sparse_decode":
        return {k: float(summary[k]) for k in OBJECTIVES}
    return {"ttft_p99_s": float("nan"), "tpot_p99_s": float(summary["step_ms"]) / 1e3,
            "throughput_tok_s": float(summary["tokens_per_s"]) / q.docs}  # fmt: skip


def busiest(devices: Any) -> tuple[str, float]:
    """(device, util_mean) of the busiest device or link of a run's records."""
    df = devices.to_pandas() if hasattr(devices, "to_pandas") else devices
    if not len(df):
        return "", 0.0
    row = df.sort_values(["util_mean", "device"], ascending=[False, True]).iloc[0]
    return str(row["device"]), float(row["util_mean"])


def headroom(q: Question, metrics: dict[str, float]) -> dict[str, float]:
    """``headroom_<metric>`` per SLO (see the module docstring)."""
    out = {}
    for metric, (sense, limit) in q.slos().items():
        m = metrics.get(metric, float("nan"))
        out[f"headroom_{metric}"] = limit / m - 1 if sense == "max" else m / limit - 1
    return out


def evaluate(q: Question, p: Point) -> dict[str, Any]:
    """Simulate ``p`` for ``q``: one result row (``status`` ok, or why it cannot run)."""
    from sim.runner import run

    row: dict[str, Any] = {"key": point_key(q, p), **p.flat()}
    with tempfile.TemporaryDirectory(prefix="kvtier-plan-") as tmp:
        profile = derive(q.base, p.hw, tmp)
        try:
            tp = profile.gpu.count if p.hw.gpus and not p.replicas else 1
            cfg = scenario(q, p.design, profile, tp, p.replicas, p.router or "none")
            result = run(cfg, profile, None)
        except (ConfigError, Unsupported, ValueError) as exc:
            return {**row, "status": f"cannot run: {' '.join(str(exc).split())}"}
        if not result.variants:
            return {**row, "status": f"cannot run: {'; '.join(result.skipped.values())}"}
        v = result.variants[0]
        ttft_bound = binding(of_run(v.records, profile, window=True, plan=v.plan))
        tpot_bound = binding(of_run(v.records, profile, True, v.plan, metric="tpot"))
        run_bound = binding(of_run(v.records, profile, plan=v.plan))
    metrics = metrics_of(q, v.summary)
    if q.trace != "sparse_decode" and not metrics["throughput_tok_s"] > 0:
        return {**row, "status": "cannot run: no request finished (none fits the GPU's KV)"}
    device, util = busiest(v.records.devices)
    return {
        **row, "status": "ok", **metrics, **ttft_bound.columns("bottleneck"),
        "bottleneck_busy": ttft_bound.busy, **tpot_bound.columns("bottleneck_tpot"),
        "bottleneck_tpot_busy": tpot_bound.busy, **run_bound.columns("bottleneck_run"),
        "busiest": device, "busiest_util": util,
        "hit_rate_ssd": float(v.summary.get("hit_rate_ssd", 0.0)), "sim_wall_s": result.wall_s,
        "gpu_time": str(v.records.stats.get("gpu_time", "")),
    }  # fmt: skip


def unfit(q: Question, hw: Hardware, replicas: int = 0) -> str:
    """Why ``hw``'s GPUs cannot serve ``q.model`` at all, by arithmetic (no simulation):
    more GPUs (or replicas) than the base has, a rank's weights over the engine's 0.9 of
    HBM (a replica's: all of them; with ``gpus`` 0, the base's GPUs, left to the
    simulator as before: the sparse-decode workload runs there), a TP degree the heads
    do not allow or without an NVLink ring (:func:`sim.serving.execute.tp.rank_profile`),
    TP asked of the sparse-decode workload (one GPU), or a request of the trace that no
    instance's KV cache holds (:func:`request_unfit`); "" when they can."""
    from hwprofiles import load_profile
    from sim.models import get_model
    from sim.serving.execute.tp import rank_card, rank_profile

    profile = load_profile(q.base)
    want = replicas or hw.gpus
    if want > profile.gpu.count:
        return f"{q.base} has {profile.gpu.count} GPU(s), {want} asked"
    tp = hw.gpus if hw.gpus and not replicas else 1
    if q.trace == "sparse_decode" and tp > 1:
        return "sparse_decode runs on one GPU"
    try:
        card = rank_card(get_model(q.model), tp)
        rank = rank_profile(profile, tp)
    except Unsupported as exc:
        return str(exc)
    hbm = 0.9 * profile.gpu.hbm_capacity_gib * 2**30
    if want and card.weight_bytes >= hbm:  # --gpus 0: the base's, left to the simulator
        return (
            f"weights do not fit: {card.weight_bytes / 2**30:.1f} GiB a GPU over {hbm / 2**30:.1f}"
        )
    return request_unfit(q, rank, card)


def kv_tokens(q: Question, hw: Hardware, replicas: int = 0) -> int:
    """Tokens of KV one instance (one rank of ``hw.gpus``, or one replica) of ``hw`` on
    ``q.base`` holds in its GPU cache (:func:`gpu_kv_tokens`)."""
    from hwprofiles import load_profile
    from sim.models import get_model
    from sim.serving.execute.tp import rank_card, rank_profile

    tp = hw.gpus if hw.gpus and not replicas else 1
    profile = load_profile(q.base)
    return gpu_kv_tokens(q, rank_profile(profile, tp), rank_card(get_model(q.model), tp))


def gpu_kv_tokens(q: Question, profile: HardwareProfile, card: Any) -> int:
    """Tokens of KV one instance's (one rank's) GPU cache holds: vLLM's default share of
    HBM minus the weights, in whole blocks (:func:`sim.scenarios.serving.engine_config`)."""
    from sim.serving.build import default_gpu_kv_bytes, gpu_blocks

    share = ServingParams().gpu_memory_utilization
    kv = max(default_gpu_kv_bytes(profile, card, share), 0.0)
    return gpu_blocks(kv, card, q.block_tokens) * q.block_tokens


def request_unfit(q: Question, profile: HardwareProfile, card: Any) -> str:
    """Why one instance on ``profile`` (a rank's, with the rank's ``card``) cannot hold
    the longest request of ``q``'s request trace, or "".  The engine reserves a
    request's whole context (prompt plus output) in GPU blocks and rejects one larger
    than the cache (:mod:`sim.serving.execute.engine`, ``_release``): the run would go
    on without it and its P99s would not count it, so such a point is not simulated.
    ``long_doc`` and ``sparse_decode`` are checked by :mod:`sim.limits` as they run."""
    if q.trace in ("long_doc", "sparse_decode"):
        return ""
    rid, tokens = longest_request(q)
    have = gpu_kv_tokens(q, profile, card)
    if -(-tokens // q.block_tokens) * q.block_tokens > have:
        return (
            f"request {rid} holds {tokens:,} tokens of KV (prompt + output), over the GPU KV "
            f"cache of {have:,} tokens ({card.name} on {profile.name})"
        )
    return ""


def longest_request(q: Question) -> tuple[int, int]:
    """(request_id, prompt + output tokens) of the longest request of ``q``'s request
    trace (its first ``requests``); read once per trace file version."""
    path = Path(q.trace)
    stamp = (path.stat().st_mtime_ns, path.stat().st_size) if path.is_file() else None
    return _longest(q.trace, stamp, q.requests, q.model, q.block_tokens, q.seed)


@functools.lru_cache(maxsize=16)
def _longest(trace: str, stamp: Any, requests: int, model: str, block_tokens: int,
             seed: int) -> tuple[int, int]:  # fmt: skip
    import numpy as np

    from sim.scenarios.serving import trace_tables

    w = ServingParams(model=model, trace=trace, requests=requests, block_tokens=block_tokens)
    table = trace_tables(w, seed)[0]
    if not len(table):
        raise ConfigError(f"--trace {trace}: no requests")
    tokens = table.column("input_tokens").to_numpy() + table.column("output_tokens").to_numpy()
    i = int(np.argmax(tokens))
    return int(table.column("request_id")[i].as_py()), int(tokens[i])


def with_slos(q: Question, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its headroom to each SLO and ``meets_slo``."""
    if row.get("status") != "ok":
        return {**row, "meets_slo": False}
    room = headroom(q, row)
    return {**row, **room, "meets_slo": all(v >= 0 for v in room.values())}


def replace(q: Question, **changes: Any) -> Question:
    return dataclasses.replace(q, **changes)


def save_variant(q: Question, p: Point, out_dir: str | Path) -> HardwareProfile:
    """Write ``p``'s machine as a profile YAML under ``out_dir`` (to inspect or rerun)."""
    return derive(q.base, p.hw, out_dir)

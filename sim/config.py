"""Scenario configuration: YAML -> frozen dataclasses, validated on load.

A scenario names a workload and its parameters, plus *variants*: designs to
compare, each a name and a few overridden workload parameters.  Example::

    name: default
    description: fixed sparse working set read from SSDs every decode step
    seed: 0
    workload:
      model: Llama-3.1-8B
      context_tokens: 131072
      batch: 4
      ...
    variants:
      - {name: io_uring x8}
      - {name: io_uring x1, ssds: 1}

Errors are one line naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwprofiles.loader import build_dataclass, read_yaml, resolve_yaml
from sim.registry import ROUTERS, WORKLOADS, Entry, ParamError, RegistryError, checked
from sim.scenarios.fragile import parse_fragile
from sim.scenarios.seedref import KEYS, SWEEP, parse_seed_figures
from sim.scenarios.trace_path import resolve_trace

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class ConfigError(ValueError):
    """A scenario file is malformed; the message is one line for the user."""


@dataclass(frozen=True)
class SparseDecodeParams:
    """Sparse-attention decoding with a fixed working set (see
    :mod:`sim.scenarios.sparse_decode`)."""

    model: str
    context_tokens: int = field(metadata={"positive": True})
    batch: int = field(metadata={"positive": True})
    sparsity: float = field(metadata={"positive": True})
    steps: int = field(metadata={"positive": True})
    ssds: int = 0  # SSDs used, the first N of the profile; 0 = all
    io_path: str = "io_uring"
    queue_depth: int = 0  # per-op in-flight I/Os; 0 = the device maximum
    gds: bool = False  # read into GPU memory directly (GPUDirect Storage)
    balance: str = "random"  # random: entries striped at random; even: exact split
    layers: int = 0  # 0 = the model's layer count
    tier: str = "ssd"  # where the KV lives: ssd | dram (host memory) | peer (NVLink GPU)
    # GPU step time (sim.hw.measured), as ServingParams's
    gpu_time: str = "roofline"
    framework: str = "vllm"
    framework_version: str = "auto"
    kind: str = "sparse_decode"

    def __post_init__(self) -> None:
        _check_decode(self)
        _check_gpu_time(self)
        if self.tier not in ("ssd", "dram", "peer"):
            raise ParamError("tier", f"must be 'ssd', 'dram' or 'peer', got {self.tier!r}")
        if self.balance not in ("random", "even"):
            raise ParamError("balance", f"must be 'random' or 'even', got {self.balance!r}")
        _non_negative(self, "ssds", "queue_depth", "layers")
        _int32(self, "queue_depth")


@dataclass(frozen=True)
class SwarmParams:
    """Sparse-attention decoding through a KV design on an access trace (see
    :mod:`sim.scenarios.swarm`): Swarm, its ablations and its baselines."""

    kind: str = "swarm"
    model: str = "Qwen3-32B"
    context_tokens: int = field(default=32768, metadata={"positive": True})
    batch: int = field(default=4, metadata={"positive": True})
    sparsity: float = field(default=0.1, metadata={"positive": True})
    steps: int = field(default=16, metadata={"positive": True})  # decode steps simulated
    profile_steps: int = field(default=256, metadata={"positive": True})  # offline profiling
    layers_modeled: int = field(default=1, metadata={"positive": True})  # distinct layer traces
    layers: int = 0  # model layers simulated (cycling the modeled ones); 0 = the model's
    trace: str = "default"  # access-trace generator preset (traces.generator.PRESETS)
    # "own": the design is profiled on this sequence's own first profile_steps queries;
    # a preset or capture: on another sequence's (seed 000 §5.1 profiles "on a
    # task-agnostic dataset"): a preset's independently drawn sequence, a capture of
    # another text at the same (layer, KV head)
    profile_trace: str = "own"
    local_window: int = 256  # Swarm §5.2: "a local window (e.g., 256 tokens)"
    sink_tokens: int = 4
    dram_cache: float = 0.05  # DRAM for cached clusters/blocks, as a fraction of the prefix
    # > 0: host DRAM per lane for index *plus* cache, as a fraction of the prefix's KV
    # bytes: every design's cache gets what its own index leaves (Layout.cache_entries);
    # 0: a cache of dram_cache with the index on top (each design's index differs)
    dram_budget: float = 0.0
    design: str = "swarm"  # a registered KV design (sim.registry.KV_DESIGNS)
    design_params: dict = field(default_factory=dict)
    ssds: int = 0  # SSDs used, the first N of the profile; 0 = all
    io_path: str = "io_uring"
    queue_depth: int = 0  # per-op in-flight I/Os; 0 = the device maximum
    # the design's selection budget / the oracle's (1.0: equal budgets; see Layout.step_budget)
    budget_scale: float = 1.0
    # target mean recall in (0, 1]: also run each variant at the smallest budget_scale
    # reaching it (sim.scenarios.matched); 0 = no matched-recall run
    match_recall: float = 0.0
    match_step: float = 0.05  # resolution of that search: scales are multiples of it
    # GPU step time (sim.hw.measured), as ServingParams's
    gpu_time: str = "roofline"
    framework: str = "vllm"
    framework_version: str = "auto"
    # host threads of a CPU-scoring design's selection; 0 = one per sequence, at most
    # the cores (an assumption with its range: sim.scenarios.host_threads)
    select_threads: int = 0
    # a CPU selection's DRAM bytes per thread per second, GB/s; 0 = the profile's
    # cpu.core_mem_gbps (an assumption with its range: sim.scenarios.host_threads)
    select_gbps_per_thread: float = 0.0

    def __post_init__(self) -> None:
        _check_gpu_time(self)
        if not 0 <= self.dram_cache < 1:
            raise ParamError("dram_cache", f"must be in [0, 1), got {self.dram_cache}")
        if not 0 <= self.dram_budget < 1:
            raise ParamError("dram_budget", f"must be in [0, 1), got {self.dram_budget}")
        if self.dram_budget > 0 and self.dram_cache > 0:
            raise ParamError(
                "dram_cache", "must be 0 with dram_budget (the budget holds index and cache)"
            )
        for name in ("budget_scale", "match_step"):
            if not getattr(self, name) > 0:
                raise ParamError(name, f"must be > 0, got {getattr(self, name)}")
        if not 0 <= self.match_recall <= 1:
            raise ParamError("match_recall", f"must be in (0, 1] (0: off), got {self.match_recall}")
        _non_negative(
            self, "ssds", "queue_depth", "layers", "local_window", "sink_tokens", "select_threads"
        )
        if self.select_gbps_per_thread < 0:
            raise ParamError(
                "select_gbps_per_thread",
                f"must be >= 0 (0: the core's), got {self.select_gbps_per_thread}",
            )
        _int32(self, "queue_depth")
        _check_decode(self)
        _check_window(self)


@dataclass(frozen=True)
class ServingParams:
    """LLM serving with prefix caching over GPU, host-memory and SSD tiers (see
    :mod:`sim.serving` and :mod:`sim.scenarios.serving`): SSD-backed
    PagedAttention, Unified KV Pooling and their baselines."""

    kind: str = "serving"
    model: str = "Llama-3.1-8B"
    design: str = "gpu-only"  # a registered serving design (sim.registry.SERVING_DESIGNS)
    design_params: dict = field(default_factory=dict)
    # workload field -> list of values: every variant runs at every point of the product
    matrix: dict = field(default_factory=dict)
    trace: str = "conversation"  # conversation | long_doc | a request-table Parquet file
    requests: int = 0  # use the first N requests of the trace; 0 = all
    max_inflight: int = 0  # client: outstanding requests at most; 0 = open loop
    # the trace's arrival rate times this (every arrival time divided by it): the load
    # axis of `kvtier plan --max-load` (sim.capacity.load); long_doc's arrivals are all 0
    arrival_scale: float = field(default=1.0, metadata={"positive": True})
    # long_doc: seed 004's Long Doc QA, each document warmed up, then queried
    context_tokens: int = field(default=8192, metadata={"positive": True})
    docs: int = field(default=2, metadata={"positive": True})
    output_tokens: int = field(default=100, metadata={"positive": True})
    # conversation: multi-turn sessions re-sending their history
    sessions: int = field(default=32, metadata={"positive": True})
    turns: float = field(default=4.0, metadata={"positive": True})  # mean turns per session
    session_rate: float = field(default=1.0, metadata={"positive": True})  # sessions/s
    think_s: float = 5.0  # mean pause before a session's next turn
    prompt_tokens: int = field(default=128, metadata={"positive": True})  # median new prompt
    reply_tokens: int = field(default=128, metadata={"positive": True})  # median reply
    max_context: int = field(default=4096, metadata={"positive": True})  # history cap
    # leval_long (seed 002's L-Eval, synthesised: traces/leval.py): the share of its
    # documents that are question answering (the rest summarization), in [0, 1]
    leval_qa_share: float = 0.5
    # seed 002's NVLink copies: the share of each endpoint GPU's SMs that a GPU-to-GPU copy's
    # NCCL kernels hold while it runs, in [0, 1) (sim.serving.execute.multi.PeerHbm; 0: none,
    # as a copy-engine transfer)
    copy_sm_share: float = 0.0
    # engine
    block_tokens: int = field(default=16, metadata={"positive": True})
    max_batch: int = field(default=128, metadata={"positive": True})
    max_batched_tokens: int = 0  # per iteration (chunked prefill); 0 = whole prompts
    gpu_memory_utilization: float = 0.9  # KV = this share of HBM minus the weights
    gpu_kv_tokens: int = 0  # GPU KV cache in tokens; 0 = from gpu_memory_utilization
    gpu_prefix_cache: bool = True
    # several engines on one machine (sim.serving.execute.multi): each a mapping of name, gpu,
    # role (solo | master | worker), lend_share (a worker's KV share lent to the master),
    # stream_share (a worker's KV share holding the master's streamed blocks, Eq. 2),
    # lsc (a master with a layer stream cache) and any field above it overrides;
    # empty = one instance of the fields above
    instances: tuple[dict, ...] = ()
    # a router (sim.fleet.router: round_robin | least_queue | least_kv | prefix; or none)
    # assigns each request of the trace, on arrival, to one of `replicas` identical instances
    # of the fields above on the profile's first GPUs, or to the `instances` named in
    # `route_to` (all of them when empty); router_params: the policy's Params
    router: str = "none"
    router_params: dict = field(default_factory=dict)
    replicas: int = 0
    route_to: tuple[str, ...] = ()
    # prefill/decode disaggregation (sim.fleet.disagg): {prefill: P, decode: D}
    # instances (P on the profile's first GPUs, D on the next ones), the router over the
    # prefill ones; decode_router / decode_router_params pick the decode instance (default:
    # prefix with overlap_weight 0, Dynamo's decode stage); empty = colocated
    disaggregation: dict = field(default_factory=dict)
    # whose offload tiers a routed instance reaches (sim.fleet.scopes): instance
    # (its own, on its node's devices), node (one store per node, shared by its instances)
    # or fleet (one store over every node's devices, reached over the network) or storage
    # (the fleet store on the fleet's storage nodes' devices)
    tier_scope: str = "instance"
    preempt: bool = False  # vLLM v1: prompt blocks at admission, preempt (recompute) on shortage
    tp: int = field(
        default=1, metadata={"positive": True}
    )  # tensor parallel GPUs (sim.serving.execute.tp)
    # GPU step time (sim.hw.measured): roofline, or measured kernel tables of aiconfigurator-core
    # for `framework` at `framework_version` (auto = the version nearest the seeds')
    gpu_time: str = "roofline"
    framework: str = "vllm"
    framework_version: str = "auto"

    def __post_init__(self) -> None:
        _check_instances(self)
        _check_router(self)
        _check_gpu_time(self)
        _non_negative(self, "requests", "max_inflight", "max_batched_tokens", "gpu_kv_tokens")
        _non_negative(self, "think_s")
        if self.arrival_scale != 1.0 and self.trace == "long_doc":
            raise ParamError(
                "arrival_scale", "long_doc's requests all arrive at 0: no rate to scale"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ParamError("gpu_memory_utilization", "must be in (0, 1]")
        if not 0 <= self.leval_qa_share <= 1:
            raise ParamError("leval_qa_share", f"must be in [0, 1], got {self.leval_qa_share}")
        if not 0 <= self.copy_sm_share < 1:
            raise ParamError("copy_sm_share", f"must be in [0, 1), got {self.copy_sm_share}")
        if self.trace == "leval_long" and self.context_tokens >= self.max_context:
            raise ParamError(
                "max_context",
                f"leval_long serves requests of context_tokens..max_context tokens: "
                f"{self.max_context} is not above context_tokens {self.context_tokens}",
            )
        for name, values in self.matrix.items():
            if name == "matrix":
                raise ParamError("matrix.matrix", "a matrix cannot vary itself")
            factor_values(type(self), name, values, f"matrix.{name}")

    @property
    def routed(self) -> bool:
        """A router assigns the trace's requests to instances (``router`` is not none)."""
        return self.router != "none"


GPU_TIMES = ("roofline", "measured", "auto")  # sim.hw.measured.GpuTime.mode
FRAMEWORKS = ("vllm", "sglang", "trtllm")  # aiconfigurator-core's (sdk.common.BackendName)


def _check_gpu_time(p: Any) -> None:
    """``gpu_time`` and ``framework`` known; measured only where it times every op
    (a serving run's ``tp`` and ``instances``; the decode kinds have neither)."""
    if p.gpu_time not in GPU_TIMES:
        raise ParamError("gpu_time", f"must be one of {GPU_TIMES}, got {p.gpu_time!r}")
    if p.framework not in FRAMEWORKS:
        raise ParamError("framework", f"must be one of {FRAMEWORKS}, got {p.framework!r}")
    if p.gpu_time != "measured":  # auto keeps the roofline where the tables cannot time it
        return
    from sim.hw.measured import unmeasurable  # noqa: PLC0415 (sim.hw imports this module)

    why = unmeasurable(p)
    if why:
        raise ParamError("gpu_time", why)


INSTANCE_KEYS = (
    "name",
    "gpu",
    "role",
    "lend_share",
    "elastic",
    "cache_replies",
    "lsc",
    "stream_share",
)
CACHE_REPLIES = ("off", "gpu", "store")  # sim.serving.execute.engine.EngineConfig.cache_replies
ELASTIC_KEYS = ("layout", "window_s", "check_interval_s", "control_latency_s", "n_i")


def _check_instances(p: ServingParams) -> None:
    """Each instance a mapping with a unique name and GPU, known keys only."""
    names = {f.name for f in dataclasses.fields(p)} - {"instances", "matrix"}
    seen: dict[str, set] = {"name": set(), "gpu": set()}
    for i, inst in enumerate(p.instances):
        if not isinstance(inst, dict) or "name" not in inst or "gpu" not in inst:
            raise ParamError(f"instances[{i}]", "must be a mapping with a name and a gpu")
        for key in inst:
            if key not in names and key not in INSTANCE_KEYS:
                raise ParamError(f"instances[{i}].{key}", "unknown instance key")
        for key in ("name", "gpu"):
            if inst[key] in seen[key]:
                raise ParamError(f"instances[{i}].{key}", f"two instances with {inst[key]!r}")
            seen[key].add(inst[key])
        if inst.get("role", "solo") not in ("solo", "master", "worker"):
            raise ParamError(f"instances[{i}].role", "must be solo, master or worker")
        if not 0 <= inst.get("lend_share", 0.0) < 1:
            raise ParamError(f"instances[{i}].lend_share", "must be in [0, 1)")
        stream = inst.get("stream_share", 0.0)
        if not (
            isinstance(stream, (int, float))
            and stream >= 0
            and stream + inst.get("lend_share", 0.0) < 1
        ):
            raise ParamError(
                f"instances[{i}].stream_share", "must be >= 0 with lend_share + stream_share < 1"
            )
        if inst.get("lsc", False) not in (True, False, "shared"):
            raise ParamError(f"instances[{i}].lsc", "must be true, false or shared")
        _check_elastic(inst.get("elastic"), f"instances[{i}].elastic")
        if inst.get("cache_replies", "off") not in CACHE_REPLIES:
            raise ParamError(f"instances[{i}].cache_replies", f"must be one of {CACHE_REPLIES}")


TIER_SCOPES = ("instance", "node", "fleet", "storage")  # sim.fleet.scopes.SCOPES


def _check_router(p: ServingParams) -> None:
    """A known router with valid params over at least one instance that exists."""
    if p.tier_scope not in TIER_SCOPES:
        raise ParamError("tier_scope", f"unknown scope {p.tier_scope!r} (one of: "
                         f"{', '.join(TIER_SCOPES)})")  # fmt: skip
    if not p.routed:
        for key in ("replicas", "route_to", "router_params", "disaggregation"):
            if getattr(p, key):
                raise ParamError(key, "needs a router (round_robin, least_queue, least_kv, prefix)")
        if p.tier_scope != "instance":
            raise ParamError("tier_scope", "shares tiers among routed instances: needs a router")
        return
    ROUTERS.params(p.router, p.router_params, "router_params")  # RegistryError names the key
    if not isinstance(p.replicas, int) or isinstance(p.replicas, bool):
        raise ParamError("replicas", f"must be an integer, got {p.replicas!r}")
    if p.instances:
        if p.disaggregation:
            raise ParamError("disaggregation", "places its own instances; not with instances")
        if p.replicas:
            raise ParamError("replicas", "a router spreads over replicas or instances, not both")
        names = [inst["name"] for inst in p.instances]
        for k, name in enumerate(p.route_to):
            if name not in names:
                raise ParamError(f"route_to[{k}]", f"no instance named {name!r} (instances: "
                                 f"{', '.join(map(str, names))})")  # fmt: skip
        if len(set(p.route_to)) != len(p.route_to):
            raise ParamError("route_to", "names an instance twice")
        for i, inst in enumerate(p.instances):
            if not p.route_to or inst["name"] in p.route_to:
                extra = sorted(set(inst) - {"name", "gpu"})
                if extra:
                    why = "a routed instance is a replica: only its name and gpu are its own"
                    raise ParamError(f"instances[{i}].{extra[0]}", why)
        return
    if p.route_to:
        raise ParamError("route_to", "names instances, but the workload declares none")
    if p.disaggregation:
        _check_disagg(p)
        return
    if p.replicas < 1:
        raise ParamError("replicas", f"must be >= 1 with a router, got {p.replicas}")


DISAGG_KEYS = ("prefill", "decode", "decode_router", "decode_router_params")


def _check_disagg(p: ServingParams) -> None:
    """``disaggregation``: P >= 1 prefill and D >= 1 decode instances, a known decode
    router with valid params, no ``replicas`` beside it."""
    d = p.disaggregation
    if not isinstance(d, dict):
        raise ParamError("disaggregation", f"must be a mapping of {', '.join(DISAGG_KEYS)}")
    if p.replicas:
        raise ParamError("replicas", "disaggregation sets the instances (prefill + decode)")
    for key in d:
        if key not in DISAGG_KEYS:
            raise ParamError(
                f"disaggregation.{key}", f"unknown key (one of: {', '.join(DISAGG_KEYS)})"
            )
    for key in ("prefill", "decode"):
        n = d.get(key)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ParamError(f"disaggregation.{key}", f"must be an integer >= 1, got {n!r}")
    name, params = disagg_decode_router(p)
    if not isinstance(name, str):
        raise ParamError("disaggregation.decode_router", f"must be a router name, got {name!r}")
    if not isinstance(params, dict):
        raise ParamError("disaggregation.decode_router_params", "must be a mapping")
    ROUTERS.params(name, params, "disaggregation.decode_router_params")


def disagg_decode_router(p: ServingParams) -> tuple[str, dict]:
    """The decode stage's router and params: by default Dynamo's KV router with the
    overlap term off (Dynamo's disaggregated decode routing: ``overlap_score_weight``
    0, "decode routing should not chase prefix reuse")."""
    d = p.disaggregation
    name = d.get("decode_router", "prefix")
    default = {"overlap_weight": 0.0} if name == "prefix" else {}
    return name, d.get("decode_router_params", default)


def _check_elastic(el: Any, where: str) -> None:
    """A worker's ``elastic`` mapping (sim.serving.execute.lending.ElasticSpec)."""
    if el is None:
        return
    if not isinstance(el, dict):
        raise ParamError(where, f"must be a mapping of {', '.join(ELASTIC_KEYS)}")
    for key, v in el.items():
        if key not in ELASTIC_KEYS:
            raise ParamError(f"{where}.{key}", f"unknown key (one of {', '.join(ELASTIC_KEYS)})")
        if key == "layout" and v not in ("block-major", "layer-major"):
            raise ParamError(f"{where}.layout", "must be block-major or layer-major")
        if key == "n_i" and v not in ("own", "free", "idle"):
            raise ParamError(f"{where}.n_i", "must be own, free or idle")
        if key not in ("layout", "n_i") and not (isinstance(v, (int, float)) and v >= 0):
            raise ParamError(f"{where}.{key}", "must be a number >= 0")
    for key in ("window_s", "check_interval_s"):
        if key in el and not el[key] > 0:
            raise ParamError(f"{where}.{key}", "must be > 0")


def _check_decode(p: SparseDecodeParams | SwarmParams) -> None:
    from kvtier.contracts.plan import IO_PATHS

    if not 0 < p.sparsity <= 1:
        raise ParamError("sparsity", f"must be in (0, 1], got {p.sparsity}")
    if p.io_path not in IO_PATHS or p.io_path == "none":
        raise ParamError("io_path", f"must be one of {IO_PATHS[:-1]}, got {p.io_path!r}")


def _check_window(p: SwarmParams) -> None:
    """The sink tokens and the local window are tokens of the context, always attended
    (Swarm §5.2): together at most ``context_tokens``; the larger of the two is named."""
    if p.sink_tokens + p.local_window > p.context_tokens:
        name = "local_window" if p.local_window >= p.sink_tokens else "sink_tokens"
        raise ParamError(
            name,
            f"sink_tokens {p.sink_tokens:,} + local_window {p.local_window:,} exceed "
            f"context_tokens {p.context_tokens:,}",
        )


def _non_negative(p: Any, *names: str) -> None:
    for name in names:
        if getattr(p, name) < 0:
            raise ParamError(name, f"must be >= 0, got {getattr(p, name)}")


INT32_MAX = 2**31 - 1  # the plan's int32 columns (kvtier/contracts/plan_schema.py: queue_depth)


def _int32(p: Any, *names: str) -> None:
    for name in names:
        if getattr(p, name) > INT32_MAX:
            raise ParamError(
                name,
                f"must be at most {INT32_MAX:,} (a plan's int32 column), got {getattr(p, name)}",
            )


def factor_values(cls: type, name: str, values: Any, key: str) -> list[Any]:
    """``values`` of workload field ``name`` of ``cls``, typed from the
    dataclass (ints accepted for floats); a :class:`ParamError` naming ``key``
    for an unknown field, an empty list or a value of the wrong type."""
    hints = typing.get_type_hints(cls)
    if name not in hints or name == "kind":
        known = ", ".join(f for f in hints if f != "kind")
        raise ParamError(key, f"unknown workload key (one of: {known})")
    if not isinstance(values, list | tuple) or not values:
        raise ParamError(key, "must be a non-empty list of values")
    try:
        typed = [checked(hints[name], v, key) for v in values]
    except RegistryError as exc:
        raise ParamError(key, exc.message) from None
    positive = {f.name for f in dataclasses.fields(cls) if f.metadata.get("positive")}
    for v in typed:  # the checks build_dataclass makes on a YAML value
        if isinstance(v, float) and not math.isfinite(v):
            raise ParamError(key, f"must be a finite number, got {v}")
        if name in positive and not v > 0:
            raise ParamError(key, f"must be > 0, got {v!r}")
    return typed


Workload = SparseDecodeParams | SwarmParams | ServingParams


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ScenarioConfig:
    name: str
    description: str
    seed: int
    workload: Workload
    variants: tuple[Variant, ...]
    source_file: str = ""
    # the summary column its comparison turns on, where not its kind's (sim.registry.Kind)
    headline: str = ""

    def variant_params(self, variant: Variant) -> Workload:
        return dataclasses.replace(self.workload, **dict(variant.overrides))

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration, as written beside the results."""
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "workload": dataclasses.asdict(self.workload),
            "variants": [{"name": v.name, **dict(v.overrides)} for v in self.variants],
        }


def sweep_keys(params: type) -> tuple[str, ...]:
    """What a ``sweep_figures`` figure may select on: the summary's keys and every
    field of the workload dataclass ``params`` (a sweep's factor columns)."""
    fields = [f.name for f in dataclasses.fields(params) if f.name != "kind"]
    return (*KEYS, *(f for f in fields if f not in KEYS))


def load_scenario(source: str | Path) -> ScenarioConfig:
    """Load a scenario by name (``default``) or path to a YAML file.

    The workload kind, every variant's design and its ``design_params`` are
    looked up in the registries (:mod:`sim.registry`) and checked here, so a
    typo is one line naming the file, the line and the key.
    """
    path = resolve_yaml(source, SCENARIO_DIR, "scenario", ConfigError)
    data, where = read_yaml(path, error=ConfigError)
    if not isinstance(data, dict):
        raise where.error("", "a scenario must be a mapping")
    raw_variants = data.pop("variants", None) or [{"name": "default"}]
    if data.get("seed_figures") is not None:  # a seed's own figures: checked, kept in the file
        parse_seed_figures(data.pop("seed_figures"), where)
    if data.get("fragile") is not None:  # what recorded sensitivity passes found: checked
        parse_fragile(data.pop("fragile"), where)
    raw_sweep = data.pop(SWEEP, None)  # the seed's figures over factors: checked below
    raw_workload = data.get("workload")
    kind = raw_workload.get("kind", "sparse_decode") if isinstance(raw_workload, dict) else ""
    entry = _registered(lambda: WORKLOADS.entry(kind), where, "workload")
    if raw_sweep is not None:
        parse_seed_figures(raw_sweep, where, SWEEP, sweep_keys(entry.params))
    head = build_dataclass(_Head, {k: v for k, v in data.items() if k != "workload"}, where)
    if raw_workload is None:
        raise where.error("", "missing required key 'workload'")
    workload = _workload(entry, raw_workload, where, "workload")
    if not isinstance(raw_variants, list):
        raise where.error("variants", "must be a list")
    if not all(isinstance(v, dict) and "trace" in v for v in raw_variants):
        workload = resolve_trace(workload, path, where, "workload")
    variants = []
    names: set[str] = set()
    fields = {f.name for f in dataclasses.fields(entry.params)} - {"kind"}
    for i, raw in enumerate(raw_variants):
        key = f"variants[{i}]"
        if not isinstance(raw, dict) or "name" not in raw:
            raise where.error(key, "each variant must be a mapping with a 'name'")
        overrides = {k: v for k, v in raw.items() if k != "name"}
        for k in overrides:
            if k not in fields:
                raise where.error(
                    f"{key}.{k}", f"unknown workload key (one of: {', '.join(sorted(fields))})"
                )
        params = _workload(entry, {**dataclasses.asdict(workload), **overrides}, where, key)
        if "trace" in overrides:
            params = resolve_trace(params, path, where, key)
            overrides["trace"] = params.trace
        name = str(raw["name"])
        if name in names:
            raise where.error(f"{key}.name", f"duplicate variant name '{name}'")
        names.add(name)
        variants.append(Variant(name, tuple((k, getattr(params, k)) for k in overrides)))
    return ScenarioConfig(
        head.name, head.description, head.seed, workload, tuple(variants), str(path), head.headline
    )


def _workload(entry: Entry, raw: Any, where: Any, key: str) -> Workload:
    """The kind's Params from ``raw`` at ``key``; its design and design_params checked."""
    params = _registered(lambda: build_dataclass(entry.params, raw, where, key), where, key)
    if entry.designs is not None:
        design = params.design
        _registered(lambda: entry.designs.params(design, params.design_params), where, key)
    return params


def _registered(build: Callable[[], Any], where: Any, key: str) -> Any:
    """``build()``, with registry and Params errors as one line at ``key``."""
    try:
        return build()
    except RegistryError as exc:
        raise where.error(f"{key}.{exc.key}", exc.message) from None
    except ParamError as exc:
        raise where.error(f"{key}.{exc.field}", exc.message) from None


@dataclass(frozen=True)
class _Head:
    name: str
    description: str
    seed: int
    headline: str = ""


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))

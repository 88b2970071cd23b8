"""What a scenario asks of a machine, checked before anything is simulated.

A scenario can be well-formed and still impossible on a profile: a prefix
whose KV does not fit on the devices that are to hold it (``context_tokens:
1.0e12``, which would otherwise build plans of astronomical size or run
forever), a request longer than the GPU's whole KV cache (it could never be
scheduled), or a serving design given more SSD or host memory (``ssd_gib``,
``cpu_gib``) than the profile's devices have.  :func:`check_scenario` refuses
each with one line naming the file, the variant, the key and both numbers.

Every bound is a capacity of the profile or the model, never a constant:

* sparse decoding (``sparse_decode``, ``swarm``, ``kvdrive``): for ``kvdrive``,
  the prefix plus every decode step within the model's context (as for serving,
  below); for all, the batch's KV,
  ``batch x tokens x kv_bytes_per_token`` (tokens = the prefix plus every
  decode and profiling step; one copy, so a lower bound for designs that
  replicate), must fit on the tier that holds it: the SSDs used
  (``ssds``, 0 = all), the host DRAM, or the peer GPUs' HBM;
* serving: one request's KV (``long_doc``: ``context_tokens +
  output_tokens``; ``conversation``: ``max_context``) must fit in the GPU KV
  cache, and ``ssd_gib`` / ``cpu_gib`` within the design's SSDs / DRAM modules;
  its prompt (``context_tokens``; ``max_context``) within the model's context
  (the card's ``max_context``, or ``yarn_context`` where the vendor documents
  YaRN): vLLM refuses a prompt longer than ``max_model_len`` (v1
  ``Processor._validate_model_input``: "The decoder prompt ... is longer than
  the maximum model length").

:func:`overload_warnings` does not refuse: it says when an open-loop trace
offers more work than the machine can serve (see there).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hwprofiles import HardwareProfile
from kvtier.contracts.arrays import to_numpy
from sim.config import ConfigError, ScenarioConfig
from sim.registry import Unsupported

GIB = 2**30
# Bytes of a decode plan's Arrow table per op, measured (2026-12-02, commit 3b4f69f):
# tiers' variants at 2 and 4 steps hold 152 B (1 SSD) to 208 B (8 SSDs) an op; the
# bound takes the lower, so it refuses only plans that cannot fit.
PLAN_OP_BYTES = 152
# Ops a decode plan has per (step, layer) beyond one read per SSD, measured on the
# same plans: 2 for sparse_decode (DRAM->GPU copy, compute), 3 for swarm (default:
# 5,632 ops for 8 steps x 64 layers x 8 SSDs); the bound takes the lower
PLAN_OPS_BEYOND_READS = 2


Count = tuple[str, int, int, str]  # (key, wanted, available on the profile, what)


@dataclass(frozen=True)
class Limits:
    """What a workload kind's variants need of a profile; each kind's registry entry
    names one (:class:`sim.registry.Kind`).  ``check(params, card, profile, where)``
    raises :class:`ConfigError` for what cannot run; ``counts(params, profile)``
    lists the devices a variant uses against the profile's, for a sweep's point;
    ``warnings(cfg, profile)`` says what can run but not keep up (or None)."""

    check: Callable[[Any, Any, HardwareProfile, str], None]
    counts: Callable[[Any, HardwareProfile], list[Count]]
    warnings: Callable[[ScenarioConfig, HardwareProfile], list[str]] | None = None


def _limits(kind: str) -> Limits:
    from sim.registry import WORKLOADS

    return WORKLOADS.entry(kind).kind.limits


def check_scenario(cfg: ScenarioConfig, profile: HardwareProfile) -> None:
    """Raise :class:`ConfigError` for the first variant the profile cannot hold."""
    from sim.models import get_model

    for name, params in _variants(cfg):
        where = f"{cfg.source_file or cfg.name}: variant '{name}'"
        _limits(params.kind).check(params, get_model(params.model), profile, where)


def check_sweep_point(cfg: ScenarioConfig, profile: HardwareProfile, point: dict[str, Any]) -> None:
    """A sweep's point (``cfg`` there, on ``profile``): every variant must be able to
    run.  ``kvtier sim`` skips a variant its profile lacks the devices for and says
    so; a sweep would only lack its rows, so a count beyond the profile's (SSDs,
    tensor-parallel GPUs, a serving design's SSDs or DRAM modules) is refused,
    naming the factor when the point set it."""
    for name, p in _variants(cfg):
        for key, want, have, what in _limits(p.kind).counts(p, profile):
            if want > have:
                at = f"factor {key}" if key in point else f"{cfg.source_file}: {key}"
                hw = f" (at hw={point['hw']})" if "hw" in point else ""
                raise ConfigError(
                    f"{at}: variant '{name}' needs {want} {what}, profile {profile.name} has "
                    f"{have}{hw}: a sweep runs every variant at every point"
                )


def _variants(cfg: ScenarioConfig) -> list[tuple[str, Any]]:
    """Every variant as it runs: at each point of its matrix or points."""
    from sim.factors import expand_matrix

    return [(v.name, cfg.variant_params(v)) for v in expand_matrix(cfg)]


def _serving_counts(p: Any, profile: HardwareProfile) -> list[Count]:
    from sim.registry import WORKLOADS

    d = WORKLOADS.entry(p.kind).designs.params(p.design, p.design_params)
    counts = [("tp", p.tp, profile.gpu.count, "GPUs")]
    if d.ssd_gib > 0:
        counts.append(("design_params.ssds", d.ssds, len(profile.ssd_names), "SSDs"))
    if d.cpu_gib > 0:
        n = len(profile.dram_names)
        counts.append(("design_params.dram_modules", d.dram_modules, n, "DRAM modules"))
    return counts


def _decode_counts(p: Any, profile: HardwareProfile) -> list[Count]:
    if getattr(p, "tier", "ssd") == "ssd":
        return [("ssds", p.ssds, len(profile.ssd_names), "SSDs")]
    return []


def _check_kvdrive(p: Any, card: Any, profile: HardwareProfile, where: str) -> None:
    _check_decode_context(p, card, where)  # seed 003 runs every model within its context window
    _check_decode(p, card, profile, where)


def _check_decode(p: Any, card: Any, profile: HardwareProfile, where: str) -> None:
    _check_layers(p, card, where)
    tokens = p.context_tokens + p.steps + getattr(p, "profile_steps", 0)
    layers = p.layers or card.layers
    need = p.batch * tokens * card.kv_bytes_per_token_layer * layers
    tier = getattr(p, "tier", "ssd")
    if tier == "ssd":
        n = p.ssds or len(profile.ssd_names)
        have = sum(profile.ssd(s).capacity_gib for s in profile.ssd_names[:n]) * GIB
        holder = f"{n} SSD(s)"
    elif tier == "dram":
        have = sum(m.capacity_gib for m in profile.dram) * GIB
        holder = "host DRAM"
    else:
        have = (profile.gpu.count - 1) * profile.gpu.hbm_capacity_gib * GIB
        holder = "the peer GPUs' HBM"
    if 0 < have < need:  # no device at all: the runner skips the variant, saying why
        raise ConfigError(
            f"{where}: context_tokens: the batch's KV ({p.batch} x {tokens:,} tokens x "
            f"{card.kv_bytes_per_token_layer * layers:,} B = {need / GIB:,.1f} GiB) exceeds "
            f"{holder} of {profile.name} ({have / GIB:,.3g} GiB)"
        )
    n = min(p.ssds or len(profile.ssd_names), len(profile.ssd_names)) if tier == "ssd" else 1
    what = f"{where}: steps: {p.steps:,} steps x {layers} layers x ({n} reads + 2) ops"
    check_plan_ops(p.steps * layers * (n + PLAN_OPS_BEYOND_READS), what)


def memory_bytes() -> int:
    """The memory this process can have: the machine's, or its address-space limit."""
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return have if soft == resource.RLIM_INFINITY else min(have, soft)


def check_plan_ops(ops: int, what: str) -> None:
    """A plan of ``ops`` ops must fit in memory (:data:`PLAN_OP_BYTES` each): ``what``
    names the sizes that make it (the keys or flags)."""
    check_memory(ops * PLAN_OP_BYTES, f"{what}: a plan of {ops:,} ops ({PLAN_OP_BYTES} B each)")


def check_long_doc(docs: int, context_tokens: int, block_tokens: int, what: str) -> None:
    """Long Doc QA's trace (each document warmed up, then queried: ``2 x docs``
    requests, each with a hash per KV block of its prompt) must fit in memory: 8 B an
    int64 hash, a lower bound.  ``what`` names the keys or flags that size it."""
    hashes = 2 * docs * -(-context_tokens // block_tokens)
    check_memory(hashes * 8, f"{what}: a trace of {hashes:,} block hashes")


def check_memory(need: int, what: str) -> None:
    """``need`` bytes must fit in :func:`memory_bytes`; ``what`` says what needs them."""
    if need > memory_bytes():
        raise ConfigError(
            f"{what} needs at least {need / GIB:,.1f} GiB, more than the "
            f"{memory_bytes() / GIB:,.1f} GiB of memory here"
        )


def _check_layers(p: Any, card: Any, where: str) -> None:
    """The layers simulated (``layers``, 0 = the model's) within the model's, and the
    distinct layer traces (``layers_modeled``, where the kind has them) within those."""
    if p.layers > card.layers:
        raise ConfigError(
            f"{where}: layers: {p.layers} layers simulated, but {card.name} has {card.layers}"
        )
    modeled = getattr(p, "layers_modeled", 1)
    if modeled > (p.layers or card.layers):
        raise ConfigError(
            f"{where}: layers_modeled: {modeled} distinct layers modelled, but "
            f"{p.layers or card.layers} are simulated ({card.name} has {card.layers})"
        )


def _check_decode_context(p: Any, card: Any, where: str) -> None:
    """A decode run's last position (the prefix plus every decode step) within the
    model's context: its card's ``max_context``, or ``yarn_context`` where the vendor
    documents YaRN (Qwen3 at 120K in seed 003 §9.1)."""
    last = p.context_tokens + p.steps
    limit = max(card.max_context, card.yarn_context)
    if last > limit:
        how = "with YaRN" if card.yarn_context else "its config's max_context"
        raise ConfigError(
            f"{where}: context_tokens: {p.context_tokens:,} tokens + {p.steps} decode steps "
            f"exceed {card.name}'s context of {limit:,} tokens ({how})"
        )


def _check_serving_variant(p: Any, card: Any, profile: HardwareProfile, where: str) -> None:
    """A serving variant, checked on one rank of its tensor-parallel degree ``tp``."""
    from sim.serving.execute.tp import rank_card, rank_params, rank_profile

    try:
        card, rank = rank_card(card, p.tp), rank_profile(profile, p.tp)
    except Unsupported as exc:
        raise ConfigError(f"{where}: tp: {exc}") from None
    _check_serving(rank_params(p), card, rank, where)


def _check_serving(p: Any, card: Any, profile: HardwareProfile, where: str) -> None:
    from sim.registry import WORKLOADS
    from sim.serving.build import default_gpu_kv_bytes

    per_token = card.kv_bytes_per_token
    gpu_tokens = p.gpu_kv_tokens or int(
        default_gpu_kv_bytes(profile, card, p.gpu_memory_utilization) // per_token
    )
    key, tokens = {
        "long_doc": ("context_tokens", p.context_tokens + p.output_tokens),
        "conversation": ("max_context", p.max_context),
    }.get(p.trace, ("", 0))
    prompt = {"long_doc": p.context_tokens, "conversation": p.max_context}.get(p.trace, 0)
    limit = max(card.max_context, card.yarn_context)
    if key and prompt > limit:
        how = "with YaRN" if card.yarn_context else "its config's max_context"
        raise ConfigError(
            f"{where}: {key}: a prompt of {prompt:,} tokens exceeds {card.name}'s context "
            f"of {limit:,} tokens ({how}): vLLM refuses it"
        )
    if key and tokens > gpu_tokens:
        raise ConfigError(
            f"{where}: {key}: a request of {tokens:,} tokens exceeds the GPU KV cache of "
            f"{max(gpu_tokens, 0):,} tokens ({card.name} on {profile.name}): it could never run"
        )
    if p.trace == "long_doc":
        what = f"{where}: docs: {p.docs:,} documents x {p.context_tokens:,} tokens"
        check_long_doc(p.docs, p.context_tokens, p.block_tokens, what)
    d = WORKLOADS.entry(p.kind).designs.params(p.design, p.design_params)
    for gib_key, count_key, names, cap in (
        ("ssd_gib", "ssds", profile.ssd_names, lambda n: profile.ssd(n).capacity_gib),
        ("cpu_gib", "dram_modules", profile.dram_names, _dram_gib(profile)),
    ):
        want = getattr(d, gib_key)
        used = names[: getattr(d, count_key) or None]
        have = sum(cap(n) for n in used)
        if 0 < have < want:
            raise ConfigError(
                f"{where}: design_params.{gib_key}: {want:g} GiB exceeds the "
                f"{len(used)} device(s) it uses on {profile.name} ({have:,.4g} GiB)"
            )


def _dram_gib(profile: HardwareProfile) -> Any:
    sizes = {m.name: m.capacity_gib for m in profile.dram}
    return lambda name: sizes[name]


def overload_warnings(cfg: ScenarioConfig, profile: HardwareProfile) -> list[str]:
    """What ``cfg``'s kind can run on ``profile`` but not keep up with, one line each
    (its :attr:`Limits.warnings`; none for a kind without)."""
    warnings = _limits(cfg.workload.kind).warnings
    return warnings(cfg, profile) if warnings is not None else []


CHOICES = ("design", "router")  # fields that do not change what a trace offers


def _serving_overload(cfg: ScenarioConfig, profile: HardwareProfile) -> list[str]:
    """One line per serving variant whose open-loop trace offers more work than
    the GPU can do: offered load = arrival rate x the mean request's service
    time > 1.  Closed-loop workloads (``max_inflight``, ``long_doc``) cannot
    overload; no constant enters (see :func:`offered_load`).  Several instances
    (``instances``: each its own trace and GPU) are not checked here; a routed
    trace is checked against its instances together (its load over their number)."""
    from sim.models import get_model
    from sim.scenarios.serving import trace_tables

    out, seen = [], set()
    for name, p in _variants(cfg):
        key = repr(sorted((k, v) for k, v in vars(p).items() if not k.startswith(CHOICES)))
        if p.max_inflight or p.trace == "long_doc" or (p.instances and not p.routed) or key in seen:
            continue
        seen.add(key)
        table, _ = trace_tables(p, cfg.seed)
        from sim.serving.execute.tp import rank_profile

        card = get_model(p.model)
        from sim.hw.measured import GpuTime, MeasuredError

        gpu_time = GpuTime.of(p)
        try:
            rank = rank_profile(profile, p.tp)
            rho = offered_load(table, card, rank, p.max_batch, gpu_time, p.tp)
            d = p.disaggregation
            n = (p.replicas or len(p.route_to or p.instances) or d["prefill"] + d["decode"]
                 ) if p.routed else 1  # fmt: skip
            rho /= n
        except MeasuredError as exc:  # a framework version the tables lack
            raise ConfigError(f"{cfg.source_file or cfg.name}: variant '{name}': {exc}") from None
        if rho > 1:
            out.append(
                f"{cfg.source_file or cfg.name}: variant '{name}': the trace offers "
                f"{rho:.2f}x what {f'{n} instances on ' if n > 1 else ''}{profile.name} "
                f"can serve with {p.model} (arrival rate x "
                f"mean prefill + decode time): queues grow for the whole run"
            )
    return out


def offered_load(
    table: Any,
    card: Any,
    profile: HardwareProfile,
    max_batch: int,
    gpu_time: Any = None,
    tp: int = 1,
) -> float:
    """Arrival rate x the mean request's service time on one GPU (a lower bound);
    with ``tp`` > 1 on rank 0 (``card`` the whole model, ``profile`` the rank's).

    Rate: requests over the span of their arrivals.  Service: the GPU time
    (the roofline, or what ``gpu_time`` measures: :mod:`sim.hw.measured`, as
    the engine times its iterations), with ``tp`` > 1 plus the iteration's
    all-reduces alone on the rank's NVLink route
    (:meth:`sim.serving.execute.tp.TensorParallel.alone_s`, the engine's
    definition), of the mean request's prefill alone
    (``sim.serving.policy.costs``, its whole prompt, no cache hits) plus its
    decodes, each a share ``1 / max_batch`` of an iteration of ``max_batch``
    equal decodes at the mean context (the best batching the engine allows).  Cache hits and
    batching of prefills can only lower the work further, so a value above 1
    means the queue cannot drain.  An offline batch (every request arrives
    within one request's service time, e.g. ``paged-ssd``'s 4,096 prompts in
    4 ms) offers no rate: 0.
    """
    from sim.hw.machine import Machine
    from sim.hw.measured import GpuTime, resolve
    from sim.serving.execute.tp import TensorParallel, rank_card
    from sim.serving.policy.costs import iteration_cost

    arrivals = to_numpy(table.column("arrival_s"))
    n = len(arrivals)
    span = float(arrivals.max() - arrivals.min()) if n else 0.0
    if n < 2 or span <= 0:
        return 0.0
    inp = float(to_numpy(table.column("input_tokens")).mean())
    outp = float(to_numpy(table.column("output_tokens")).mean())
    m, gpu = Machine(profile), profile.gpu_names[0]
    step, _ = resolve(profile, card, gpu_time or GpuTime(), tp)
    # the rank's all-reduces after each iteration's compute, as the engine prices them
    ranks = TensorParallel(tp, card).timed_by(step) if tp > 1 else None
    card = rank_card(card, tp)

    def seconds(prefills: list, decodes: list, outputs: int) -> float:
        layer, head = iteration_cost(card, prefills, decodes, outputs)
        flops = layer.flops * card.layers + head.flops
        hbm = layer.hbm_bytes * card.layers + head.hbm_bytes
        if step is not None:
            compute = step.seconds(prefills, decodes, flops, hbm)
        else:
            compute = m.gpu_seconds(gpu, flops, hbm)
        if ranks is None:
            return compute
        tokens = sum(n for n, _ in prefills) + len(decodes)  # the iteration's, as the engine's
        return compute + ranks.alone_s(m, tokens, card.layers)

    prefill = seconds([(max(1, round(inp)), 0)], [], 1)
    ctx = round(inp + outp / 2)
    decode = seconds([], [ctx] * max_batch, max_batch) / max_batch * max(outp - 1, 0)
    if span < prefill + decode:  # all queued before one could be served: a batch, no rate
        return 0.0
    return (n - 1) / span * (prefill + decode)


DECODE = Limits(_check_decode, _decode_counts)  # sparse_decode, swarm
KVDRIVE = Limits(_check_kvdrive, _decode_counts)  # seed 003: also within the model's context
SERVING = Limits(_check_serving_variant, _serving_counts, _serving_overload)

__all__ = [
    "DECODE",
    "KVDRIVE",
    "SERVING",
    "Limits",
    "check_scenario",
    "offered_load",
    "overload_warnings",
]

"""Workload kinds: each a name, its Params dataclass and a factory.

A factory turns one variant's params into a :class:`Planned`: either a
transfer plan the executor times (open-loop kinds: ``sparse_decode``,
``swarm``) or a ``drive`` callable that simulates while it issues ops and
returns the records with the plan it issued (closed loop: ``serving``).
``summarize`` turns the records into the variant's summary row.

Factory signature: ``factory(params, profile, seed, name, progress)`` with
``progress(done, total)`` or None; it raises
:class:`~sim.registry.Unsupported` when the profile cannot
run the variant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim import limits
from sim.config import ServingParams, SparseDecodeParams, SwarmParams
from sim.registry import KV_DESIGNS, SERVING_DESIGNS, WORKLOADS, Kind
from sim.scenarios import host_threads, scenario_assumptions, swarm_budget
from sim.scenarios.sparse_decode import plan_for

if TYPE_CHECKING:  # the heavy modules load when a variant is planned, not on `import sim`
    import pyarrow as pa

    from hwprofiles import HardwareProfile
    from kvtier.contracts.records import Records

Progress = Callable[[int, int], None]


@dataclass
class Planned:
    """One variant ready to run: a plan (or a driver) and its summary."""

    plan: pa.Table | None  # None for closed-loop kinds: the plan is what ``drive`` issued
    summarize: Callable[[Any], dict]
    drive: Callable[..., Records] | None = None  # drive(watch=None): watch(now, done, total)
    # companion runs of the same variant, by column prefix: each is simulated too and
    # its summary joins the variant's row with the prefix (``matched_tokens_per_s``)
    also: dict[str, Planned] = field(default_factory=dict)
    # what times the plan's GPU compute (sim.hw.measured.resolve's source; run.json's
    # gpu_time); "" for a closed-loop kind, whose engine records its own
    gpu_time: str = ""


def gpu_source(params: Any, profile: HardwareProfile) -> str:
    """What times a decode workload's GPU compute (:func:`sim.hw.measured.resolve`)."""
    from sim.hw.measured import GpuTime, resolve
    from sim.models import get_model

    return resolve(profile, get_model(params.model), GpuTime.of(params))[1]


def plan_sparse_decode(
    params: SparseDecodeParams,
    profile: HardwareProfile,
    seed: int,
    name: str,
    progress: Progress | None,
) -> Planned:
    """A fixed sparse working set read every decode step (:mod:`sim.scenarios.sparse_decode`)."""
    from sim.metrics import decode_summary

    plan, shape = plan_for(params, profile, seed)
    ssd_path = params.tier == "ssd"

    def summarize(records: Records) -> dict:
        qd = params.queue_depth or profile.ssd(shape.ssds[0]).max_queue_depth if ssd_path else 0
        return {
            "tier": params.tier,
            "ssds": len(shape.ssds),
            "io_path": ("gds" if params.gds else params.io_path) if ssd_path else "none",
            "queue_depth": qd,
            **decode_summary(
                records.ops,
                records.devices,
                profile,
                params.batch,
                list(shape.ssds),
                params.queue_depth,
            ),
        }

    return Planned(plan, summarize, gpu_time=shape.gpu_source)


def plan_swarm(
    params: SwarmParams,
    profile: HardwareProfile,
    seed: int,
    name: str,
    progress: Progress | None,
) -> Planned:
    """Decoding through a registered KV design on an access trace (:mod:`sim.scenarios.swarm`);
    with ``match_recall`` also at matched recall (:mod:`sim.scenarios.matched`)."""
    from sim.scenarios.swarm import plan_swarm as plan

    total = params.batch * params.layers_modeled * params.steps  # one tick per lane and step
    done = [0]

    def tick() -> None:
        done[0] += 1
        progress(done[0], total)  # type: ignore[misc]

    source = gpu_source(params, profile)
    if not params.match_recall:
        splan = plan(params, profile, seed, tick if progress else None)
        return Planned(splan.plan, _design_summary(params, profile, splan), gpu_time=source)
    from sim.scenarios.matched import match_columns, plan_matched

    splan, mplan, match = plan_matched(params, profile, seed, tick if progress else None)
    summarize = _design_summary(params, profile, splan)
    msummarize = _design_summary(params, profile, mplan)
    return Planned(
        splan.plan,
        lambda records: {**summarize(records), **match_columns(match)},
        also={"matched_": Planned(mplan.plan, msummarize)},
        gpu_time=source,
    )


def _design_summary(params: SwarmParams, profile: HardwareProfile, splan) -> Callable:
    """The summary of one swarm plan's records (:func:`sim.metrics.design_summary`)."""
    from sim.hw.figures import path_figures
    from sim.metrics import design_summary
    from sim.scenarios.swarm_report import mean_report

    figures = path_figures(profile)
    bottleneck = next((f.total_gbps for f in figures if f.label.startswith("all SSDs -> dram")), 0)

    def summarize(records: Records) -> dict:
        return {
            "design": params.design,
            "ssds": len(splan.ssds),
            "budget_scale": splan.layout.budget_scale,
            **design_summary(
                records.ops,
                profile,
                splan.lanes,
                list(splan.ssds),
                params.batch,
                params.steps,
                splan.layout.entry_bytes,
                bottleneck,
            ),
            **mean_report([lane.clustering for lane in splan.lanes.values() if lane.clustering]),
        }

    return summarize


def drive_serving(
    params: ServingParams,
    profile: HardwareProfile,
    seed: int,
    name: str,
    progress: Progress | None,
) -> Planned:
    """LLM serving over tiers, closed loop (:mod:`sim.scenarios.serving`)."""
    from sim.scenarios.serving import prepare

    drive, summarize = prepare(params, profile, seed, name)
    return Planned(None, summarize, drive)


# The sizes the sim-vs-real replay of a swarm scenario's designs caps its workload
# at (``kvtier real validate --designs``, :func:`kvtier.compare.designs.scaled_designs`).
# Why these: the default scenario (8K prefix, batch 4, all 64 layers of Qwen3-32B,
# 16 steps) reads ~14 GB per design -- minutes on emulated SSDs throttled to a few
# hundred MB/s -- and its offline clustering alone takes tens of seconds per lane.
# A 4K prefix keeps each design's I/O mix (Swarm's cluster reads of single 4 KiB
# entries, No Cluster's key prefetch plus entries, InfLLM's 128-entry blocks,
# PQCache's scattered entries) at 10% sparsity; 2 sequences keep the batch's
# cross-sequence merging; 4 layers and 6 steps give 5 measured decode steps of 4
# pipelined layers each.  Every design then moves 5-600 MB in about a second.  A
# scenario already smaller keeps its own values (these are caps).
REPLAY_CAPS = {"context_tokens": 4096, "batch": 2, "layers": 4, "steps": 6, "profile_steps": 256}

# the workload fields of each kind that are a design's choices (Kind.design_keys): where
# the KV lives and how it moves, not what is asked
DECODE_DESIGN_KEYS = ("design", "design_params", "ssds", "queue_depth", "io_path", "gds", "tier")
SWARM_DESIGN_KEYS = (
    "design", "design_params", "ssds", "io_path", "queue_depth", "dram_cache",
    "budget_scale", "match_recall", "match_step", "local_window", "sink_tokens",
)  # fmt: skip
SERVING_DESIGN_KEYS = ("design", "design_params", "instances", "router", "router_params")

WORKLOADS.register(
    "sparse_decode",
    SparseDecodeParams,
    plan_sparse_decode,
    kind=Kind("decode", limits.DECODE, design_keys=DECODE_DESIGN_KEYS),
)
WORKLOADS.register(
    "swarm",
    SwarmParams,
    plan_swarm,
    designs=KV_DESIGNS,
    kind=Kind(
        "swarm",
        limits.DECODE,
        caps=REPLAY_CAPS,
        assumptions=(*host_threads.SWARM, swarm_budget.DRAM_BUDGET_ASSUMPTION),
        design_keys=SWARM_DESIGN_KEYS,
    ),
)
WORKLOADS.register(
    "serving",
    ServingParams,
    drive_serving,
    designs=SERVING_DESIGNS,
    kind=Kind(
        "serving",
        limits.SERVING,
        closed_loop=True,
        headline="ttft_mean_s",
        assumptions=scenario_assumptions.SERVING,
        design_keys=SERVING_DESIGN_KEYS,
    ),
)

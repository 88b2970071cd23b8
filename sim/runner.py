"""Run a scenario: plan each variant, simulate it, write results and provenance.

``run(cfg, profile, out_dir) -> ScenarioResult``.  Layout of ``out_dir``::

    summary.parquet, summary.csv    one row per variant
    run.json                        provenance: git SHA, machine, packages, seed, what
                                    timed each variant's GPU compute (gpu_time)
    scenario.yaml, profile.yaml     the effective configuration
    variants/<slug>/plan.parquet    the transfer plan (replayable by real/)
    variants/<slug>/{ops,devices,steps}.parquet   records
    variants/<slug>/trace.json      Perfetto/Chrome timeline (with trace=True)
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import yaml

from hwprofiles import HardwareProfile
from kvtier.contracts.plan import write_plan
from kvtier.contracts.provenance import file_digest, provenance
from kvtier.contracts.records import Records
from sim.config import ConfigError, ScenarioConfig, Variant
from sim.executor import simulate
from sim.factors import expand_matrix
from sim.hw.measured import roofline_source
from sim.perfetto import write_trace
from sim.registry import WORKLOADS, Unsupported

# (variant name, ops done, ops total) -> None
Progress = Callable[[str, int, int], None]
EngineProgress = Callable[[str, float, int, int], None]  # variant, simulated s, done, total


@dataclass
class VariantResult:
    """One variant's run: its records and summary, the plan it simulated (None for a
    closed-loop kind, whose records hold the plan it issued), and its companion runs
    (e.g. at matched recall) with their plans, by column prefix."""

    variant: Variant
    records: Records
    summary: dict
    also: dict[str, Records] = field(default_factory=dict)
    plan: pa.Table | None = None
    also_plans: dict[str, pa.Table] = field(default_factory=dict)

    def runs(self) -> list[tuple[str, Records, pa.Table | None]]:
        """``(prefix, records, plan)`` of the run ("" for the variant's own) and each
        companion."""
        own = [("", self.records, self.plan)]
        return own + [(k, r, self.also_plans[k]) for k, r in self.also.items()]


@dataclass
class ScenarioResult:
    config: ScenarioConfig
    profile: HardwareProfile
    variants: list[VariantResult]
    out_dir: Path | None
    wall_s: float
    skipped: dict[str, str] = field(default_factory=dict)  # variant -> why

    def summary(self) -> pd.DataFrame:
        return pd.DataFrame([{"variant": v.variant.name, **v.summary} for v in self.variants])


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "variant"


@dataclass
class PlannedVariant:
    variant: Variant
    plan: pa.Table | None  # None for closed-loop kinds, whose plan is what ``drive`` issued
    summarize: Callable[[Records], dict]
    drive: Callable[..., Records] | None = None  # drive(watch=None): watch(now, done, total)
    also: dict = field(default_factory=dict)  # column prefix -> companion (plan, summarize)
    gpu_time: str = ""  # what times the plan's GPU compute ("": the engine records it)


def plan_variants(
    cfg: ScenarioConfig, profile: HardwareProfile, progress: Progress | None = None
) -> tuple[list[PlannedVariant], dict[str, str]]:
    """Plan every variant before simulating any (so a bad one fails fast).

    The workload kind's registered factory (:mod:`sim.workloads`) plans or
    prepares each variant; a ``matrix`` expands the variants first
    (:func:`sim.factors.expand_matrix`).  Variants the profile cannot run
    (too few SSDs, no GPUDirect, no peer GPU) are skipped with the reason;
    if none is left that is an error.
    """
    planned: list[PlannedVariant] = []
    skipped: dict[str, str] = {}
    for variant in expand_matrix(cfg):
        try:
            planned.append(
                plan_variant(cfg, variant, cfg.variant_params(variant), profile, progress)
            )
        except Unsupported as exc:
            skipped[variant.name] = str(exc)
    if not planned:
        reasons = "; ".join(f"'{k}': {v}" for k, v in skipped.items())
        raise ConfigError(
            f"{cfg.source_file}: no variant can run on profile {profile.name} ({reasons})"
        )
    return planned, skipped


def plan_variant(
    cfg: ScenarioConfig,
    variant: Variant,
    params: object,
    profile: HardwareProfile,
    progress: Progress | None = None,
) -> PlannedVariant:
    """Plan one (expanded) variant of ``cfg`` with its workload ``params`` on
    ``profile``: the kind's factory; Unsupported where the profile cannot run it, a
    ConfigError naming the variant where its parameters are bad."""
    factory = WORKLOADS.entry(params.kind).factory
    tick = (lambda d, t, n=variant.name: progress(f"{n} (plan)", d, t)) if progress else None
    try:
        p = factory(params, profile, cfg.seed, variant.name, tick)
    except Unsupported:
        raise
    except (ValueError, KeyError) as exc:
        msg = exc.args[0] if exc.args else str(exc)
        raise ConfigError(f"{cfg.source_file}: variant '{variant.name}': {msg}") from None
    also = {k: (a.plan, a.summarize) for k, a in p.also.items()}
    return PlannedVariant(variant, p.plan, p.summarize, p.drive, also, p.gpu_time)


def run_variant(
    cfg: ScenarioConfig,
    planned: PlannedVariant,
    profile: HardwareProfile,
    progress: Progress | None = None,
    engine_progress: EngineProgress | None = None,
) -> VariantResult:
    """Simulate one planned variant; ``engine_progress(variant, simulated s,
    requests done, requests)`` reports a closed-loop (serving) run as it goes."""
    name = planned.variant.name
    if planned.drive is not None:
        watch = (lambda now, d, t: engine_progress(name, now, d, t)) if engine_progress else None
        records = planned.drive(watch)
        if progress:
            progress(name, 1, 1)
        return VariantResult(planned.variant, records, planned.summarize(records))
    cb = (lambda done, total: progress(name, done, total)) if progress else None
    records = simulate(planned.plan, profile, cb)
    if planned.gpu_time:
        records.stats["gpu_time"] = planned.gpu_time
    summary = planned.summarize(records)
    also = {}
    for prefix, (plan, summarize) in planned.also.items():  # e.g. the run at matched recall
        label = f"{name} ({prefix.strip('_')})"
        cb = (lambda done, total, n=label: progress(n, done, total)) if progress else None
        also[prefix] = simulate(plan, profile, cb)
        summary.update({prefix + k: v for k, v in summarize(also[prefix]).items()})
    plans = {prefix: plan for prefix, (plan, _) in planned.also.items()}
    return VariantResult(planned.variant, records, summary, also, planned.plan, plans)


def run(
    cfg: ScenarioConfig,
    profile: HardwareProfile,
    out_dir: str | Path | None,
    progress: Progress | None = None,
    trace: bool = False,
    engine_progress: EngineProgress | None = None,
) -> ScenarioResult:
    t0 = time.perf_counter()
    planned, skipped = plan_variants(cfg, profile, progress)
    results = [run_variant(cfg, p, profile, progress, engine_progress) for p in planned]
    result = ScenarioResult(
        cfg, profile, results, Path(out_dir) if out_dir else None, time.perf_counter() - t0, skipped
    )
    if out_dir is not None:
        write_results(result, Path(out_dir), trace)
    return result


def write_results(result: ScenarioResult, out: Path, trace: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summary = result.summary()
    summary.to_parquet(out / "summary.parquet", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    for v in result.variants:
        vdir = out / "variants" / slug(v.variant.name)
        for prefix, records, plan in v.runs():  # companions in variants/<slug>/<prefix>
            rdir = vdir / slug(prefix) if prefix else vdir
            records.write(rdir)
            if plan is None:  # a closed-loop (serving) run's: what it issued, in chunks
                plan = records.plan_chunks()  # type: ignore[attr-defined]
            write_plan(plan, rdir / "plan.parquet")
            if trace:
                write_trace(records.ops, rdir / "trace.json", name=v.variant.name)
    cfg, profile = result.config, result.profile
    (out / "scenario.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    shutil.copyfile(profile.source_file, out / "profile.yaml")
    meta = provenance(
        seed=cfg.seed,
        scenario=cfg.to_dict(),
        scenario_file=cfg.source_file,
        profile={
            "name": profile.name,
            "file": profile.source_file,
            "sha256": file_digest(profile.source_file),
            # the achievable-efficiency factors every variant ran under (defaults included)
            "efficiency": asdict(profile.efficiency),
        },
        wall_s=result.wall_s,
        skipped=result.skipped,
        # what timed each variant's GPU compute (a serving run's engine says; a plan's
        # workload kind resolves it when planning, sim.hw.measured.resolve)
        gpu_time={
            v.variant.name: v.records.stats.get("gpu_time", roofline_source(profile))
            for v in result.variants
        },
        stats={v.variant.name: v.records.stats for v in result.variants},
    )
    (out / "run.json").write_text(json.dumps(meta, indent=2, default=str))

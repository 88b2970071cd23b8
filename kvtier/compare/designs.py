"""The designs part of ``kvtier real validate``: each KV design's own plan, simulated
and replayed on the same devices, and whether the two agree on which design is faster.

The designs are swarm scenarios' variants (``--designs default,swarm-ablations``:
Swarm, No Cluster, InfLLM, PQCache and the Swarm ablations), planned by the simulator's
own runner (:func:`sim.runner.plan_variants`, i.e. :func:`sim.scenarios.swarm.plan_swarm`)
at a reduced size (the caps of the workload kind's registry entry,
:data:`sim.workloads.REPLAY_CAPS`).  Variants whose plans issue the very
same I/O (same ops, devices, bytes, I/O counts and byte ranges) are replayed
once: their measured difference could only be noise.

Every kept plan is simulated on the profile that models the devices and
replayed on the devices; copy and compute ops (no GPU here) wait out their
simulated time (:func:`kvtier.compare.durations.modelled_durations`), so the
comparison is about the I/O.  Per design the table gives:

* mean step time: a decode step ends when its last op (the last layer's
  attention) ends; step ``t`` lasts ``end(t) - end(t-1)`` -- the time between
  tokens of the pipelined decode.  The first :data:`WARMUP_STEPS` steps
  (pipeline fill, and a throttle's budget carried over from the previous
  design) are left out;
* effective read bandwidth: bytes the backend read from the SSDs / the time at
  least one read op was in flight (the union of the read ops' intervals);
* errors ``(sim - real) / real``, and the ranking of the designs by step time
  in both backends with Kendall's tau (1: same order).

The simulation models the replayer as it runs the design replays
(:func:`kvtier.compare.replayer.design_profile`): paced, one I/O at a time, at the
per-I/O cost measured on that path.  Before, it charged the batched path's cost (8-14
us per I/O, against 81-124 us paced), and was 40-88% fast for the designs of many small
reads.  Measured (``--emulate h20-8ssd``, 4 devices, 2 cores at load 6-10; step error
per design, Kendall's tau over the designs replayed):

=====================  ==================  ==================  ============================
design                 before: 4 runs [1]  before, paired [2]  after: paired [2] / CLI [3]
=====================  ==================  ==================  ============================
Swarm                  -58, -60, -60, -75  -79, -84            +3, -23 / -21, -11
PQCache                -66, -47, -45, -40  -73, -78            -2, -25 / -41, +43
Swarm: medoid only     -68, -56, -49, -47  -76, -77            -9, -20
Swarm: no replica      -56, -54, -48, -40  -72, -75            +4, -14
Swarm: static routing  -71, -73, -71, -66  -86, -88            +10, -11
Swarm: no dedup        -54, -54, -50, -46  -79, -81            -18, -28
InfLLM                 +41, +47, +45, +41  +23, +28            +23, +31 / +6, +28
No Cluster             -18, -13, -13, -27  -36, -44            -36, -44 / -40, -14
Kendall's tau          0.43, 0.57 (x3)     0.57, 0.57          1.00, 0.98 / 1.00, 1.00
=====================  ==================  ==================  ============================

[1] the last session's runs (``--designs default,swarm-ablations``).  [2] the same
replays simulated both ways (the 8 designs; two runs, the first with the QD1 times
also measured through the pacer, the second as now).  [3] ``kvtier real validate
--emulate h20-8ssd --designs default`` (4 designs), two runs as now.  The systematic
underestimate of the small-read designs is gone and the order is right in every run;
what is left is run-to-run noise of a CPU-bound replay on a loaded machine (PQCache's
real step time ranged 16-42 ms over these runs) and No Cluster's pacer, both in
:mod:`kvtier.compare.replayer`'s docstring.

2026-11-25, the paced path batched and shared max-min (:mod:`real._pacing`): ``kvtier
real validate --emulate h20-8ssd --designs default``, runs alternating old code (main
at 8ead4e3) and new, load 4-8 on 2 cores; step error per design, and No Cluster's
fetch ops (real / simulated ms, mean):

=====================  ===================  ==========================
design                 before: 2 runs       after: 3 runs
=====================  ===================  ==========================
Swarm                  -61, -36             -55, -21, +14
PQCache                -45, -64             +11, +54, +100
InfLLM                 +29, -1              +45, +39, +36
No Cluster             -33, -42             -35, +3, +2
No Cluster's fetches   61 / 18, 80 / 33     13 / 14, 14 / 8, 12 / 9
paced us per I/O       53, 98               44, 21, 15
Kendall's tau          0.67, 1.00           0.67, 0.67, 1.00
=====================  ===================  ==========================

The fetches no longer wait behind the prefetches (61-80 ms against 18-33 simulated,
now 12-14 against 8-14), and the paced path's measured per-I/O cost fell 2-7x.  What
swings the step errors now is the machine: the model's QD1 read latency, measured at
each run's start, read 603-873 us before and 800, 1978 and 1535 us after (the two
high ones make PQCache +54% and +100%), and 0.27 ms attention timers lasted 0.6-16
ms on average as the load varied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from hwprofiles import HardwareProfile, load_profile
from kvtier.compare.metrics import WARMUP_STEPS, design_metrics, design_table, ranking
from kvtier.compare.replayer import design_profile, paced
from kvtier.contracts.plan import extents_csr
from kvtier.contracts.records import Records
from sim.config import ConfigError, ScenarioConfig, Variant, load_scenario
from sim.registry import WORKLOADS
from sim.runner import plan_variants, slug

# The designs replayed by default: the baselines and the Swarm ablations that change
# what is read (medoid-only index, no replicas, static routing, no dedup); the
# others move the same bytes as Swarm within a few I/Os, so their order among
# themselves would be decided by noise.  ``--design-variants all`` replays every one.
KEY_DESIGNS = (
    "Swarm",
    "No Cluster (scoring included)",  # its paper accounting reads a subset: not replayed
    "InfLLM",
    "PQCache",
    "Swarm: medoid only",
    "Swarm: no replica",
    "Swarm: static routing",
    "Swarm: no dedup",
)


def scaled_designs(source: str, n_ssd: int, names: str = "") -> ScenarioConfig:
    """Scenario ``source`` with its workload capped on ``n_ssd`` SSDs by the caps its
    workload kind registers (:class:`sim.registry.Kind`; a kind without is refused).

    ``source`` may name several swarm scenarios (``default,swarm-ablations``): the
    workload is the first's, the variants all of theirs (a name seen before is
    skipped).  The replay compares designs at equal budget, so ``match_recall``
    is off.  ``names``: comma-separated variants to keep (each must exist),
    ``all``, or empty for those of :data:`KEY_DESIGNS` the scenarios have (all if
    none)."""
    cfgs = [load_scenario(s.strip()) for s in source.split(",") if s.strip()]
    if not cfgs:
        raise ConfigError("--designs: name a swarm scenario")
    cfg, seen, variants = cfgs[0], set(), []
    for v in (v for c in cfgs for v in c.variants):
        if v.name not in seen:
            seen.add(v.name)
            variants.append(
                Variant(v.name, tuple(o for o in v.overrides if o[0] != "match_recall"))
            )
    cfg = dataclasses.replace(cfg, variants=tuple(variants))
    cfg = dataclasses.replace(cfg, variants=_chosen(cfg, names))
    w = cfg.workload
    caps = WORKLOADS.entry(w.kind).kind.caps
    if not caps:
        raise ConfigError(f"{cfg.source_file}: --designs needs a swarm scenario, not {w.kind!r}")
    capped = {k: min(getattr(w, k) or cap, cap) for k, cap in caps.items()}
    if w.steps <= WARMUP_STEPS or capped["steps"] <= WARMUP_STEPS:
        raise ConfigError(f"{cfg.source_file}: workload.steps must be > {WARMUP_STEPS}")
    return dataclasses.replace(
        cfg, workload=dataclasses.replace(w, ssds=n_ssd, match_recall=0.0, **capped)
    )


def _chosen(cfg: ScenarioConfig, names: str) -> tuple:
    have = {v.name: v for v in cfg.variants}
    if names == "all":
        return cfg.variants
    if not names:
        key = tuple(have[n] for n in KEY_DESIGNS if n in have)
        return key or cfg.variants
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    for n in wanted:
        if n not in have:
            raise ConfigError(f"{cfg.source_file}: no variant '{n}' (have: {', '.join(have)})")
    return tuple(have[n] for n in dict.fromkeys(wanted))


def io_signature(plan: pa.Table) -> str:
    """Digest of every I/O the plan issues (op order, devices, sizes, byte ranges)."""
    h = hashlib.sha256()
    for col in ("kind", "src", "dst", "bytes", "n_ios", "offset", "stride", "queue_depth"):
        h.update(repr(plan.column(col).to_pylist()).encode())
    ptr, table = extents_csr(plan)
    h.update(np.ascontiguousarray(ptr).tobytes())
    h.update(np.ascontiguousarray(table).tobytes())
    return h.hexdigest()


def plan_designs(
    cfg: ScenarioConfig, profile: HardwareProfile
) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """``name -> plan`` of every variant with distinct I/O, and ``name -> why`` skipped."""
    planned, skipped = plan_variants(cfg, profile)
    plans: dict[str, pa.Table] = {}
    seen: dict[str, str] = {}
    for p in planned:
        sig = io_signature(p.plan)
        if sig in seen:
            skipped[p.variant.name] = f"same I/O as {seen[sig]}"
            continue
        seen[sig] = p.variant.name
        plans[p.variant.name] = p.plan
    return plans, skipped


def footprint(plans: dict[str, pa.Table]) -> int:
    """Bytes each device must hold for every plan (the replayer's own footprint)."""
    from real.datafile import io_layout

    return max(max(io_layout(p).extents().values()) for p in plans.values())


# -- running and reporting ------------------------------------------------------------------


DESIGN_REPEATS = 3  # replays per design, interleaved; the median and the noise between them


def run_designs(
    dev,
    plans: dict[str, pa.Table],
    *,
    seed: int,
    engine: str,
    costs: dict | None = None,
    repeats: int = DESIGN_REPEATS,
) -> tuple[pd.DataFrame, dict[str, tuple[Records, Records]], dict | None]:
    """Simulate every plan once and replay it ``repeats`` times on ``dev``
    (:class:`kvtier.compare.devices.Devices`), interleaved (every design once, then
    again), so a slow phase of the machine falls on all designs alike rather than on
    one; the simulation models the replayer by :func:`design_profile` (``costs``: see
    there).  Returns the table (the median repeat, the repeats' range and noise:
    :func:`kvtier.compare.metrics.design_table`), each design's (sim, real) records --
    the real records of its median repeat -- and the replayer costs modelled."""
    from kvtier.compare.durations import modelled_durations
    from real.replay import replay
    from sim.executor import simulate

    profile, costs = design_profile(dev, engine, costs)
    sim_m: dict[str, dict] = {}
    sims: dict[str, Records] = {}
    for name, plan in plans.items():
        sims[name] = simulate(plan, profile)
        sim_m[name] = design_metrics(sims[name])
    real_m: dict[str, list[dict]] = {name: [] for name in plans}
    reals: dict[str, list[Records]] = {name: [] for name in plans}
    for _ in range(repeats):
        for name, plan in plans.items():
            nonio = modelled_durations(plan, profile)
            # paced (real._pacing): outside the kernel throttle, a FIFO behind the pacer
            with dev.prepared(plan, seed, None) as targets:
                real = replay(
                    plan,
                    paced(targets, profile, (costs or {}).get("pace_scale", 1.0)),
                    seed=seed,
                    engine=engine,
                    nonio_s=nonio,
                )
            real_m[name].append(design_metrics(real))
            reals[name].append(real)
    records = {}
    for name in plans:
        order = np.argsort([m["step_ms"] for m in real_m[name]], kind="stable")
        mid = int(order[(repeats - 1) // 2])
        records[name] = (sims[name], reals[name][mid])
    return design_table(sim_m, real_m), records, costs


def write_designs(
    table: pd.DataFrame,
    records: dict[str, tuple[Records, Records]],
    plans: dict[str, pa.Table],
    out: Path,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """``designs.parquet``, ``designs.json`` (provenance, ranking) and per-design records."""
    from kvtier.contracts.plan import write_plan
    from kvtier.contracts.provenance import provenance

    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "designs.parquet", index=False)
    for name, (sim, real) in records.items():
        sim.write(out / slug(name) / "sim")
        real.write(out / slug(name) / "real")
        write_plan(plans[name], out / slug(name) / "plan.parquet")
    report = provenance(
        **meta,
        ranking=ranking(table),
        warmup_steps=WARMUP_STEPS,
        bytes_match=bool(table["bytes_match"].all()),
        designs=table.to_dict(orient="records"),
    )
    (out / "designs.json").write_text(json.dumps(report, indent=2, default=str))
    return report


# -- one validation's designs ---------------------------------------------------------------


@dataclass
class DesignRun:
    """The designs part of a validation: what was planned, skipped and measured."""

    scenario: ScenarioConfig
    plans: dict[str, pa.Table]
    skipped: dict[str, str]
    plan_s: float
    table: pd.DataFrame | None = None
    records: dict[str, tuple[Records, Records]] | None = None
    costs: dict | None = None  # the replayer costs the designs were simulated with


def plan_design_run(source: str, n_ssd: int, names: str, profile: str) -> DesignRun | None:
    """Plan the designs of scenarios ``source`` (None for ``none``) capped for ``n_ssd``
    devices (``names``: see :func:`scaled_designs`) on hardware profile ``profile``,
    the one emulated, paced or given."""
    if source == "none":
        return None
    t0 = time.perf_counter()
    cfg = scaled_designs(source, n_ssd, names)
    plans, skipped = plan_designs(cfg, load_profile(profile))
    return DesignRun(cfg, plans, skipped, time.perf_counter() - t0)


def write_design_run(
    run: DesignRun,
    out: Path,
    *,
    profile: HardwareProfile,
    devices: dict[str, Any],
    size: int,
    seed: int,
    wall_s: float,
) -> dict[str, Any]:
    """:func:`write_designs` of a run, with its scenario, caps, skipped variants, the
    ``devices`` and their ``size`` in bytes, the ``seed`` and the replayer costs."""
    meta = {
        "scenario": run.scenario.to_dict(),
        "caps": dict(WORKLOADS.entry(run.scenario.workload.kind).kind.caps),
        "skipped": run.skipped,
        "profile": profile.name,
        "devices": devices,
        "device_bytes": size,
        "seed": seed,
        "wall_s": wall_s,
        "replayer_costs": run.costs,
    }
    return write_designs(run.table, run.records, run.plans, out, meta)

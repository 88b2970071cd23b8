"""The serving part of ``kvtier real validate --serving DESIGN``: the I/O of a short
serving run, simulated and replayed on the same devices, op by op.

The run.  The serving engine (:mod:`sim.serving`) serves ``requests`` of the
benchmark's Mooncake-shaped trace (:func:`sim.serving.bench.mooncake_table`): by default
(``revisits``) the first of them that belong to conversations of more than one turn
(:func:`revisiting`), so that later turns find their context in the offload tiers and the
run loads as well as stores; else the first by arrival, of which few are later turns
(a session's next turn comes a think time, 60 s in the mean, after its answer).  It
serves them with a serving design (``pool`` by default: seed 004's unified pool over the devices) at
``block``-token KV blocks on the profile that models the devices (the emulated, scaled
one), and keeps its plan (``keep_plan``).  The trace's arrivals are compressed to last
``window_s`` seconds (a choice of the validation, so that the replay is short; both
backends run the same compressed plan).  The offload budget (``ssd_gib``, split evenly
over the devices by :func:`sim.serving.build.make_tiers`) sizes the device files.

The I/O plan (:func:`io_plan`).  Of the issued plan, the SSD reads and writes are kept;
each is released at the time the serving run started it (``release_s``: the scheduler
step that issued it, the copies and GPU work before it), and keeps its dependencies on
other kept I/O ops (those through GPU work or copies are in the release time).  Both
backends run this very plan: :func:`sim.executor.simulate` on the profile, the
replayer on the devices.  So the comparison is the devices' and the replayer's timing of
the serving run's own I/O -- its store writes, demotions and loads with their sizes,
queue depths, byte ranges and overlaps -- not the serving engine's queueing, which has
no real counterpart here (no GPU).

The report (:func:`compare_serving`): per device the bytes and I/Os of both backends
(they must be equal), and per op kind (the plan's ``tag``: ``store``, ``demote``,
``load``, ...) the ops' count, bytes and the median, p90 and bias of the per-op time
error ``(sim - real) / real`` (an op's time: its start to its end).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from hwprofiles import HardwareProfile
from kvtier.contracts.records import Records

GIB = 1 << 30


@dataclass(frozen=True)
class ServingReplay:
    """The serving run whose I/O is replayed (see the module doc)."""

    design: str = "pool"
    # 30 turns of multi-turn conversations, a 16K-token GPU cache and a 3 GiB pool: the
    # pool run stores 84 ops (4.1 GB) and loads 32 (310 MB) on h20-8ssd's 4-device
    # emulation, 172 / 32 on h20-8ssd itself (2026-12-03; 20 turns: 3.2 GB, 32 loads;
    # 50: 6.0 GB, 80 loads); with a 1 GiB pool and an 8K-token GPU, 20 turns load
    # nothing; the first 100 requests by arrival, a 64K-token GPU and 0.5 GiB (until
    # then) stored 116 ops and loaded none
    requests: int = 30
    block: int = 256
    model: str = "Llama-3.2-1B"  # 32 KiB of KV a token: the run's stores fit the devices
    ssd_gib: float = 3.0  # the offload budget over the devices: each holds ssd_gib / n
    cpu_gib: float = 0.25  # a design's host-memory tier, where it has one
    window_s: float = 5.0  # the trace's arrivals compressed to this span
    gpu_blocks: int = 64  # the GPU's KV cache (16K tokens), small so that the run offloads
    seed: int = 0
    revisits: bool = True  # turns of multi-turn conversations only (:func:`revisiting`)

    def device_bytes(self, n: int) -> int:
        """Bytes each of ``n`` devices must hold: its share of the budget, in MiB."""
        return -(-int(self.ssd_gib * GIB / n) // (1 << 20)) << 20


def compressed(table: pa.Table, window_s: float) -> pa.Table:
    """``table`` with its arrivals scaled so the last arrives ``window_s`` after 0."""
    i = table.schema.get_field_index("arrival_s")
    arrivals = table.column(i).to_numpy()
    last = float(arrivals.max()) if len(arrivals) else 0.0
    if last > 0:
        arrivals = arrivals * (window_s / last)
    return table.set_column(i, table.schema.field(i), pa.array(arrivals))


REVISIT_DRAW = 12  # requests drawn per request kept: 1,000 drawn hold 178 multi-turn sessions


def revisiting(n: int, seed: int = 0) -> pa.Table:
    """The first ``n`` requests (by arrival) of the Mooncake-shaped trace that belong to
    conversations with more than one turn among its first ``REVISIT_DRAW x n`` requests
    (of the first 1,000, 415 are such turns, of 178 sessions), renumbered 0..n-1.  Their
    later turns reuse their session's context, as the trace's later turns do; the one-turn
    sessions between them, which reuse nothing, are left out."""
    from sim.serving.bench import mooncake_table

    table = mooncake_table(REVISIT_DRAW * n, seed)
    session = table.column("session_id").to_numpy()
    ids, counts = np.unique(session, return_counts=True)
    keep = np.flatnonzero(np.isin(session, ids[counts > 1]))[:n]
    out = table.take(pa.array(keep))
    i = out.schema.get_field_index("request_id")
    return out.set_column(i, out.schema.field(i), pa.array(np.arange(len(keep), dtype=np.int64)))


def serving_run(spec: ServingReplay, profile: HardwareProfile):
    """Run the serving engine as ``spec`` says on ``profile`` (plan kept); its records."""
    from sim.models import get_model
    from sim.serving.bench import mooncake_table
    from sim.serving.build import build_engine
    from sim.serving.designs import get_design
    from sim.serving.execute.engine import EngineConfig
    from sim.serving.requests import load_requests

    drawn = revisiting if spec.revisits else mooncake_table
    table = compressed(drawn(spec.requests, spec.seed), spec.window_s)
    reqs = load_requests(table, spec.block)
    card = get_model(spec.model)
    design = get_design(spec.design, tier_overrides(spec))
    cfg = EngineConfig(
        gpu_blocks=spec.gpu_blocks,
        block_tokens=spec.block,
        gpu=profile.gpu_names[0],
        keep_plan=True,
    )
    return build_engine(profile, card, design, cfg, reqs).run()


def tier_overrides(spec: ServingReplay) -> dict[str, float]:
    """The offload budgets of ``spec`` for the tiers its design has, as the serving
    benchmark gives them: a design with its own tiers keeps those of them it has, a
    write-through design (seed 004's, tiers set by the scenario) gets both."""
    from sim.serving.designs import get_design

    base = get_design(spec.design)
    sizes = {"cpu_gib": spec.cpu_gib, "ssd_gib": spec.ssd_gib}
    if base.cpu_to_ssd == "write_through":
        return sizes
    return {k: v for k, v in sizes.items() if getattr(base, k) > 0}


def io_plan(plan: pa.Table, ops: pa.Table) -> pa.Table:
    """The SSD reads and writes of a serving run's ``plan``, each released at its start
    in the run's op records ``ops``, with its dependencies on the kept ops renumbered."""
    kind = np.asarray(plan.column("kind").to_pylist(), dtype=object)
    keep = np.flatnonzero((kind == "read") | (kind == "write"))
    start = (
        ops.to_pandas().set_index("op_id")["start_s"].reindex(np.arange(plan.num_rows)).to_numpy()
    )
    new_id = np.full(plan.num_rows, -1, np.int64)
    new_id[keep] = np.arange(len(keep))
    deps = plan.column("depends_on").to_pylist()
    kept_deps = [[int(new_id[d]) for d in (deps[i] or []) if new_id[d] >= 0] for i in keep]
    t = plan.take(pa.array(keep))
    cols = {
        "op_id": pa.array(np.arange(len(keep), dtype=np.int64)),
        "release_s": pa.array(start[keep].astype(float)),
        "depends_on": pa.array(kept_deps, type=t.schema.field("depends_on").type),
    }
    for name, col in cols.items():
        i = t.schema.get_field_index(name)
        t = t.set_column(i, t.schema.field(i), col)
    return t


def compare_serving(sim: Records, real: Records) -> dict[str, Any]:
    """Per-device bytes and I/Os of both backends and the per-op time error by op kind."""
    from real.validate import device_bytes

    so, ro = sim.ops.to_pandas(), real.ops.to_pandas().set_index("op_id")
    ops = so[["op_id", "tag", "kind", "src", "dst", "bytes", "n_ios"]].copy()
    ops["sim_s"] = (so["end_s"] - so["start_s"]).to_numpy()
    ops["real_s"] = (ro.loc[so["op_id"], "end_s"] - ro.loc[so["op_id"], "start_s"]).to_numpy()
    ops["error"] = (ops["sim_s"] - ops["real_s"]) / ops["real_s"]
    return {"ops": ops, "by_kind": by_kind(ops), "bytes": device_bytes(sim, real)}


def by_kind(ops: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per op kind (``tag``): ops, bytes, I/Os and the median, p90 and max of the
    per-op ``|error|``, and its median (``bias``, > 0: the model is slower)."""
    out = {}
    for tag, g in ops.groupby("tag", sort=True):
        e = g["error"].abs()
        out[str(tag)] = {
            "ops": int(len(g)),
            "bytes": int(g["bytes"].sum()),
            "n_ios": int(g["n_ios"].sum()),
            "sim_s": float(g["sim_s"].sum()),
            "real_s": float(g["real_s"].sum()),
            "median": float(e.median()),
            "p90": float(e.quantile(0.9)),
            "max": float(e.max()),
            "bias": float(g["error"].median()),
        }
    return out


@dataclass
class ServingResult:
    """What the serving replay measured: the spec, the I/O plan, both backends' records,
    the comparison (:func:`compare_serving`) and the replayer costs modelled."""

    spec: ServingReplay
    plan: pa.Table
    sim: Records
    real: Records
    result: dict[str, Any]
    costs: dict | None


def run_serving(
    dev,
    spec: ServingReplay,
    *,
    seed: int,
    engine: str,
    model: tuple[HardwareProfile, dict | None],
) -> ServingResult:
    """Plan ``spec``'s serving run on ``model``'s profile (the devices' profile with the
    paced replayer's costs, as the designs are simulated:
    :func:`kvtier.compare.replayer.design_profile`; ``model[1]``: those costs), simulate
    its I/O plan there, replay it paced on ``dev`` (:class:`kvtier.compare.devices.Devices`)
    as the designs are, and compare."""
    from kvtier.compare.replayer import paced
    from real.replay import replay
    from sim.executor import simulate

    profile, costs = model
    served = serving_run(spec, profile)
    plan = io_plan(served.plan, served.ops)
    if plan.num_rows == 0:
        raise ValueError(f"the serving run of {spec.design} issued no SSD I/O")
    sim = simulate(plan, profile)
    # paced (real._pacing): outside the kernel throttle, a FIFO behind the pacer
    with dev.prepared(plan, seed, None) as targets:
        real = replay(
            plan,
            paced(targets, profile, (costs or {}).get("pace_scale", 1.0)),
            seed=seed,
            engine=engine,
        )
    return ServingResult(spec, plan, sim, real, compare_serving(sim, real), costs)


def write_serving(run: ServingResult, out, meta: dict[str, Any]) -> dict[str, Any]:
    """``serving.json`` (provenance, the spec, per-kind errors, device bytes), the
    per-op table, the I/O plan and both backends' records in ``out``."""
    import json
    from pathlib import Path

    from kvtier.contracts.plan import write_plan
    from kvtier.contracts.provenance import provenance

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_plan(run.plan, out / "plan.parquet")
    run.sim.write(out / "sim")
    run.real.write(out / "real")
    run.result["ops"].to_parquet(out / "ops.parquet", index=False)
    b = run.result["bytes"]
    report = provenance(
        **meta,
        serving=dataclasses.asdict(run.spec),
        replayer_costs=run.costs,
        by_kind=run.result["by_kind"],
        bytes_match=bool(b["match"].all()),
        device_io=b.to_dict(orient="records"),
    )
    (out / "serving.json").write_text(json.dumps(report, indent=2, default=str))
    return report

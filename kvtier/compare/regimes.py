"""The regime validation: the regime plan (:func:`real.validate.regime_plan`) run in
the simulator and on the devices, the errors per step (:func:`real.validate.compare`),
the verdict against :data:`real.validate.TARGET_MEDIAN_ERROR`, and the report."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwprofiles import HardwareProfile
from kvtier.compare.devices import Devices
from kvtier.contracts.plan import write_plan
from kvtier.contracts.records import Records
from real._signals import phase
from real.crosscheck import fio_cross_check
from real.validate import (
    TARGET_MEDIAN_ERROR,
    THROTTLE_IOPS_STEP_S,
    compare,
    regime_plan,
    write_report,
)
from sim.executor import simulate


def run_regimes(
    dev: Devices,
    *,
    regimes: tuple[str, ...],
    steps: int,
    step_s: float,
    n_ssd: int,
    seed: int,
    engine: str,
    fio_out: Path | None,
    remodel: Callable[[], HardwareProfile] | None = None,
    log: Callable[[str], object] = print,
) -> tuple[dict[str, Any], Records, Records]:
    """Simulate and replay the regime plan on ``dev``: ``steps`` steps of ``step_s``
    modelled seconds per regime on ``n_ssd`` devices; fio replays the bandwidth steps
    too into ``fio_out`` (None: skipped).  The plan is sized on ``dev.profile`` and
    simulated after the replay on ``remodel()``'s profile (None: ``dev.profile``), so
    a model measured around the replay can hold the run's period.  Returns the
    comparison (with the plan and the fio cross-check) and both backends' records."""
    from real.replay import replay, sigterm_as_interrupt

    plan, plan_steps = regime_plan(
        dev.profile,
        regimes=tuple(regimes),
        steps_per_regime=steps,
        step_s=step_s,
        n_ssd=n_ssd,
        max_bytes_per_device=256 * (1 << 20),
        iops_step_s=THROTTLE_IOPS_STEP_S if dev.kernel_throttled else 0.0,
    )
    with sigterm_as_interrupt(), dev.prepared(plan, seed, log) as targets, dev.throttled():
        phase("replay")
        real = replay(plan, targets, seed=seed, engine=engine)
        fio: dict[str, Any] = {"skipped": "--no-fio"}
        if fio_out is not None:
            fio = fio_cross_check(plan, plan_steps, real, targets, fio_out)
    sim = simulate(plan, remodel() if remodel is not None else dev.profile)
    return compare(sim, real, plan_steps) | {"plan": plan, "fio": fio}, sim, real


def verdict(result: dict[str, Any], informational: bool) -> tuple[str, bool]:
    """The target line and whether it passes: every IOPS/bandwidth regime's median step
    error within :data:`TARGET_MEDIAN_ERROR` (``informational`` reports without failing)."""
    missed = {
        k: r["median"]
        for k, r in result["by_regime"].items()
        if k in ("iops", "bandwidth", "write") and not r["median"] <= TARGET_MEDIAN_ERROR
    }
    if not missed:
        return (
            f"median step error <= {TARGET_MEDIAN_ERROR:.0%} in IOPS/bandwidth regimes: yes",
            True,
        )
    which = ", ".join(f"{k} {v:.1%}" for k, v in missed.items())
    tail = " (informational run: not a failure)" if informational else ""
    line = f"median step error above the {TARGET_MEDIAN_ERROR:.0%} target: {which}{tail}"
    return line, informational


def write_regimes(
    result: dict[str, Any],
    sim: Records,
    real: Records,
    out: Path,
    *,
    seed: int,
    profile: HardwareProfile,
    devices: dict[str, Any],
    costs: dict | None,
    wall_s: float,
    load: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> None:
    """The plan, both backends' records and the report (``report.json``,
    ``validation.png``) in ``out``, with the run's provenance: ``devices`` as set up,
    the replayer ``costs`` modelled, and ``load``, the 1/5/15-minute load averages at
    the run's start and end."""
    from kvtier.contracts.provenance import provenance
    from real.replay import write_results

    out.mkdir(parents=True, exist_ok=True)
    write_plan(result["plan"], out / "plan.parquet")
    sim.write(out / "sim")
    write_results(real, out / "real")
    meta = provenance(
        seed=seed,
        profile=dataclasses.asdict(profile),
        devices=devices,
        engine=real.stats.get("engine_note"),
        engine_costs=costs,
        notes=real.stats.get("notes", []),
        fio_cross_check=result["fio"],
        wall_s=wall_s,
        loadavg=load and {"start": list(load[0]), "end": list(load[1]), "cores": os.cpu_count()},
    )
    write_report(result, out, meta)

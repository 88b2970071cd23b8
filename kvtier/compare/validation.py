"""One validation from start to end: the designs planned, the devices set up, the
replayer's costs measured (the model's latencies and CPU costs), the regime plan and
then each design's plan run in both backends, and the machine's load around it."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwprofiles import HardwareProfile
from kvtier.compare.designs import DesignRun, footprint, plan_design_run, run_designs
from kvtier.compare.devices import REGIME_DEVICE_BYTES, Devices, devices
from kvtier.compare.regimes import run_regimes
from kvtier.compare.serving import ServingReplay, ServingResult, run_serving
from kvtier.contracts.records import Records
from real.validate import engine_costs, pooled_costs, with_engine_costs


@dataclass
class Validation:
    """What a validation measured: the regime comparison and both backends' records,
    the profile that modelled the devices (with the replayer's ``costs``, None when
    not measured), the designs (None when skipped), each device's ``size`` in bytes,
    wall times, the 1/5/15-minute ``load`` averages at the start and the end, and the
    serving replay (None when skipped)."""

    result: dict[str, Any]
    sim: Records
    real: Records
    profile: HardwareProfile
    costs: dict | None
    designs: DesignRun | None
    size: int
    wall_s: float
    designs_s: float
    load: tuple[tuple[float, ...], tuple[float, ...]]
    serving: ServingResult | None = None


def validate(
    *,
    emulate: str | None,
    pace: str | None,
    hw: str | None,
    n: int,
    where: str,
    out: str | Path,
    scale: float | None,
    regimes: tuple[str, ...],
    steps: int,
    step_s: float,
    seed: int,
    engine: str,
    fio: bool,
    engine_costs_measured: bool,
    designs: str,
    design_variants: str,
    design_repeats: int = 3,
    serving: ServingReplay | None = None,
    log: Callable[[str], object] = print,
) -> Validation:
    """Validate on the devices of :func:`kvtier.compare.devices.devices` (``emulate``,
    ``pace`` or ``hw``; ``n``, ``where``, ``scale``): the regime plan
    (:func:`kvtier.compare.regimes.run_regimes`; fio replays its bandwidth steps into
    ``out/fio`` when ``fio``), then the designs of scenarios ``designs`` (``none``
    skips them; ``design_variants``: :func:`kvtier.compare.designs.scaled_designs`;
    each replayed ``design_repeats`` times, interleaved), then the I/O of the serving
    run ``serving`` (None: skipped; :mod:`kvtier.compare.serving`).
    ``engine_costs_measured``: the model takes the replayer's measured latencies and
    CPU costs; else the profile's own."""
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    run, size = _plan(designs, n, design_variants, emulate or pace or hw, log)
    if serving is not None:
        size = max(size, serving.device_bytes(n))
    meter = "fio" if fio else "replayer"  # what measures the devices' rates
    where_devices = dict(emulate=emulate, pace=pace, hw=hw, n=n, where=where, out=out)
    with devices(**where_devices, scale=scale, meter=meter, size=size, log=log) as dev:
        costs, remodel = None, None
        if engine_costs_measured:
            dev, costs = _with_replayer_costs(dev, engine, n, log)
            bracket = _Bracket(dev, costs, engine, n, log)
            remodel = bracket.after
        result, sim, real = run_regimes(
            dev,
            regimes=regimes,
            steps=steps,
            step_s=step_s,
            n_ssd=n,
            seed=seed,
            engine=engine,
            fio_out=Path(out) / "fio" if fio else None,
            remodel=remodel,
            log=log,
        )
        if remodel is not None:
            dev, costs = bracket.dev, bracket.costs
        t1 = time.perf_counter()
        if run is not None:
            run.table, run.records, run.costs = run_designs(
                dev, run.plans, seed=seed, engine=engine, costs=costs, repeats=design_repeats
            )
        designs_s = time.perf_counter() - t1
        served = None
        if serving is not None:
            model = _serving_model(dev, run, engine, costs)
            served = run_serving(dev, serving, seed=seed, engine=engine, model=model)
        profile = dev.profile
    wall_s = time.perf_counter() - t0
    load = (load0, os.getloadavg())
    return Validation(
        result, sim, real, profile, costs, run, size, wall_s, designs_s, load, serving=served
    )


def _serving_model(
    dev: Devices, run: DesignRun | None, engine: str, costs: dict | None
) -> tuple[HardwareProfile, dict | None]:
    """The profile the serving replay is simulated on: the designs' (the paced replayer,
    :func:`kvtier.compare.replayer.design_profile`), measured now if they did not run."""
    from kvtier.compare.replayer import design_profile

    if run is not None and run.costs is not None:
        return with_engine_costs(dev.profile, run.costs), run.costs
    return design_profile(dev, engine, costs)


def _plan(
    designs: str, n: int, variants: str, profile: str, log: Callable[[str], object]
) -> tuple[DesignRun | None, int]:
    """The designs planned (None for ``none``) and the bytes each device must hold: the
    regime plan's, or every design's footprint if larger (rounded up to MiB)."""
    run = plan_design_run(designs, n, variants, profile)
    if run is None:
        return None, REGIME_DEVICE_BYTES
    w = run.scenario.workload
    log(
        f"designs of scenario {run.scenario.name}: {len(run.plans)} with distinct I/O "
        f"({w.model}, {w.context_tokens:,}-token prefix, batch {w.batch}, {w.layers} "
        f"layers, {w.steps} steps), planned in {run.plan_s:.1f} s"
    )
    return run, max(REGIME_DEVICE_BYTES, -(-footprint(run.plans) // (1 << 20)) << 20)


class _Bracket:
    """The replayer's costs measured again after the regime replay and pooled with the
    first measurement (:func:`real.validate.pooled_costs`): the model the regimes are
    simulated on, and the designs after them, holds the median over both."""

    def __init__(self, dev: Devices, costs: dict, engine: str, n: int, log) -> None:
        self.dev, self.costs, self.engine, self.n, self.log = dev, costs, engine, n, log

    def after(self) -> HardwareProfile:
        later = engine_costs(self.dev, self.engine, self.n)
        self.costs = pooled_costs(self.costs, later)
        self.dev = dataclasses.replace(
            self.dev, profile=with_engine_costs(self.dev.profile, self.costs)
        )
        c = self.costs
        lo, hi = c["read_latency_us_range"]
        plo, phi = c["per_io_us_range"]
        self.log(
            f"replayer again after the regimes, pooled ({len(c['samples'])} replays): QD1 "
            f"4 KiB read {c['read_latency_us']:.1f} us ({lo:.0f}-{hi:.0f}), "
            f"{c['per_io_us']:.1f} us/I/O at QD64 ({plo:.1f}-{phi:.1f}), "
            f"{c['round_us']:.0f} us a round"
        )
        return self.dev.profile


def _with_replayer_costs(
    dev: Devices, engine: str, n: int, log: Callable[[str], object]
) -> tuple[Devices, dict]:
    """``dev`` modelled with the replayer's costs measured on it (outside the
    emulation's throttle: :func:`real.validate.engine_costs`), and the costs."""
    costs = engine_costs(dev, engine, n)
    log(
        f"replayer on this machine ({n} devices): QD1 4 KiB read "
        f"{costs['read_latency_us']:.1f} us, write {costs['write_latency_us']:.1f} us, "
        f"{costs['per_io_us']:.1f} us/I/O at QD64, {costs['round_us']:.0f} us a "
        "round (the model's latencies, per-I/O and per-op CPU cost, one core)"
    )
    return dataclasses.replace(dev, profile=with_engine_costs(dev.profile, costs)), costs

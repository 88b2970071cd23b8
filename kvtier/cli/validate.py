"""The ``kvtier real validate`` command: set up devices, run the plan in the
simulator and for real, print the error table (see :mod:`real.validate`).

Devices, in order of preference:

* ``--emulate PROFILE`` (root, loop devices, cgroup v1 blkio): N loop
  devices over files, throttled by the kernel to the profile's per-device
  rates scaled to what this machine sustains (:mod:`real.emulate`); the
  simulator models the scaled profile it writes.  Without root or blkio it
  falls back to user-space pacing and says so.
* ``--pace PROFILE``: plain files in ``--dir``, each paced in user space to
  the profile's per-device rates times ``--scale``.
* ``--hw PROFILE --dir DIR`` (or ``--target``): the devices as they are,
  modelled by a (calibrated) profile -- e.g. ``hwprofiles/local.yaml`` from
  ``make calibrate``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.table import Table

from hwprofiles import HardwareProfile, load_profile
from kvtier.cli.validate_args import add_run_args, check_args
from kvtier.cli.validate_designs import (
    footprint,
    plan_for_devices,
    report_designs,
    run_designs,
)
from kvtier.contracts.console import make_console
from kvtier.contracts.plan import write_plan
from kvtier.contracts.records import Records
from real._signals import phase
from real.crosscheck import describe, fio_cross_check
from real.engine import REPLAY_ENGINES
from real.errors import RealError
from real.profile_yaml import scaled_profile
from real.targets import Limits, Target
from real.validate import (
    TARGET_MEDIAN_ERROR,
    THROTTLE_IOPS_STEP_S,
    compare,
    engine_costs,
    regime_plan,
    with_engine_costs,
    write_report,
)
from sim.executor import simulate

REGIME_DEVICE_BYTES = 320 << 20  # the regime plan's steps are capped at 256 MiB per device


def add_cli(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "validate",
        help="run a plan in the simulator and on real (or emulated) SSDs; report the error",
        description=__doc__.split("\n\n")[0],
    )
    dev = p.add_mutually_exclusive_group(required=True)
    dev.add_argument("--emulate", metavar="PROFILE", help="emulate the profile's SSDs (root)")
    dev.add_argument("--pace", metavar="PROFILE", help="files paced in user space to PROFILE")
    dev.add_argument("--hw", metavar="PROFILE", help="model the devices with this profile")
    add_run_args(p)
    p.add_argument(
        "--engine",
        default="auto",
        choices=REPLAY_ENGINES,
        help="I/O engine: auto (fio for a one-wave step plan, else python), fio, python, ...",
    )
    p.add_argument("--out", default="results/real", help="output directory (locked while running)")
    p.add_argument("--force", action="store_true", help="overwrite results already in --out")
    p.add_argument(
        "--informational",
        action="store_true",
        help="exit 0 even when a regime misses the median-error target",
    )
    p.add_argument(
        "--install-fio",
        action="store_true",
        help="install fio with the distribution's package manager if missing (root)",
    )
    p.add_argument(
        "--no-engine-costs",
        action="store_true",
        help="model with the profile's own latencies and software costs (no replayer measurement)",
    )
    p.add_argument(
        "--no-fio", action="store_true", help="skip the fio replay of the bandwidth steps"
    )
    p.add_argument(
        "--designs",
        default="default-matched,swarm-ablations",
        metavar="SCENARIOS",
        help="also replay these swarm scenarios' design plans, scaled down ('none' skips)",
    )
    p.add_argument(
        "--design-variants",
        default="",
        metavar="NAMES",
        help="comma-separated variants of --designs, or 'all' (default: the key designs)",
    )
    p.set_defaults(handler=cmd_validate)


@dataclass
class Devices:
    """The devices a validation runs on and the profile that models them.

    ``targets``: ready-made targets (emulated loop devices) or None, in which
    case data files are created in ``where``; ``limits``/``pacing``: what the
    replayer holds them to; ``throttled``: a context the replay runs in (the
    emulation's blkio group).
    """

    profile: HardwareProfile
    where: str
    targets: dict[str, Target] | None = None
    limits: Limits | None = None
    pacing: bool = False
    throttled: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    @property
    def kernel_throttled(self) -> bool:
        """Emulated devices held by the kernel's blkio throttle (not user-space pacing)."""
        return self.targets is not None and any(
            not t.limits.unlimited and not t.pacing for t in self.targets.values()
        )

    @contextlib.contextmanager
    def prepared(self, plan: pa.Table, seed: int, log, unpaced: bool = False) -> Iterator[dict]:
        """Targets holding ``plan``'s data; ``unpaced`` drops the limits (measurements)."""
        from real.datafile import fill_targets, prepare_targets

        if self.targets is not None:
            targets = self.targets
            if unpaced:
                targets = {k: dataclasses.replace(t, pacing=False) for k, t in targets.items()}
            fill_targets(targets, plan, seed)
            yield targets
            return
        pace = self.pacing and not unpaced
        files = prepare_targets(
            plan, self.where, seed=seed, limits=self.limits if pace else None, pacing=pace, log=log
        )
        try:
            yield files.targets
        finally:
            files.cleanup()


@contextlib.contextmanager
def devices(
    args: argparse.Namespace, console, size: int = REGIME_DEVICE_BYTES
) -> Iterator[Devices]:
    """The devices of ``args``; emulated ones hold ``size`` bytes each."""
    if args.n < 1:
        raise RealError(f"--n must be >= 1, got {args.n}")
    if args.emulate:
        from real.emulate import emulate

        meter = "replayer" if args.no_fio else "fio"  # what measures the devices' rates
        with emulate(
            args.emulate,
            args.n,
            where=args.dir,
            size=size,
            out=args.out,
            scale=args.scale,
            meter=meter,
        ) as es:
            console.print(es.note)
            limits = es.targets[0].limits
            yield Devices(
                es.profile,
                args.dir,
                targets={t.node: t for t in es.targets},
                limits=limits,
                pacing=es.mode == "pacing",
                throttled=es.joined,
            )
        return
    if args.pace:
        base = load_profile(args.pace)
        if len(base.ssd_names) < args.n:
            raise RealError(f"profile '{base.name}' has fewer than {args.n} SSDs")
        scale = args.scale or min(1.0, 0.4e9 / (args.n * base.ssds[0].read_gbps * 1e9))
        profile = scaled_profile(base, args.n, scale, 1 << 30)
        console.print(
            f"user-space pacing: {args.n} files in {args.dir}, each held to "
            f"{profile.ssds[0].read_gbps * 1e3:.0f} MB/s and {profile.ssds[0].read_iops:,.0f} "
            f"read IOPS ({scale:.4g} x {base.ssds[0].model})"
        )
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        yield Devices(profile, args.dir, limits=limits_of(profile), pacing=True)
        return
    yield Devices(load_profile(args.hw), args.dir)


def limits_of(profile: HardwareProfile) -> Limits:
    g = profile.ssds[0]
    return Limits(
        read_bps=int(g.read_gbps * 1e9),
        write_bps=int(g.write_gbps * 1e9),
        read_iops=int(g.read_iops),
        write_iops=int(g.write_iops),
    )


def run_validation(
    dev: Devices, args: argparse.Namespace, console
) -> tuple[dict[str, Any], Records, Records]:
    from real.replay import replay, sigterm_as_interrupt

    plan, steps = regime_plan(
        dev.profile,
        regimes=tuple(args.regimes),
        steps_per_regime=args.steps,
        step_s=args.step_s,
        n_ssd=args.n,
        max_bytes_per_device=256 * (1 << 20),
        iops_step_s=THROTTLE_IOPS_STEP_S if dev.kernel_throttled else 0.0,
    )
    sim = simulate(plan, dev.profile)
    with (
        sigterm_as_interrupt(),
        dev.prepared(plan, args.seed, console.print) as targets,
        dev.throttled(),
    ):
        phase("replay")
        real = replay(plan, targets, seed=args.seed, engine=args.engine)
        fio = {"skipped": "--no-fio"}
        if not args.no_fio:
            fio = fio_cross_check(plan, steps, real, targets, Path(args.out) / "fio")
    return compare(sim, real, steps) | {"plan": plan, "fio": fio}, sim, real


def cmd_validate(args: argparse.Namespace) -> int:
    from kvtier.contracts.outdir import claim

    check_args(args)
    with claim(args.out, force=args.force, label=f"validate seed {args.seed}"):
        return _validate(args)


def load_note(load: tuple[float, ...], cores: int) -> str | None:
    """A warning when the machine's 1-minute load ``load[0]`` exceeds its ``cores``: the
    replayer is one thread, and its CPU-bound steps (IOPS, the small designs) then
    measure its share of the machine, not the devices or the model; None otherwise."""
    if load[0] <= cores:
        return None
    return (
        f"[yellow]load {load[0]:.1f} on {cores} cores[/]: the replay loop shares its core, "
        "so its CPU-bound steps (IOPS, small designs) measure the machine's load too"
    )


def _validate(args: argparse.Namespace) -> int:
    console = make_console()
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    designs = plan_for_devices(args, console)
    size = REGIME_DEVICE_BYTES
    if designs is not None:  # emulated devices hold every design's footprint too
        size = max(size, -(-footprint(designs.plans) // (1 << 20)) << 20)
    with devices(args, console, size) as dev:
        costs = None
        if not args.no_engine_costs:
            costs = engine_costs(dev, args.engine, args.n)  # outside the throttle: see there
            dev = dataclasses.replace(dev, profile=with_engine_costs(dev.profile, costs))
            console.print(
                f"replayer on this machine ({args.n} devices): QD1 4 KiB read "
                f"{costs['read_latency_us']:.1f} us, write {costs['write_latency_us']:.1f} us, "
                f"{costs['per_io_us']:.1f} us/I/O at QD64, {costs['round_us']:.0f} us a "
                "round (the model's latencies, per-I/O and per-op CPU cost, one core)"
            )
        result, sim, real = run_validation(dev, args, console)
        t1 = time.perf_counter()
        if designs is not None:
            designs.table, designs.records, designs.costs = run_designs(
                dev, designs.plans, seed=args.seed, engine=args.engine, costs=costs
            )
        designs_s = time.perf_counter() - t1
        profile = dev.profile
    wall_s = time.perf_counter() - t0
    load = (load0, os.getloadavg())
    note = load_note(max(load0, load[1]), os.cpu_count() or 1)
    if note:
        console.print(note)
    ok = report_regimes(result, sim, real, args, profile, costs, wall_s, console, load)
    if designs is not None:
        ok &= report_designs(designs, args, profile, size, designs_s + designs.plan_s, console)
    return 0 if ok else 1


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


def report_regimes(
    result, sim, real, args, profile, costs, wall_s: float, console, load=None
) -> bool:
    """Write and print the regime validation; True when every device's bytes matched and
    the IOPS/bandwidth regimes met their target (or the run is ``--informational``).
    ``load``: the 1/5/15-minute load averages at the run's start and end, recorded."""
    from kvtier.contracts.provenance import provenance
    from real.replay import write_results

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_plan(result["plan"], out / "plan.parquet")
    sim.write(out / "sim")
    write_results(real, out / "real")
    meta = provenance(
        seed=args.seed,
        profile=dataclasses.asdict(profile),
        devices={"emulate": args.emulate, "pace": args.pace, "hw": args.hw, "n": args.n},
        engine=real.stats.get("engine_note"),
        engine_costs=costs,
        notes=real.stats.get("notes", []),
        fio_cross_check=result["fio"],
        wall_s=wall_s,
        loadavg=load and {"start": list(load[0]), "end": list(load[1]), "cores": os.cpu_count()},
    )
    write_report(result, out, meta)
    console.print(error_table(result, profile))
    ok_bytes = bool(result["bytes"]["match"].all())
    line, ok_target = verdict(result, args.informational)
    console.print(
        f"per-device bytes and I/Os sim = real: {'yes' if ok_bytes else '[red]NO[/]'};  {line}"
    )
    console.print(describe(result["fio"]))
    console.print(f"report: {out}/report.json, validation.png, steps/ops Parquet")
    return ok_bytes and ok_target


def error_table(result: dict[str, Any], profile: HardwareProfile) -> Table:
    t = Table(title=f"Simulated vs real, per step ({profile.name})")
    cols = (
        "regime",
        "steps",
        "real GB/s/SSD",
        "sim GB/s/SSD",
        "median |err|",
        "p90",
        "max",
        "bias",
    )
    for c in cols:
        t.add_column(c, justify="left" if c == "regime" else "right")
    for regime, r in result["by_regime"].items():
        t.add_row(
            regime,
            str(r["steps"]),
            f"{r['real_gbps']:.3f}",
            f"{r['sim_gbps']:.3f}",
            f"{r['median']:.1%}",
            f"{r['p90']:.1%}",
            f"{r['max']:.1%}",
            f"{r['bias']:+.1%}",
        )
    return t

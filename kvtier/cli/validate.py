"""The ``kvtier real validate`` command: set up devices, run the plan in the
simulator and for real, print the error table (see :mod:`real.validate`).

Here are its flags and what it prints; what it runs is :mod:`kvtier.compare`
(:func:`kvtier.compare.validation.validate`: the devices, the regime plan, then
each KV design's plan in both backends).

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
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from rich.table import Table

from hwprofiles import HardwareProfile
from kvtier.cli.validate_args import add_run_args, check_args
from kvtier.compare.designs import DESIGN_REPEATS, DesignRun, write_design_run
from kvtier.compare.metrics import WARMUP_STEPS
from kvtier.compare.regimes import verdict, write_regimes
from kvtier.compare.serving import ServingReplay, ServingResult, write_serving
from kvtier.compare.validation import Validation, validate
from kvtier.contracts.console import make_console
from kvtier.contracts.validate import int_arg
from real.crosscheck import describe
from real.engine import REPLAY_ENGINES


def add_validate(group: argparse._SubParsersAction) -> None:
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
    p.add_argument(
        "--design-repeats",
        type=int_arg(1),
        default=DESIGN_REPEATS,
        metavar="R",
        help=f"replays of each design, interleaved (default {DESIGN_REPEATS}): the median "
        "and the noise that decides which designs are tied",
    )
    p.add_argument(
        "--serving",
        default="none",
        metavar="DESIGN",
        help="also replay the SSD I/O of a short serving run of this serving design "
        "(e.g. pool; ~20 s more; default none)",
    )
    p.add_argument(
        "--serving-requests",
        type=int_arg(1),
        default=ServingReplay.requests,
        metavar="N",
        help=f"requests of the serving run (default {ServingReplay.requests})",
    )
    p.set_defaults(handler=cmd_validate)


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
    run = validate(
        emulate=args.emulate,
        pace=args.pace,
        hw=args.hw,
        n=args.n,
        where=args.dir,
        out=args.out,
        scale=args.scale,
        regimes=tuple(args.regimes),
        steps=args.steps,
        step_s=args.step_s,
        seed=args.seed,
        engine=args.engine,
        fio=not args.no_fio,
        engine_costs_measured=not args.no_engine_costs,
        designs=args.designs,
        design_variants=args.design_variants,
        design_repeats=args.design_repeats,
        serving=serving_spec(args),
        log=console.print,
    )
    note = load_note(max(run.load[0], run.load[1]), os.cpu_count() or 1)
    if note:
        console.print(note)
    ok = report_regimes(run, args, console)
    if run.designs is not None:
        wall_s = run.designs_s + run.designs.plan_s
        ok &= report_designs(run.designs, args, run.profile, run.size, wall_s, console)
    if run.serving is not None:
        ok &= report_serving(run.serving, args, console)
    return 0 if ok else 1


def serving_spec(args: argparse.Namespace) -> ServingReplay | None:
    """The serving run ``--serving`` and ``--serving-requests`` name (None: none)."""
    if args.serving == "none":
        return None
    return ServingReplay(design=args.serving, requests=args.serving_requests)


def report_serving(run: ServingResult, args: argparse.Namespace, console) -> bool:
    """Write and print the serving replay; True when every device's bytes and I/Os match."""
    out = Path(args.out) / "serving"
    report = write_serving(run, out, {"devices": device_flags(args), "seed": args.seed})
    sp = run.spec
    t = Table(
        title=f"Serving run's I/O, simulated vs real: {sp.design}, {sp.requests} requests "
        f"(arrivals in {sp.window_s:g} s), {sp.block}-token blocks, {sp.model}, "
        f"{sp.ssd_gib:g} GiB over the SSDs; per-op time error by op kind"
    )
    for c in ("op kind", "ops", "MB", "I/Os", "sim s", "real s", "median |err|", "p90", "bias"):
        t.add_column(c, justify="left" if c == "op kind" else "right")
    for kind, k in report["by_kind"].items():
        t.add_row(
            kind,
            str(k["ops"]),
            f"{k['bytes'] / 1e6:,.1f}",
            f"{k['n_ios']:,}",
            f"{k['sim_s']:.3f}",
            f"{k['real_s']:.3f}",
            f"{k['median']:.1%}",
            f"{k['p90']:.1%}",
            f"{k['bias']:+.1%}",
        )
    console.print(t)
    b = run.result["bytes"]
    for _, row in b.iterrows():
        console.print(
            f"  {row['device']}: read {row['bytes_read_real']:,} B, written "
            f"{row['bytes_written_real']:,} B, {row['n_ios_real']:,} I/Os; sim = real: "
            + ("yes" if row["match"] else "[red]NO[/]")
        )
    console.print(f"serving report: {out}/serving.json, ops.parquet")
    return bool(report["bytes_match"])


def device_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The devices as the flags named them (recorded in the reports)."""
    return {"emulate": args.emulate, "pace": args.pace, "hw": args.hw, "n": args.n}


def report_regimes(run: Validation, args: argparse.Namespace, console) -> bool:
    """Write and print the regime validation; True when every device's bytes matched and
    the IOPS/bandwidth regimes met their target (or the run is ``--informational``)."""
    out = Path(args.out)
    write_regimes(
        run.result,
        run.sim,
        run.real,
        out,
        seed=args.seed,
        profile=run.profile,
        devices=device_flags(args),
        costs=run.costs,
        wall_s=run.wall_s,
        load=run.load,
    )
    console.print(error_table(run.result, run.profile))
    ok_bytes = bool(run.result["bytes"]["match"].all())
    line, ok_target = verdict(run.result, args.informational)
    console.print(
        f"per-device bytes and I/Os sim = real: {'yes' if ok_bytes else '[red]NO[/]'};  {line}"
    )
    console.print(describe(run.result["fio"]))
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


# -- the designs ------------------------------------------------------------------------------


def report_designs(
    run: DesignRun,
    args: argparse.Namespace,
    profile: HardwareProfile,
    size: int,
    wall_s: float,
    console,
) -> bool:
    """Write and print the per-design table; True when sim and real read the same bytes."""
    out = Path(args.out) / "designs"
    w = run.scenario.workload
    devices = device_flags(args)
    report = write_design_run(
        run, out, profile=profile, devices=devices, size=size, seed=args.seed, wall_s=wall_s
    )
    title = (
        f"Designs, simulated vs real ({profile.name}): {w.model}, {w.context_tokens:,}-token "
        f"prefix, batch {w.batch}, {w.layers} layers, {w.steps - WARMUP_STEPS} measured "
        f"steps; real: the median of {args.design_repeats} interleaved replays"
    )
    if run.costs is not None:
        c = run.costs
        how = "paced" if c.get("paced") else "batched"
        console.print(
            f"designs modelled with the replayer's {how} path: {c['per_io_us']:.1f} us/I/O "
            f"at QD64 ({c.get('per_io_net_us', c['per_io_us']):.1f} net of its rounds), "
            f"{c.get('round_us', 0.0):.0f} us a round, QD1 read {c['read_latency_us']:.1f} us"
            + (
                f"; devices paced at x{c['pace_scale']:.2f} of the emulated rates"
                if c.get("pace_scale", 1.0) < 1.0
                else ""
            )
        )
    console.print(designs_table(run.table, title))
    for line in ranking_lines(report["ranking"]):
        console.print(line)
    for name, why in run.skipped.items():
        console.print(f"not replayed: {name} ({why})")
    console.print(f"designs: {wall_s:.1f} s (planning {run.plan_s:.1f} s); report: {out}/")
    return bool(report["bytes_match"])


def designs_table(table: pd.DataFrame, title: str) -> Table:
    """The per-design comparison as a rich table."""
    t = Table(title=title)
    cols: list[tuple[str, str, Callable[[Any], str]]] = [
        ("design", "design", str),
        ("sim ms/step", "sim_step_ms", lambda v: f"{v:,.1f}"),
        ("real ms/step", "real_step_ms", lambda v: f"{v:,.1f}"),
        ("noise +-", "noise", lambda v: f"{v:.1%}"),
        ("err", "step_error", lambda v: f"{v:+.1%}"),
        ("I/O-bound", "real_bound", lambda v: f"{v:.0%}"),
        ("sim GB/s", "sim_read_gbps", lambda v: f"{v:.3f}"),
        ("real GB/s", "real_read_gbps", lambda v: f"{v:.3f}"),
        ("err ", "gbps_error", lambda v: f"{v:+.1%}"),
        ("MB read", "real_bytes_read", lambda v: f"{v / 1e6:,.1f}"),
        ("I/Os", "real_n_ios", lambda v: f"{v:,}"),
        ("sim = real", "bytes_match", lambda v: "yes" if v else "[red]NO[/]"),
    ]
    for header, _, _ in cols:
        t.add_column(header, justify="left" if header == "design" else "right")
    for _, row in table.iterrows():
        t.add_row(*[fmt(row[key]) for _, key, fmt in cols])
    return t


def ranking_lines(rank: dict[str, Any]) -> list[str]:
    """Both orders, fastest first (``~``: tied within the measured noise), Kendall's
    tau over every pair and over the pairs the noise can separate, and the band."""
    band = rank.get("noise_band", 0.0)
    sep = rank.get("separable_pairs", 0)
    n_pairs = sep + len(rank.get("tied", []))
    tau_sep = rank.get("kendall_tau_separable", math.nan)
    return [
        "by simulated step time: " + rank.get("sim_order_ties", " < ".join(rank["sim_order"])),
        "by measured step time:  " + " < ".join(rank["real_order"]),
        f"noise band (largest design's +- half-range over its repeats): {band:.1%}; "
        f"tied in the model within it: {n_pairs - sep} of {n_pairs} pairs",
        f"Kendall's tau over the {sep} separable pairs {tau_sep:.3f} "
        f"({rank.get('discordant', 0)} swapped; same order: "
        + ("yes" if rank.get("separable_same_order", rank["same_order"]) else "no")
        + f"); over all pairs {rank['kendall_tau']:.3f}",
    ]

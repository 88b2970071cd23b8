"""``kvtier sweep``: the cartesian product of any number of factors, Parquet plus PNG plots."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pandas as pd
from rich.progress import Progress

from hwprofiles import load_profile
from kvtier.cli.executor_args import add_executor_args, executor_of
from kvtier.cli.sensitivity import add_sensitivity_args, chosen
from kvtier.cli.sensitivity import report as sensitivity_report
from kvtier.cli.tables import frame_table, print_tables
from kvtier.contracts.console import make_console
from kvtier.contracts.outdir import claim, run_id
from kvtier.contracts.provenance import provenance
from kvtier.contracts.validate import check_out_dir, int_arg
from sim.config import ConfigError, load_scenario
from sim.limits import check_scenario, check_sweep_point
from sim.sweep import HW, parse_factor, sweep, sweep_points

DEFAULT_METRICS = (
    "tokens_per_s",
    "ssd_gbps",
    "fetch_gbps",
    "io_ms_per_step",
    "fetch_ms_per_step",
    "read_bytes_per_step",
    "recall",
    "matched_tokens_per_s",  # with match_recall: tokens/s at matched recall
    "match_scale",
    "dram_hit_rate",
    "select_ms",
    "index_mb_per_layer",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a scenario over the cartesian product of factors (writes Parquet and PNG plots)",
        description="Examples: --factor ssds=1,2,4,8 | --factor ssds=1,2,4 --factor "
        "context_tokens=4096,8192 (every combination) | --factor batch=1,4,8 | --factor "
        "sparsity=0.02,0.05,0.1,0.2 | --factor hw=h20-8ssd,h20-8ssd-900p.  "
        "The older form --factor ssds --values 1,2,4,8 (one factor) works too.",
    )
    p.add_argument("--scenario", default="default", help="scenario name or YAML path")
    p.add_argument("--hw", help="hardware profile (default: h20-8ssd); not with a factor 'hw'")
    p.add_argument(
        "--factor",
        action="append",
        help="NAME=V1,V2,... : a workload field (or 'hw') and its values; repeat for more factors",
    )
    p.add_argument("--values", help="comma-separated values of a single --factor NAME")
    p.add_argument("--steps", type=int_arg(1), help="override the number of decode steps")
    add_executor_args(p)
    add_sensitivity_args(p)
    p.add_argument("--out", default="results/sweeps", help="output directory")
    p.add_argument(
        "--force", action="store_true", help="overwrite another run's results in the output"
    )
    p.set_defaults(handler=cmd_sweep)


def parse_factors(texts: list[str], values: str | None) -> dict[str, list[Any]]:
    """``--factor`` arguments (and the one-factor ``--values``) -> name -> raw values."""
    if values is not None and len(texts) != 1:
        raise ConfigError("--values goes with exactly one --factor NAME")
    factors: dict[str, list[Any]] = {}
    for text in texts:
        name, vals = parse_factor(text, values)
        if name in factors:
            raise ConfigError(f"--factor {name}: given twice")
        factors[name] = vals
    return factors


def cmd_sweep(args: argparse.Namespace) -> int:
    console = make_console()
    check_out_dir(args.out)  # before the work, not after it
    cfg = load_scenario(args.scenario)
    if args.steps is not None:
        if not hasattr(cfg.workload, "steps"):
            raise ConfigError(f"--steps: a {cfg.workload.kind} scenario has no decode steps")
        cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, steps=args.steps))
    if args.sensitivity:
        return _sensitivity(console, args, cfg)
    chosen(args, cfg, None)  # --assumptions without --sensitivity
    if not args.factor:
        raise ConfigError("--factor: give at least one NAME=V1,V2,... (or --sensitivity)")
    factors = parse_factors(args.factor, args.values)
    if HW in factors and args.hw is not None:
        raise ConfigError(
            f"--hw {args.hw} and --factor {HW}=...: the factor names every profile swept; "
            "give one or the other"
        )
    todo = sweep_points(cfg, factors)  # fails fast on a bad factor or value
    hws = {hw: load_profile(hw) for hw in factors.get(HW, [])}  # fail fast on a bad name
    profile = load_profile(factors[HW][0] if HW in factors else args.hw or "h20-8ssd")
    for point, at in todo:  # what a profile cannot hold or run, refused before simulating
        check_sweep_point(at, hws.get(point.get(HW, ""), profile), point)
        check_scenario(at, hws.get(point.get(HW, ""), profile))
    out = Path(args.out) / cfg.name / ("hw" if HW in factors else profile.name)
    hw = {name: dataclasses.asdict(p) for name, p in hws.items()} or dataclasses.asdict(profile)
    run = run_id(cmd="sweep", scenario=cfg.to_dict(), factors=factors, hw=hw)
    label = f"sweep {cfg.name} over {', '.join(factors)}, seed {cfg.seed}"
    executor = executor_of(args)  # Ray missing or unreachable: refused before the work
    with claim(out, force=args.force, run=run, label=label):  # one run per directory
        return _sweep_into(console, executor, cfg, profile, factors, len(todo), out)


def _sensitivity(console, args: argparse.Namespace, cfg) -> int:
    """``--sensitivity``: the scenario's assumptions at their range ends, no factors."""
    if args.factor or args.values is not None:
        raise ConfigError("--factor and --sensitivity: a sensitivity run varies the "
                          "assumptions, not factors; give one or the other")  # fmt: skip
    profile = load_profile(args.hw or "h20-8ssd")
    chosen(args, cfg, profile)  # nothing to vary: refused before the work
    check_scenario(cfg, profile)
    out = Path(args.out) / cfg.name / profile.name / "sensitivity"
    run = run_id(cmd="sweep-sensitivity", scenario=cfg.to_dict(), hw=dataclasses.asdict(profile))
    executor = executor_of(args)
    with claim(out, force=args.force, run=run, label=f"sensitivity of {cfg.name}"):
        sensitivity_report(console, args, cfg, profile, executor, out)
    return 0


def _sweep_into(console, executor, cfg, profile, factors, points: int, out: Path) -> int:
    """Run the sweep into ``out`` (claimed): Parquet, CSV, provenance JSON and plots."""
    names = list(factors)
    console.print(f"[bold]kvtier sweep[/bold]: {cfg.name}, {points} points of {factors}")
    with Progress(console=console) as bar:
        task = bar.add_task("points", total=points)
        df = sweep(
            cfg,
            profile,
            factors,
            progress=lambda done, total: bar.update(task, completed=done),
            executor=executor,
        )
    out.mkdir(parents=True, exist_ok=True)
    stem = "sweep-" + "-".join(names)
    df.to_parquet(out / f"{stem}.parquet", index=False)
    df.to_csv(out / f"{stem}.csv", index=False)
    pngs = _plots(df, names, out / "plots", f"{cfg.name}: {' x '.join(names)}")
    meta = provenance(
        seed=cfg.seed,
        scenario=cfg.to_dict(),
        factors=factors,
        hw=profile.name,
        hw_source=profile.source_file,  # the file swept: a path given wins over a name
        executor=executor.describe(),  # what ran the points (results do not depend on it)
    )
    (out / f"{stem}.json").write_text(json.dumps(meta, indent=2, default=str))
    shown = ("tokens_per_s", "ssd_gbps", "fetch_gbps", "io_ms_per_step", "recall")
    shown += ("match_scale", "match_recall", "matched_tokens_per_s")  # with match_recall
    cols = [c for c in ("variant", *names, *shown) if c in df.columns]
    print_tables(console, frame_table(df[cols], f"{cfg.name}: {' x '.join(names)}"))
    print_sweep_figures(console, cfg, df, names)
    console.print(f"written: {out}/{stem}.parquet, {len(pngs)} plots in {out}/plots")
    return 0


def print_sweep_figures(console, cfg, df: pd.DataFrame, names: list[str]) -> None:
    """The seed's figures over factors (the scenario's ``sweep_figures``) beside the
    sweep's values, with the ratio; figures whose points the sweep did not run are
    counted, not shown (:mod:`sim.scenarios.seedref`)."""
    from sim.config import sweep_keys
    from sim.scenarios.seedref import (
        SWEEP,
        compare_sweep,
        gap_lines,
        load_seed_figures,
        seed_tables,
    )

    keys = sweep_keys(type(cfg.workload))
    figs = load_seed_figures(cfg.source_file, ConfigError, SWEEP, keys) if cfg.source_file else None
    if figs is None:
        return
    rows = compare_sweep(figs, df, tuple(dict.fromkeys([*names, HW])), cfg.workload)
    ran = [r for r in rows if r.kvtier is not None]
    if ran:
        print_tables(console, seed_tables(figs, ran, f"{cfg.name} over {' x '.join(names)}"))
        for line in gap_lines(ran):
            console.print(line, markup=False)
    missed = list(dict.fromkeys(r.figure.name for r in rows if r.kvtier is None))
    if missed:
        console.print(
            f"{len(missed)} of the seed's {len(figs.figures)} figures over factors need "
            f"points this sweep did not run: {'; '.join(missed)}",
            markup=False,
        )


def _plots(df: pd.DataFrame, names: list[str], out: Path, title: str) -> list[Path]:
    """One line per variant against the first factor; with more factors, one
    line per (variant, values of the others)."""
    from analysis.plots import plot_sweep

    if len(names) > 1:
        rest = df[names[1:]].astype(str).agg(", ".join, axis=1)
        df = df.assign(variant=df["variant"].astype(str) + " | " + rest)
    return plot_sweep(df, names[0], DEFAULT_METRICS, out, title=title)

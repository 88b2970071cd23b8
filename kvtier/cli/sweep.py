"""``kvtier sweep``: one factor, many values, Parquet plus PNG plots."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.progress import Progress

from hwprofiles import load_profile
from kvtier.console import make_console
from kvtier.provenance import provenance
from sim.config import load_scenario
from sim.sweep import parse_values, sweep

DEFAULT_METRICS = (
    "tokens_per_s",
    "ssd_gbps",
    "fetch_gbps",
    "io_ms_per_step",
    "fetch_ms_per_step",
    "read_bytes_per_step",
    "recall",
    "dram_hit_rate",
    "select_ms",
    "index_mb_per_layer",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a scenario over the values of one factor (writes Parquet and PNG plots)",
        description="Examples: --factor ssds --values 1,2,4,8 | --factor context_tokens "
        "--values 8192,32768,131072 | --factor batch --values 1,4,8 | --factor sparsity "
        "--values 0.02,0.05,0.1,0.2 | --factor hw --values h20-8ssd,h20-8ssd-900p",
    )
    p.add_argument("--scenario", default="default", help="scenario name or YAML path")
    p.add_argument("--hw", default="h20-8ssd", help="hardware profile (ignored for --factor hw)")
    p.add_argument("--factor", required=True, help="workload field to vary, or 'hw'")
    p.add_argument("--values", required=True, help="comma-separated values")
    p.add_argument("--steps", type=int, help="override the number of decode steps")
    p.add_argument("--jobs", type=int, help="worker processes (default: CPU count)")
    p.add_argument("--out", default="results/sweeps", help="output directory")
    p.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    import dataclasses

    from sim.config import ConfigError

    console = make_console()
    cfg = load_scenario(args.scenario)
    if args.steps is not None:
        if args.steps <= 0:
            raise ConfigError(f"--steps must be > 0, got {args.steps}")
        cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, steps=args.steps))
    values = parse_values(args.factor, args.values, cfg)
    if args.factor == "hw":
        for v in values:
            load_profile(v)  # fail fast on a bad name
    profile = load_profile(args.hw if args.factor != "hw" else values[0])
    out = Path(args.out) / cfg.name / (profile.name if args.factor != "hw" else "hw")
    console.print(f"[bold]kvtier sweep[/bold]: {cfg.name}, {args.factor} = {values}")
    with Progress(console=console) as bar:
        task = bar.add_task(f"{args.factor} points", total=len(values))
        df = sweep(
            cfg,
            profile,
            args.factor,
            values,
            args.jobs,
            lambda done, total: bar.update(task, completed=done),
        )
    out.mkdir(parents=True, exist_ok=True)
    stem = f"sweep-{args.factor}"
    df.to_parquet(out / f"{stem}.parquet", index=False)
    df.to_csv(out / f"{stem}.csv", index=False)
    from analysis.plots import plot_sweep

    factor_col = "hw" if args.factor == "hw" else args.factor
    pngs = plot_sweep(
        df, factor_col, DEFAULT_METRICS, out / "plots", title=f"{cfg.name}: {args.factor}"
    )
    meta = provenance(
        seed=cfg.seed, scenario=cfg.to_dict(), factor=args.factor, values=values, hw=profile.name
    )
    (out / f"{stem}.json").write_text(json.dumps(meta, indent=2, default=str))
    cols = [
        c
        for c in (
            "variant",
            factor_col,
            "tokens_per_s",
            "ssd_gbps",
            "fetch_gbps",
            "io_ms_per_step",
            "recall",
        )
        if c in df.columns
    ]
    console.print(df[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    console.print(f"written: {out}/{stem}.parquet, {len(pngs)} plots in {out}/plots")
    return 0

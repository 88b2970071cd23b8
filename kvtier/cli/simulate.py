"""``kvtier sim``: run a scenario on a hardware profile and print the comparison."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from hwprofiles import load_profile
from kvtier.cli.executor_args import add_executor_args, executor_of
from kvtier.cli.sensitivity import add_sensitivity_args, chosen
from kvtier.cli.sensitivity import report as sensitivity_report
from kvtier.cli.tables import decode_title, print_tables, rows_table
from kvtier.contracts.console import make_console
from kvtier.contracts.outdir import claim, run_id
from kvtier.contracts.plan import PlanError, read_plan
from kvtier.contracts.units import fmt_bytes
from kvtier.contracts.validate import check_out_dir, check_plan_rows, int_arg
from sim.config import ConfigError, load_scenario
from sim.executor import simulate
from sim.factors import expand_matrix
from sim.limits import check_scenario, overload_warnings
from sim.registry import WORKLOADS
from sim.runner import run

# a plain kvtier sim runs the scenario's variants one after another in this process (one
# run, whose records it writes); only --sensitivity's reruns go to an executor
SIM_RUNS = "--sensitivity's reruns; a plain sim is one run in this process"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="simulate a scenario (or a plan file) on a hardware profile")
    p.add_argument("--hw", default="h20-8ssd", help="hardware profile name or YAML path")
    p.add_argument("--scenario", help="scenario name or YAML path (default: default)")
    p.add_argument("--out", default="results", help="output directory (default: results)")
    p.add_argument("--seed", type=int_arg(0), help="override the scenario's seed")
    p.add_argument("--steps", type=int_arg(1), help="override the number of decode steps")
    p.add_argument("--trace", action="store_true", help="also write Perfetto timelines")
    p.add_argument("--plan", help="simulate this transfer-plan Parquet file instead")
    p.add_argument(
        "--force", action="store_true", help="overwrite another run's results in the output"
    )
    add_sensitivity_args(p)
    add_executor_args(p, SIM_RUNS)
    p.set_defaults(handler=cmd_sim)


def cmd_sim(args: argparse.Namespace) -> int:
    console = make_console()
    profile = load_profile(args.hw)
    check_out_dir(args.out)  # before the work, not after it
    if args.plan:
        _plan_only(args)
        return _sim_plan(console, args, profile)
    cfg = load_scenario(args.scenario or "default")
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    if args.steps is not None:
        if args.steps <= 0:
            raise ConfigError(f"--steps must be > 0, got {args.steps}")
        if not hasattr(cfg.workload, "steps"):
            raise ConfigError(f"--steps: a {cfg.workload.kind} scenario has no decode steps")
        cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, steps=args.steps))
    chosen(args, cfg, profile)  # --sensitivity with nothing to vary: refused before the work
    ran_by = {
        "--executor": args.executor != "local",
        "--jobs": args.jobs,
        "--address": args.address,
    }
    for flag, given in ran_by.items():
        if given and not args.sensitivity:
            raise ConfigError(
                f"{flag}: places --sensitivity's reruns; a plain kvtier sim is one run in "
                f"this process, so give {flag} with --sensitivity (or use kvtier sweep)"
            )
    executor = executor_of(args) if args.sensitivity else None
    check_scenario(cfg, profile)  # what the profile cannot hold, refused before simulating
    for line in overload_warnings(cfg, profile):  # what it can hold but not serve in time
        console.print(f"[yellow]warning[/yellow]: {line}")
    out = Path(args.out) / cfg.name / profile.name
    run = run_id(cmd="sim", scenario=cfg.to_dict(), hw=dataclasses.asdict(profile), t=args.trace)
    label = f"sim {cfg.name} on {profile.name}, seed {cfg.seed}"
    with claim(out, force=args.force, run=run, label=label):  # one run per directory
        status = _sim_scenario(console, args, cfg, profile, out)
        if executor is not None:
            sensitivity_report(console, args, cfg, profile, executor, out)
        return status


def _plan_only(args: argparse.Namespace) -> None:
    """``--plan`` simulates the file as it is: a flag that shapes a scenario is refused
    with it, not ignored."""
    given = {"--scenario": args.scenario, "--seed": args.seed, "--steps": args.steps}
    given["--trace"] = args.trace or None
    given["--sensitivity"] = args.sensitivity or None
    for flag, value in given.items():
        if value is not None:
            raise ConfigError(
                f"--plan {args.plan} and {flag}: a plan file is simulated as it is "
                f"({flag} applies to a scenario); give one or the other"
            )


def _sim_scenario(console: Console, args: argparse.Namespace, cfg, profile, out: Path) -> int:
    """Run scenario ``cfg`` on ``profile`` into ``out`` (claimed) and print its tables."""
    console.print(
        f"[bold]kvtier sim[/bold]: scenario [cyan]{cfg.name}[/cyan] on "
        f"[cyan]{profile.name}[/cyan] ({cfg.description}), seed {cfg.seed}"
    )
    kind = WORKLOADS.entry(cfg.workload.kind).kind
    with _progress(console) as bar:
        tasks: dict[str, int] = {}
        if kind.closed_loop:  # many small closed-loop runs: one bar
            one = bar.add_task(f"{cfg.workload.kind} simulations", total=len(expand_matrix(cfg)))

            def update(name: str, done: int, total: int) -> None:
                if done == total:
                    bar.advance(one)

            def engine(name: str, now: float, done: int, total: int) -> None:
                """One bar per serving run: requests done, simulated time."""
                desc = f"{name} {now:,.0f} s simulated"
                if name not in tasks:
                    tasks[name] = bar.add_task(desc, total=total)
                bar.update(tasks[name], completed=done, description=desc)
        else:
            engine = None
            update = _variant_bars(bar, tasks, len(expand_matrix(cfg)))

        result = run(cfg, profile, out, progress=update, trace=args.trace, engine_progress=engine)
    REPORTS[kind.report](console, cfg, profile, result.summary(), out)
    for name, why in result.skipped.items():
        console.print(f"skipped [yellow]{name}[/yellow]: {why}")
    console.print(
        f"results: {out}/ (summary.csv, per-variant records, run.json); "
        f"simulated in {result.wall_s:.1f} s"
    )
    return 0


def _decode_report(console: Console, cfg, profile, summary: pd.DataFrame, out: Path) -> None:
    print_tables(console, summary_table(summary, cfg.workload.batch))
    print_fragile(console, cfg)


def _swarm_report(console: Console, cfg, profile, summary: pd.DataFrame, out: Path) -> None:
    print_tables(console, design_tables(summary, cfg))
    _print_seed_figures(console, cfg, summary, f"{cfg.name} on {profile.name}")
    console.print(_headroom_line(cfg.workload, profile))
    print_fragile(console, cfg)


def _kvdrive_report(console: Console, cfg, profile, summary: pd.DataFrame, out: Path) -> None:
    """Seed 003's tables."""
    from kvtier.cli.kvdrive_tables import kvdrive_tables

    print_tables(console, kvdrive_tables(summary, cfg))
    console.print(_headroom_line(cfg.workload, profile))
    # the seed's figures select variants by name (a run over pairs names them "name |
    # 60K | 8") and by the profile (the L20's Fig. 13 against the H20's Fig. 14)
    from sim.scenarios.seedref import by_design_name

    named = by_design_name(summary).assign(hw=profile.name)
    _print_seed_figures(console, cfg, named, f"{cfg.name} on {profile.name}")
    print_fragile(console, cfg)


def _serving_report(console: Console, cfg, profile, summary: pd.DataFrame, out: Path) -> None:
    """The serving tables, the seed's figures beside them, SwiftCache's (several
    instances on peer GPUs) and the plots written into ``out``."""
    from analysis.serving_plots import write_serving_plots
    from sim.serving.report import serving_tables

    print_tables(console, serving_tables(summary, f"{cfg.name} on {profile.name}"))
    _print_seed_figures(console, cfg, summary, f"{cfg.name} on {profile.name}")
    if cfg.workload.instances and not cfg.workload.routed and "gpu1" in profile.gpu_names:
        from sim.scenarios.swiftcache import reload_shares

        reload = reload_shares(profile)
        swift = [_reload_table(profile, reload), *_swift_tables(cfg, summary, profile)]
        swift.append(_swift_paper_table(cfg, summary, profile, reload))
        print_tables(console, [*swift, *_lsc_tables(cfg, profile)])
    print_fragile(console, cfg)
    plots = write_serving_plots(out)
    if cfg.workload.instances and not cfg.workload.routed and "gpu1" in profile.gpu_names:
        from analysis.swift_plots import write_swift_outputs
        from sim.scenarios.swiftcache import FIG9_WORKER_SHARE

        plots += [p for p in write_swift_outputs(out, FIG9_WORKER_SHARE) if p.suffix == ".png"]
    console.print(f"plots: {', '.join(p.name for p in plots)}")


# What ``kvtier sim`` prints after a run, by the report a workload kind's registry
# entry names (:class:`sim.registry.Kind`): printing is the CLI's, so the registry
# names it and this table holds it; a new kind names one of these or adds one here.
REPORTS = {
    "decode": _decode_report,
    "swarm": _swarm_report,
    "kvdrive": _kvdrive_report,
    "serving": _serving_report,
}

MANY_VARIANTS = 12  # beyond this many variants (a scenario's points), one bar for all


def _variant_bars(bar: Progress, tasks: dict[str, int], n: int):
    """The progress callback: a bar per variant's planning and simulation, or,
    beyond :data:`MANY_VARIANTS`, one bar over every variant's two, described
    by the variant in progress."""
    if n <= MANY_VARIANTS:

        def update(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=done)

        return update
    one = bar.add_task(f"{n} variants, planned then simulated", total=2 * n)

    def update_one(name: str, done: int, total: int) -> None:
        bar.update(one, description=name)
        if done == total:
            bar.advance(one)

    return update_one


def _print_seed_figures(console: Console, cfg, summary, title: str) -> None:
    """The seed's figures kept in the scenario YAML, beside kvtier's (if it has any)."""
    from sim.scenarios.seedref import compare, gap_lines, load_seed_figures, seed_tables

    figs = load_seed_figures(cfg.source_file, ConfigError) if cfg.source_file else None
    if figs is not None:
        rows = compare(figs, summary)
        print_tables(console, seed_tables(figs, rows, title))
        for line in gap_lines(rows):
            console.print(line, markup=False)


def print_fragile(console: Console, cfg) -> None:
    """Under the comparison: the assumptions recorded sensitivity passes found the
    verdict to hang on (the scenario's ``fragile`` block, :mod:`sim.scenarios.fragile`)."""
    from sim.scenarios.fragile import fragile_lines, load_fragile

    passes = load_fragile(cfg.source_file, ConfigError) if cfg.source_file else ()
    for line in fragile_lines(passes):
        console.print(line, markup=False)


def _headroom_line(w, profile) -> str:
    """Whether the batch's KV would fit in HBM at all (then nobody offloads it)."""
    from sim.scenarios.swarm_report import hbm_headroom

    tokens = w.context_tokens + w.profile_steps + w.steps
    h = hbm_headroom(w.model, profile, w.batch, tokens)
    verdict = "fits: offloading is optional" if h["kv_fits_hbm"] else "does not fit: offloaded"
    return (
        f"KV of the batch: {h['kv_bytes'] / 1e9:.1f} GB ({w.batch} x {tokens:,} tokens, all "
        f"layers) vs {h['hbm_free_bytes'] / 1e9:.1f} GB of HBM left after the weights on one "
        f"{profile.gpu.model}: {verdict}"
    )


def _progress(console: Console) -> Progress:
    """The progress bars; the description folds and the bar shrinks in a narrow
    terminal, so counts and times are never cut ("…").  Redrawn twice a second
    (rich's default is ten): the simulation runs in this process, and each
    redraw takes the interpreter from it (measured 2026-12-03, the whole
    conversation trace on a fleet of four: 31.4 -> 29.3 CPU s at one a second)."""
    return Progress(
        TextColumn("{task.description:<28}", table_column=Column(overflow="fold", ratio=3)),
        BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=4)),
        MofNCompleteColumn(),
        TextColumn("ops"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        refresh_per_second=2,
    )


def summary_table(df: pd.DataFrame, batch: int) -> Table:
    per_step = fmt_bytes(float(df["fetch_bytes_per_step"].iloc[0])) if len(df) else "-"
    table = Table(title=f"Sparse decode, batch {batch}: {per_step} of KV fetched per step")
    cols = [
        ("design", "variant", str),
        ("step ms", "step_ms", lambda v: f"{v:,.1f}"),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
        ("fetch ms/step", "fetch_ms_per_step", lambda v: f"{v:,.1f}"),
        ("fetch GB/s", "fetch_gbps", lambda v: f"{v:.2f}"),
        ("of SSD BW %", "ssd_share_of_aggregate", lambda v: "-" if v != v else f"{100 * v:.0f}"),
        ("CPU cores", "cpu_cores_busy", lambda v: f"{v:.1f}"),
    ]
    for header, _, _ in cols:
        table.add_column(header, justify="left" if header == "design" else "right")
    table.add_column("limited by", overflow="fold")
    for _, row in df.iterrows():
        cells = [fmt(row[key]) for _, key, fmt in cols]
        table.add_row(*cells, limiter(row))
    return table


def design_tables(df: pd.DataFrame, cfg) -> list[Table]:
    """Swarm's comparison (seed 000 §8.2/8.3), one row per design, as two tables
    that fit a terminal: speed and I/O at equal budget, then quality and index
    (Table 4's figures and, with ``match_recall``, each design at matched recall)."""
    title = decode_title(cfg.workload)
    speed = [
        ("design", "variant", str),
        ("tokens/s", "tokens_per_s", lambda v: f"{v:,.2f}"),
        ("I/O ms/step", "io_ms_per_step", lambda v: f"{v:,.1f}"),
        ("read MB/step", "read_bytes_per_step", lambda v: f"{v / 1e6:,.2f}"),
        ("I/Os/step", "ios_per_step", lambda v: f"{v:,.0f}"),
        ("SSD GB/s", "ssd_gbps", lambda v: f"{v:.2f}"),
        ("of SSD BW %", "ssd_share_of_aggregate", lambda v: f"{100 * v:.0f}"),
        ("DRAM hit %", "dram_hit_rate", lambda v: f"{100 * v:.1f}"),
        # of the clusters / blocks chosen, those found in DRAM (Eq. 6 saves one per hit)
        ("unit hit %", "unit_hit_rate", lambda v: "-" if v != v else f"{100 * v:.1f}"),
        ("recall", "recall", lambda v: f"{v:.3f}"),
    ]
    quality = [
        ("design", "variant", str),
        ("recall", "recall", lambda v: f"{v:.3f}"),
        ("select ms", "select_ms", lambda v: f"{v:.3f}"),
        ("index MB", "index_mb_per_layer", lambda v: f"{v:.2f}"),
        # index + cache room (KVDesign.host_bytes): equal with dram_budget
        ("DRAM MB", "dram_mb_per_layer", lambda v: f"{v:.2f}"),
        # Swarm's clustering (sim.scenarios.swarm_report, Table 4): SSD/KV bytes,
        # index keys / all keys, full-scan keys / index keys
        ("replication x", "replication", lambda v: f"{v:.2f}"),
        ("index keys %", "index_key_share", lambda v: f"{100 * v:.1f}"),
        ("select x", "select_speedup", lambda v: f"{v:.1f}"),
    ]
    caption = None
    if df.get("new_clusters_per_lane", pd.Series(dtype=float)).sum() > 0:
        quality += [  # maintenance ran (§6.2): tokens that left the window were placed
            ("joins/lane", "joins_per_lane", lambda v: f"{v:,.0f}"),
            ("new clusters/lane", "new_clusters_per_lane", lambda v: f"{v:,.0f}"),
        ]
    if "match_scale" in df:  # with match_recall: each design at the budget reaching it
        quality += [
            ("scale@R", "match_scale", lambda v: f"{v:.2f}"),
            ("recall@R", "match_recall", lambda v: f"{v:.3f}"),
            ("tokens/s@R", "matched_tokens_per_s", lambda v: f"{v:,.2f}"),
            ("target R", "match_reached", lambda v: "reached" if v else "unreachable"),
        ]
        targets = sorted(set(df["match_target"].dropna()))
        caption = (
            f"@R: at the smallest budget scale (x the oracle's budget) reaching mean recall "
            f"{', '.join(f'{t:g}' for t in targets)}; 'unreachable' when even every entry "
            "does not (the recall reached is shown)"
        )
    return [
        rows_table(df, f"{title}: speed and I/O at equal budget", speed),
        rows_table(df, "quality, index (Table 4) and matched recall", quality, caption),
    ]


def limiter(row: pd.Series) -> str:
    """What bounds a design: the software path's CPU time or the busiest device."""
    if row["cpu_bound_share"] > 0.5:
        return f"CPU ({row['io_path']}, {100 * row['cpu_bound_share']:.0f}% of reads)"
    if row["queue_bound_share"] > 0.5:
        return f"queue depth {row['queue_depth']} ({100 * row['queue_bound_share']:.0f}% of reads)"
    return f"{row['busiest']} ({100 * row['busiest_util']:.0f}% busy)"


def _sim_plan(console: Console, args: argparse.Namespace, profile) -> int:
    from kvtier.contracts.provenance import file_digest

    plan = read_plan(args.plan)
    check_plan_rows(plan.num_rows, args.plan)
    run = run_id(cmd="sim", plan=file_digest(args.plan), hw=dataclasses.asdict(profile))
    label = f"sim {args.plan} on {profile.name}"
    with claim(args.out, force=args.force, run=run, label=label):
        return _sim_plan_run(console, args, profile, plan)


def _sim_plan_run(console: Console, args: argparse.Namespace, profile, plan) -> int:
    """Simulate ``plan`` into ``args.out`` (claimed) and print its device table."""
    with _progress(console) as bar:
        task = bar.add_task(Path(args.plan).name, total=plan.num_rows)
        try:  # the plan is validated (finite times, known nodes) before it runs
            records = simulate(plan, profile, lambda d, t: bar.update(task, completed=d))
        except PlanError as exc:
            raise PlanError(f"{args.plan}: {exc}") from None
    out = Path(args.out)
    records.write(out)
    dev = records.devices.to_pandas()
    title = f"{args.plan} on {profile.name}: makespan {records.makespan_s:.6f} s"
    table = device_table(dev[dev["busy_s"] > 0], title)
    print_tables(console, table)
    console.print(f"records: {out}/")
    return 0


def device_table(dev: pd.DataFrame, title: str) -> Table:
    """One row per device of a plan's records: bytes, I/Os, busy time, utilisation."""
    table = Table(title=title)
    for col in ("device", "type", "read GB", "written GB", "I/Os", "busy s", "util %"):
        table.add_column(col, justify="left" if col in ("device", "type") else "right")
    for _, r in dev.iterrows():
        table.add_row(
            r["device"],
            r["type"],
            f"{r['bytes_read'] / 1e9:,.3f}",
            f"{r['bytes_written'] / 1e9:,.3f}",
            f"{r['n_ios']:,}",
            f"{r['busy_s']:.6f}",
            f"{100 * r['util_mean']:.1f}",
        )
    return table


def _reload_table(profile, reload):
    """Seed 002 Fig. 1's mechanism: reload share of TTFT vs history, PCIe vs NVLink."""
    table = Table(title=f"reload share of TTFT, LWM-Text-1M on {profile.name} (seed 002 Fig. 1)")
    for col in ("history tokens", "path", "TTFT ms", "reload ms", "reload share %"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for r in reload.to_pylist():
        table.add_row(
            f"{r['history_tokens']:,}", r["path"], f"{r['ttft_s'] * 1e3:.1f}",
            f"{r['reload_s'] * 1e3:.1f}", f"{100 * r['reload_share']:.0f}",
        )  # fmt: skip
    return table


def _worker_share(cfg) -> float:
    """The largest share of its KV memory a worker makes available to the
    master (lent to its prefix cache plus the area holding its streamed blocks)."""
    return max((i.get("lend_share", 0.0) + i.get("stream_share", 0.0)
                for i in cfg.workload.instances), default=0.0)  # fmt: skip


def _swift_tables(cfg, summary, profile) -> list:
    """Seed 002's outputs: prefill breakdown, worker interference, Fig. 9's
    maximum context per GPU size (workers giving their whole KV memory, Eq. 2)."""
    import pyarrow as pa

    from sim.scenarios.swiftcache import (
        FIG9_WORKER_SHARE,
        max_context_table,
        prefill_breakdown,
        worker_interference,
    )

    summ = pa.Table.from_pandas(summary, preserve_index=False)
    share = FIG9_WORKER_SHARE
    out = []
    t = Table(title="the master's mean TTFT, broken down (ms)")
    for col in ("design", "TTFT", "queueing", "blocked load", "execution", "stored GB",
                "RC blocks", "LSC blocks", "streamed GB"):  # fmt: skip
        t.add_column(col, justify="left" if col == "design" else "right")
    for r in prefill_breakdown(summ).to_pylist():
        ms = [f"{r[k] * 1e3:,.0f}" for k in ("ttft_mean_s", "queue_s", "load_s", "execution_s")]
        t.add_row(r["design"], *ms, f"{r['store_gb']:.1f}", f"{r['rc_blocks']:,}",
                  f"{r['lsc_blocks']:,}", f"{r['streamed_gb']:.1f}")  # fmt: skip
    out.append(t)
    gpus = {i["name"]: i["gpu"] for i in cfg.workload.instances}
    hbm = profile.gpu.hbm_gbps * profile.efficiency.hbm
    inter = worker_interference(summ, gpus, hbm).to_pylist()
    if inter:
        t = Table(
            title="worker interference: mean TTFT / TPOT alone vs lending (seed 002 Fig. 8);"
            " NVLink copy bytes through the worker's HBM, and their share of its HBM time;"
            " the share of its GPU time the copies' NCCL kernels held its SMs"
        )
        for col in ("design", "worker", "TTFT ms alone", "lending ms", "+ %", "TPOT ms alone",
                    "lending ms", "+ %", "HBM GB copied", "HBM share %", "SM held %"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("design", "worker") else "right")
        for r in inter:
            t.add_row(r["design"], r["worker"], *(
                v for m in ("ttft", "tpot") for v in (
                    f"{r[f'{m}_alone_s'] * 1e3:.1f}", f"{r[f'{m}_lending_s'] * 1e3:.1f}",
                    f"{100 * r[f'{m}_increase']:+.1f}")),
                f"{r['peer_hbm_gb']:,.1f}", f"{100 * r['hbm_share']:.2f}",
                f"{100 * r['sm_share']:.2f}")  # fmt: skip
        out.append(t)
    t = Table(title=f"maximum context, tokens (Fig. 9; workers give {share:.0%} of their KV)")
    for col in ("master", "GPU GB", "vLLM", "chunk 32K", "chunk 8K", "SwiftCache", "vs 8K x"):
        t.add_column(col, justify="left" if col == "master" else "right")
    for r in max_context_table(share).to_pylist():
        cells = [f"{r[k]:,}" if r[k] else "-" for k in
                 ("vllm", "vllm_chunk_32k", "vllm_chunk_8k", "swiftcache")]  # fmt: skip
        gain = f"{r['gain_vs_8k']:.2f}" if r["vllm_chunk_8k"] else "-"
        t.add_row(r["model"], f"{r['gpu_gb']:g}", *cells, gain)
    out.append(t)
    return out


def _swift_paper_table(cfg, summary, profile, reload):
    """Seed 002's comparable figures: paper, kvtier, ratio, mechanism of a gap over 25%."""
    import pyarrow as pa

    from sim.scenarios.swift_paper import DATASETS, kvtier_values, paper_table
    from sim.scenarios.swiftcache import max_context_table, worker_interference

    summ = pa.Table.from_pandas(summary, preserve_index=False)
    gpus = {i["name"]: i["gpu"] for i in cfg.workload.instances}
    inter = worker_interference(summ, gpus, profile.gpu.hbm_gbps * profile.efficiency.hbm)
    values = kvtier_values(summ, reload, max_context_table(), inter)
    t = Table(title="seed 002 against kvtier (ratio = kvtier / paper; mechanism of gaps over 25%)")
    for col in ("figure", "unit", "paper", "kvtier", "ratio", "gap"):
        right = col in ("paper", "kvtier", "ratio")
        t.add_column(col, justify="right" if right else "left", no_wrap=True)
    notes: list[str] = []
    masters = [i for i in cfg.workload.instances if i.get("role") == "master"] or [{}]
    trace = masters[0].get("trace", cfg.workload.trace)
    dataset = trace if trace in DATASETS else "sharegpt_long"
    model = masters[0].get("model", cfg.workload.model)
    for r in paper_table(values, dataset, model).to_pylist():
        ratio = "-" if r["ratio"] != r["ratio"] else f"{r['ratio']:.2f}"
        cells = [_paper_cell(r[k], r["unit"]) for k in ("paper", "kvtier")]
        if r["mechanism"] and r["mechanism"] not in notes:
            notes.append(r["mechanism"])
        gap = f"[{notes.index(r['mechanism']) + 1}]" if r["mechanism"] else ""
        t.add_row(r["figure"], PAPER_UNITS[r["unit"]], *cells, ratio, gap)
    t.caption = "\n".join(f"[{i}] {n}" for i, n in enumerate(notes, start=1))
    t.caption_justify = "left"
    return t


# how a paper row's unit prints: shares and changes as percent numbers
PAPER_UNITS = {"ms": "ms", "share": "%", "change": "% change", "ratio": "ratio", "x": "x",
               "tokens": "tokens"}  # fmt: skip


def _paper_cell(v: float, unit: str) -> str:
    if v != v:
        return "-"
    if unit in ("share", "change"):
        return f"{100 * v:.1f}"
    if unit == "tokens":
        return f"{v:,.0f}"
    return f"{v:.2f}" if unit in ("x", "ratio") else f"{v:.1f}"


def _lsc_tables(cfg, profile) -> list:
    """The layer stream cache at run time: the longest context served per GPU
    size, and long requests' TTFT/TPOT with and without it."""
    from sim.scenarios.swiftcache import FIG9_MASTERS, FIG9_WORKER_SHARE, GPU_SIZES_GB, fig9_workers
    from sim.scenarios.swiftcache_lsc import long_context_table, runtime_max_context

    share = _worker_share(cfg)
    if share <= 0:
        return []
    masters = [m for m in FIG9_MASTERS if m != "Qwen3-14B"]
    t = Table(title="maximum context served at run time with the LSC (tokens)")
    for col in ("master", "GPU GB", "arithmetic", "served, LSC", "served, no LSC", "8K chunks",
                "TTFT of longest s"):  # fmt: skip
        t.add_column(col, justify="left" if col == "master" else "right")
    fig9 = runtime_max_context(profile, masters, GPU_SIZES_GB, fig9_workers, FIG9_WORKER_SHARE)
    for r in fig9.to_pylist():
        ttft = r["ttft_longest_s"]
        t.add_row(r["model"], f"{r['gpu_gb']:g}", *(f"{r[k]:,}" if r[k] else "-" for k in (
            "swiftcache_arith", "served_lsc", "served_no_lsc", "vllm_chunk_8k")),
            f"{ttft:,.1f}" if ttft == ttft else "-")  # fmt: skip
    out = [t]
    t = Table(title="long requests (32 output tokens), Qwen3-32B master: no LSC vs LSC")
    for col in ("GPU GB", "input tokens", "TTFT s, no LSC", "TTFT s, LSC", "TPOT ms, no LSC",
                "TPOT ms, LSC", "streamed GB"):  # fmt: skip
        t.add_column(col, justify="right")
    for r in long_context_table(profile, "Qwen3-32B", (96, 80), fig9_workers, share).to_pylist():
        cells = [
            f"{r[k]:.2f}" if r[k] == r[k] else "refused" for k in ("no_lsc_ttft_s", "lsc_ttft_s")
        ]
        cells += [f"{r[k] * 1e3:.1f}" if r[k] == r[k] else "refused"
                  for k in ("no_lsc_tpot_s", "lsc_tpot_s")]  # fmt: skip
        t.add_row(f"{r['gpu_gb']:g}", f"{r['input_tokens']:,}", cells[0], cells[1], cells[2],
                  cells[3], f"{r['streamed_gb']:.1f}")  # fmt: skip
    out.append(t)
    return out

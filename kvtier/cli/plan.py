"""``kvtier plan``: the cheapest hardware and KV design meeting an SLO; each point's bottleneck."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import pandas as pd

from analysis.capacity_plots import write_figures
from kvtier.cli.executor_args import add_executor_args, executor_of
from kvtier.contracts.console import make_console
from kvtier.contracts.provenance import provenance
from kvtier.contracts.validate import check_out_dir, float_arg, int_arg
from sim.capacity.evaluate import Point, Question
from sim.capacity.load import LoadSearch, add_unit_costs, check_question, search_loads, trace_rate
from sim.capacity.prices import AMORTISE_YEARS, add_costs, add_hourly, load_prices
from sim.capacity.search import Space, check_fit, pareto, search
from sim.capacity.store import ResultStore
from sim.capacity.variants import Hardware, base_data, derive, resolve_ssd
from sim.config import FRAMEWORKS, GPU_TIMES, ConfigError

# Ceilings of the derived machines (each SSD and DRAM module of a variant is linked like
# the base's ssd0 / dram0 in one host), refused before any work.  Source: AMD EPYC 9004
# product brief: a two-socket server has up to 160 PCIe 5.0 lanes, 12 DDR5 channels a
# socket at 2 DIMMs each, and up to 6 TB of DDR5 a socket.  Assumption: a plan explores
# one such host (a PCIe switch fan-out can exceed the lane count; real servers hold 8-32
# NVMe drives and 8-32 DIMMs).
MAX_SSDS = 160 // 4  # every SSD on a PCIe x4 link
MAX_DRAM_MODULES = 2 * 12 * 2  # sockets x channels x DIMMs a channel
# one module may stand for a whole host (dgx-h100's dram0); DRAM's "TB" is 2^40 B
MAX_DRAM_GIB = 2 * 6 * 1024
SIZES = (("ssd_counts", MAX_SSDS, "SSDs: 160 PCIe 5.0 lanes of a 2-socket server at x4"),
         ("dram_modules", MAX_DRAM_MODULES, "DIMMs: 2 sockets x 12 channels x 2 a channel"),
         ("dram_gib", MAX_DRAM_GIB, "GiB: 2 sockets x 6 TB of DDR5"))  # fmt: skip

SHOWN = ("base", "design", "gpus", "replicas", "router", "ssd_model", "ssds", "dram_modules",
         "cost_usd", "ttft_p99_s", "tpot_p99_s", "throughput_tok_s", "bottleneck",
         "bottleneck_share", "bottleneck_tpot", "busiest")  # fmt: skip


def _list(cast):
    def parse(text: str) -> tuple:
        try:
            items = tuple(cast(v.strip()) for v in text.split(",") if v.strip())
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a list of {cast.__name__}: {text!r}") from None
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items

    return parse


def add_parser(sub: argparse._SubParsersAction) -> None:
    q = Question()
    p = sub.add_parser(
        "plan",
        help="cheapest hardware + KV design meeting TTFT/TPOT/throughput SLOs, with bottlenecks",
        description="Derives machines from --base (SSD model and count, DRAM modules), simulates "
        "each design on each (pruned: plateaus and saturated resources skipped), prices them and "
        "prints the cheapest meeting the SLOs, the Pareto fronts and every point's bottleneck.",
    )
    a = p.add_argument
    a(
        "--base",
        type=_list(str),
        default=q.base,
        help="base hardware profiles, comma-separated (each a machine kind: its GPU model, "
        "links, platform); the answer and the fronts span them all",
    )
    a("--model", default=q.model)
    a("--trace", default=q.trace, help="long_doc, a request trace file, or sparse_decode")
    a("--context-tokens", type=int_arg(1), default=q.context_tokens)
    a(
        "--docs",
        type=int_arg(1),
        default=q.docs,
        help="long_doc: documents queried at once; sparse_decode: concurrent sessions",
    )
    a(
        "--sparsity",
        type=float_arg(0.0, strict=True),
        default=q.sparsity,
        help="sparse_decode: KV share read per step",
    )
    a("--steps", type=int_arg(1), default=q.steps, help="sparse_decode: decode steps simulated")
    a("--requests", type=int_arg(0), default=q.requests, help="trace file: first N requests")
    a(
        "--ttft-p99",
        type=float_arg(),
        default=q.slo_ttft_p99_s,
        help="SLO: P99 TTFT limit, s (0: none)",
    )
    a(
        "--tpot-p99",
        type=float_arg(),
        default=q.slo_tpot_p99_s,
        help="SLO: P99 TPOT limit, s (0: none)",
    )
    a(
        "--min-tok-s",
        type=float_arg(),
        default=0.0,
        help="SLO: output tokens/s floor (0: none); sparse_decode: per session",
    )
    a("--designs", type=_list(str), default=("lmcache", "pool"))
    a("--ssd-models", type=_list(str), default=("9100 PRO", "900P"))
    a("--ssd-counts", type=_list(int_arg(1)), default=(1, 2, 4))
    a("--dram-modules", type=_list(int_arg(1)), default=(1, 2, 4))
    a(
        "--dram-gib",
        type=_list(float_arg(0.0, strict=True)),
        default=(64.0,),
        help="GiB per DRAM module",
    )
    a(
        "--gpus",
        type=_list(int_arg(0)),
        default=(0,),
        help="GPU counts (tensor parallel over the base's first N GPUs; 0: the base's, one serves)",
    )
    a(
        "--replicas",
        type=_list(int_arg(1)),
        default=(0,),
        help="one-GPU instances behind --router (the machine keeps that many GPUs; a request "
        "trace; not with --gpus)",
    )
    a("--router", default="round_robin", help="--replicas: the router (round_robin, least_queue, "
      "least_kv, prefix)")  # fmt: skip
    a(
        "--gpu-time",
        choices=GPU_TIMES,
        default=q.gpu_time,
        help="GPU step time: the roofline, measured kernel tables (aiconfigurator-core; a GPU "
        "or model they lack is refused) or auto (measured where they have it)",
    )
    a("--framework", choices=FRAMEWORKS, default=q.framework, help="measured: whose tables")
    a(
        "--framework-version",
        default=q.framework_version,
        help="measured: the framework version (auto: the one nearest the seeds')",
    )
    a(
        "--max-load",
        action="store_true",
        help="per candidate, bisect the trace's arrival-rate scale for the largest load meeting "
        "the SLOs (a request trace); adds max_load_* and usd_per_req_s / usd_per_tok_s",
    )
    rules = LoadSearch()
    a("--load-low", type=float_arg(), default=rules.low, help="--max-load: lowest scale probed")
    a("--load-high", type=float_arg(), default=rules.high, help="--max-load: highest scale")
    a("--load-tol", type=float_arg(), default=rules.tol, help="--max-load: bracket width to stop")
    a("--load-probes", type=int_arg(0), default=rules.probes,
      help="--max-load: simulations per candidate at most (both ends included)")  # fmt: skip
    a("--prices", action="append", default=[], help="price YAML overriding the shipped entries")
    a(
        "--amortise-years",
        type=float_arg(0.0, strict=True),
        default=AMORTISE_YEARS,
        help="usd_per_hour: the purchase price over this many years (an assumption, plausible "
        "3-5; no power or hosting term)",
    )
    a("--no-prune", action="store_true", help="evaluate the whole grid")
    add_executor_args(p)
    a("--out", default="results/plan", help="output directory (results resume from it)")
    p.set_defaults(handler=cmd_plan)


def question(args: argparse.Namespace) -> Question:
    if not 0 < args.sparsity <= 1:
        raise ConfigError(f"--sparsity: must be in (0, 1], got {args.sparsity}")
    for name in ("ttft_p99", "tpot_p99", "min_tok_s"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')}: must be >= 0")
    for name, ceiling, what in SIZES:  # the grid's machines, before any is derived
        if max(getattr(args, name)) > ceiling:
            flag = f"--{name.replace('_', '-')} {max(getattr(args, name))}"
            raise ConfigError(f"{flag}: at most {ceiling:,} ({what}; kvtier plan derives one host)")
    return dataclasses.replace(
        Question(), base=args.base[0], model=args.model, trace=args.trace,
        context_tokens=args.context_tokens, docs=args.docs, requests=args.requests,
        sparsity=args.sparsity, steps=args.steps,
        slo_ttft_p99_s=args.ttft_p99, slo_tpot_p99_s=args.tpot_p99, slo_min_tok_s=args.min_tok_s,
        gpu_time=args.gpu_time, framework=args.framework,
        framework_version=args.framework_version,
    )  # fmt: skip


def cmd_plan(args: argparse.Namespace) -> int:
    console = make_console()
    check_out_dir(args.out)
    q = question(args)
    _check_designs(q, args.designs)
    _check_context(q)
    prices = load_prices(*args.prices)  # fail fast on a bad table
    models = tuple(resolve_ssd(m) for m in args.ssd_models)
    _check_replicas(q, args)
    have = _check_bases(args.base)  # fail fast on a bad base profile
    space = Space(args.designs, models, args.ssd_counts, args.dram_modules, args.dram_gib,
                  args.gpus, args.replicas, args.router, args.base)  # fmt: skip
    executor = executor_of(args)  # Ray missing or unreachable: refused before the work
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for flag, n in (("--gpus", max(args.gpus)), ("--replicas", max(args.replicas))):
        if n > max(have.values()):  # above some bases' only: those bases' points are unfit
            which = "has" if len(have) == 1 else "have at most"
            raise ConfigError(f"{flag}: {n} GPUs asked of {', '.join(have)}, which {which} "
                              f"{max(have.values())}")  # fmt: skip
    for base in args.base:
        _check_gpu_time(dataclasses.replace(q, base=base), args.gpus)
    rules = _load_rules(q, args)
    check_fit(q, space)  # a grid of which no point can run: refused before any simulation
    store = ResultStore(Path(args.out) / "points")
    console.print(f"[bold]kvtier plan[/bold]: {q.model}, {q.trace}, {space.size} grid points")
    t0 = time.perf_counter()
    res = search(q, space, executor, store, prune=not args.no_prune)
    search_s = time.perf_counter() - t0
    _check_ran(res.rows)
    df = add_hourly(add_costs(res.rows, q.base, prices), args.amortise_years)
    df = _judge(q, df)
    if rules is not None:
        t1 = time.perf_counter()
        loads = search_loads(q, df, rules, executor, store)
        df = add_unit_costs(df.merge(loads, on="key", how="left"))
        n = int(loads["max_load_probes"].sum())
        console.print(f"load search: {n} probes ({len(loads)} candidates) in "
                      f"{time.perf_counter() - t1:.1f} s")  # fmt: skip
    df.to_parquet(Path(args.out) / "plan.parquet", index=False)
    _provenance(Path(args.out) / "plan.json", q, space, executor, res)
    write_figures(df, Path(args.out))
    _report(console, q, df, res, search_s, prices, Path(args.out))
    return 0


def _check_bases(bases: tuple[str, ...]) -> dict[str, int]:
    """Base profile -> its GPU count; an unknown or malformed profile, or one named twice
    (by name or by a path to the same file), is refused naming ``--base``."""
    from hwprofiles.loader import PROFILE_DIR, resolve_yaml

    have, seen = {}, {}
    for base in bases:
        try:
            path = resolve_yaml(base, PROFILE_DIR, "hardware profile").resolve()
            have[base] = int(base_data(base)["gpu"]["count"])
        except ValueError as exc:  # ProfileError, ConfigError: the profile's own line
            raise ConfigError(f"--base {base}: {' '.join(str(exc).split())}") from None
        if path in seen:
            raise ConfigError(f"--base: {base} and {seen[path]} are the same profile "
                              f"({path.name}); name each base once")  # fmt: skip
        seen[path] = base
    return have


def _check_replicas(q: Question, args: argparse.Namespace) -> None:
    """``--replicas``: a registered ``--router``, a request trace (long_doc's warm-up sits
    in one instance), no tensor parallelism beside it (a routed replica is one GPU)."""
    if args.replicas == (0,):
        return
    from sim.registry import ROUTERS

    if args.router not in ROUTERS:
        raise ConfigError(f"--router {args.router}: one of {', '.join(ROUTERS.names())}")
    if q.trace in ("long_doc", "sparse_decode"):
        raise ConfigError(f"--replicas: --trace {q.trace} is not routed (conversation or a "
                          "request trace file)")  # fmt: skip
    if args.gpus != (0,):
        raise ConfigError("--replicas: one GPU an instance; with --gpus (tensor parallel) "
                          "not modelled")  # fmt: skip


def _load_rules(q: Question, args: argparse.Namespace) -> LoadSearch | None:
    """The ``--max-load`` search's rules, checked before any work (None: not asked)."""
    if not args.max_load:
        return None
    check_question(q)
    rules = LoadSearch(args.load_low, args.load_high, args.load_tol, args.load_probes)
    trace_rate(q)  # a trace without a rate is refused here
    return rules


def _provenance(path: Path, q: Question, space: Space, executor, res) -> None:
    """What produced plan.parquet: the question, the grid, and what ran this run's points
    (points resumed from ``points/`` ran in an earlier run, perhaps elsewhere)."""
    meta = provenance(
        question=dataclasses.asdict(q),
        space=dataclasses.asdict(space),
        executor=executor.describe(),
        simulated_this_run=res.simulated,
        resumed=res.evaluated - res.simulated,
    )
    path.write_text(json.dumps(meta, indent=2, default=str))


def _check_ran(rows: pd.DataFrame | list) -> None:
    """At least one grid point ran; else the first point's reason is the user's error
    (an unknown model, a missing trace file: every point fails the same way)."""
    df = pd.DataFrame(rows)
    if len(df) and (df.get("status") == "ok").any():
        return
    why = str(df["status"].iloc[0]) if "status" in df and len(df) else "no grid point"
    raise ConfigError(f"kvtier plan: no grid point could run: {why}")


def _check_designs(q: Question, designs: tuple[str, ...]) -> None:
    """Every ``--designs`` name is one the question's trace can run (before any work)."""
    from sim.capacity.evaluate import sparse_tier
    from sim.serving.designs import get_design

    for design in designs:
        if q.trace == "sparse_decode":
            sparse_tier(design)
        else:
            try:
                get_design(design, {})
            except (ConfigError, KeyError, ValueError) as exc:
                raise ConfigError(f"--designs: {design!r}: {exc}") from None


def _check_gpu_time(q: Question, gpus: tuple[int, ...]) -> None:
    """``--gpu-time`` measured: the base's GPU and the model in the tables, the framework
    version among theirs (:func:`sim.hw.measured.resolve`; every point keeps the base's
    GPU model), at each tensor-parallel degree ``--gpus`` asks for (0: one GPU serves)."""
    if q.gpu_time == "roofline":
        return
    from hwprofiles import load_profile
    from sim.hw.measured import GpuTime, MeasuredError, resolve
    from sim.models import get_model

    setting = GpuTime(q.gpu_time, q.framework, q.framework_version)
    try:
        for tp in sorted({max(g, 1) for g in gpus}):
            resolve(load_profile(q.base), get_model(q.model), setting, tp)
    except MeasuredError as exc:
        msg = str(exc)
        for key, flag in (
            ("gpu_time: ", "--gpu-time "),
            ("framework_version: ", "--framework-version "),
        ):
            msg = flag + msg.removeprefix(key) if msg.startswith(key) else msg
        raise ConfigError(msg) from None


def _check_context(q: Question) -> None:
    """``--context-tokens`` within the model's context (its card's ``max_context``, or
    ``yarn_context`` where the vendor documents YaRN), as :mod:`sim.limits` checks a
    scenario: vLLM refuses a longer prompt; then Long Doc QA's trace within memory."""
    from sim.limits import check_long_doc
    from sim.models import get_model

    if q.trace not in ("long_doc", "sparse_decode"):  # a trace file's requests are its own
        return
    card = get_model(q.model)
    limit = max(card.max_context, card.yarn_context)
    if q.context_tokens > limit:
        how = "with YaRN" if card.yarn_context else "its config's max_context"
        raise ConfigError(
            f"--context-tokens {q.context_tokens}: exceeds {card.name}'s context of "
            f"{limit:,} tokens ({how})"
        )
    if q.trace == "long_doc":
        what = f"--docs {q.docs} x --context-tokens {q.context_tokens}"
        check_long_doc(q.docs, q.context_tokens, q.block_tokens, what)


def _judge(q: Question, df: pd.DataFrame) -> pd.DataFrame:
    from sim.capacity.evaluate import with_slos

    return pd.DataFrame([with_slos(q, r) for r in df.to_dict("records")])


def _fmt(df: pd.DataFrame) -> str:
    cols = [c for c in SHOWN if c in df.columns]
    return df[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}")


def _report(console, q, df, res, wall_s, prices, out: Path) -> None:
    console.print(
        f"simulated {res.simulated} points this run ({res.evaluated} with results) of a "
        f"{res.grid}-point grid in {wall_s:.1f} s; skipped {len(res.skipped)} as dominated"
    )
    ok = df[df["meets_slo"]].sort_values("cost_usd")
    slos = ", ".join(f"{m} {s} {v:g}" for m, (s, v) in q.slos().items()) or "none"
    if ok.empty:
        console.print(f"[bold]no point meets the SLOs[/bold] ({slos})")
    else:
        best = ok.iloc[0]
        console.print(f"[bold]cheapest meeting the SLOs[/bold] ({slos}):")
        console.print(_fmt(ok.head(1)), soft_wrap=True)
        hw = Hardware(best.ssd_model, int(best.ssds), int(best.dram_modules),
                      float(best.dram_gib), int(best.get("gpus", 0) or 0))  # fmt: skip
        prof = derive(best.base, hw, out / "profiles")
        console.print(f"its profile: {prof.source_file}; design {Point(best.design, hw).design}")
    for metric in ("ttft_p99_s", "throughput_tok_s"):
        if df[metric].isna().all():
            continue  # not modelled by this workload (sparse_decode: TTFT)
        console.print(f"[bold]Pareto front, cost vs {metric}[/bold]:")
        console.print(_fmt(pareto(df, "cost_usd", metric)), soft_wrap=True)
    if "max_load_scale" in df:
        _report_loads(console, df)
    done = df[df["status"] == "ok"]
    by = ["base", "design", "gpus", "bottleneck"]
    counts = done.groupby(by).size().rename("points").reset_index()
    console.print("[bold]bottlenecks[/bold] (highest used share of capacity, each point):")
    console.print(counts.to_string(index=False))
    assumed = sorted({k for s in df["assumed_prices"] for k in s.split(",") if k})
    if assumed:
        console.print(f"assumed prices (no cited source): {', '.join(assumed)}")
    if not ok.empty and ok.iloc[0]["assumed_prices"]:
        share = _assumed_share(ok.iloc[0], q, prices, out)
        console.print(f"the cheapest point's cost rests {share:.0%} on assumed prices: "
                      f"{ok.iloc[0]['assumed_prices'].replace(',', ', ')}")  # fmt: skip
    console.print(
        f"written: {out}/plan.parquet (every point), {out}/plan.json (provenance), "
        f"{out}/pareto.png, {out}/bottlenecks.png, "
        f"{out}/points/ (resumable)"
    )


LOAD_SHOWN = ("base", "design", "gpus", "replicas", "ssd_model", "ssds", "dram_modules",
              "cost_usd", "max_load_scale", "max_load_req_s", "max_load_tok_s", "max_load_bound",
              "max_load_probes", "usd_per_req_s", "usd_per_tok_s", "usd_per_mtok")  # fmt: skip


def _report_loads(console, df: pd.DataFrame) -> None:
    """The largest load each candidate serves within the SLOs, cheapest per request/s first."""
    done = df[df["status"] == "ok"].sort_values(["usd_per_req_s", "cost_usd"], na_position="last")
    cols = [c for c in LOAD_SHOWN if c in done.columns]
    console.print(
        "[bold]largest load meeting the SLOs[/bold] (arrival-rate scale of the trace, "
        "bisected; bound: tol, probes, high = at least, none = not even the lowest):"
    )
    console.print(done[cols].to_string(index=False, float_format=lambda v: f"{v:,.3f}"),
                  soft_wrap=True)  # fmt: skip
    for col, unit in (("usd_per_req_s", "$ per request/s"), ("usd_per_tok_s", "$ per tok/s")):
        best = done.dropna(subset=[col]).sort_values([col, "cost_usd"])
        if len(best):
            r = best.iloc[0]
            gpus = int(r.get("gpus", 0) or 0)
            console.print(f"cheapest per unit of throughput ({unit} at its largest load): "
                          f"{r['base']} ({r['gpu_model']}{f' x {gpus}' if gpus else ''}), "
                          f"{r['design']}: {r[col]:,.2f}")  # fmt: skip


def _assumed_share(row: pd.Series, q: Question, prices, out: Path) -> float:
    """Share of ``row``'s machine cost that comes from assumed price entries."""
    from sim.capacity.prices import bill

    hw = Hardware(row.ssd_model, int(row.ssds), int(row.dram_modules), float(row.dram_gib),
                  int(row.get("gpus", 0) or 0))  # fmt: skip
    parts = bill(derive(row.get("base") or q.base, hw, out / "profiles"), prices)
    keys = set(row["assumed_prices"].split(","))
    part_of = {"platform": "platform", "ssd_slot": "ssd_slot", "dram_per_gib": "dram"}
    assumed = sum(
        v for k, v in parts.items() if k in {part_of.get(x, x.split("/")[0]) for x in keys}
    )
    return assumed / sum(parts.values())

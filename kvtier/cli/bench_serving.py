"""``kvtier bench-serving``: how fast the serving engine runs, design by design.

Every serving design at each KV block size on the Mooncake-shaped
conversation trace of :mod:`sim.serving.bench` (input and output lengths
fitted to Mooncake's), its arrivals stretched to an offered load one
instance serves (``--load``, 0.8 by default; 0: the trace's own rate, about
twice what one H100 serves), against a target of 300x real time per CPU
second of the whole command (by default), measured against the trace's
arrival duration.  Each (design, block, request count) runs in a fresh
interpreter (``python -m sim.serving.bench --json``), so no run inherits
another's heap, caches or garbage-collector state, and each peak RSS is its
own; its CPU time is the child process's whole (``RUSAGE_CHILDREN``:
interpreter start, imports, trace generation, setup, run and records).
The table gives, per run: the offered load and the GPU's busy share, the
trace's arrival duration and the simulated span, CPU seconds, the speeds
(arrival duration / CPU s, the target's measure; span / CPU s; span / CPU s
of the engine's run alone, the measure of the earlier tables in
docs/serving-speed.md) and peak RSS.  ``--requests 1000,4000,12000`` adds a
growth table (CPU s per 1K requests at each count: flat when the cost is
linear).  ``--repeat K`` runs the whole list K times, interleaved (design
after design, then again), so that a burst of load on a shared machine hits
one pass of several designs rather than every pass of one; the table gives
the best and the median of the K.  CPU time is what a loaded machine
inflates least, but it is inflated all the same: the load average at the
start and the end is printed and kept.  Results, with machine and commit
info, go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

from rich.progress import Progress
from rich.table import Table

from hwprofiles import load_profile
from kvtier.contracts.console import make_console
from kvtier.contracts.provenance import provenance
from kvtier.contracts.validate import InputError, check_out_dir, float_arg, int_arg
from sim.limits import memory_bytes
from sim.models import get_model
from sim.serving.bench import TRACE_BLOCK
from sim.serving.designs import DESIGNS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench-serving", help="benchmark the serving engine's speed per design")
    p.add_argument("--requests", default="1000",
                   help="requests per run (comma list: growth with the count)")  # fmt: skip
    p.add_argument("--blocks", default="16,256", help="KV block sizes, tokens (comma list)")
    p.add_argument("--designs", default="all", help="serving designs (comma list, or all)")
    p.add_argument("--load", type=float_arg(0.0), default=0.8,
                   help="offered load to stretch the arrivals to (0: own rate)")  # fmt: skip
    p.add_argument("--repeat", type=int_arg(1), default=1, help="passes (best and median)")
    p.add_argument("--capacity", action="store_true",
                   help="also measure each design's capacity (a saturated pass, untimed) "
                        "and the load against it")  # fmt: skip
    p.add_argument("--target", type=float_arg(0.0, strict=True), default=300.0,
                   help="arrival duration per CPU second to meet (x)")  # fmt: skip
    p.add_argument("--hw", default="h100-2dimm-2ssd")
    p.add_argument("--model", default="Llama-3.1-8B")
    p.add_argument("--seed", type=int_arg(0), default=0)
    p.add_argument("--out", default="results/bench-serving")
    p.set_defaults(handler=cmd_bench_serving)


def parse_requests(text: str) -> list[int]:
    """``--requests``: positive request counts, in order given."""
    out = []
    for part in text.split(","):
        try:
            n = int(part)
        except ValueError:
            raise InputError(f"--requests: {part!r} is not an integer") from None
        if n < 1:
            raise InputError(f"--requests: {n} must be >= 1")
        out.append(n)
    return out


def parse_blocks(text: str) -> list[int]:
    """``--blocks``: positive multiples of the trace's hash block, in order given."""
    out = []
    for part in text.split(","):
        try:
            b = int(part)
        except ValueError:
            raise InputError(f"--blocks: {part!r} is not an integer") from None
        if b < 1 or b % TRACE_BLOCK:
            raise InputError(f"--blocks: {b} must be a positive multiple of {TRACE_BLOCK}")
        out.append(b)
    return out


# Bytes of the benchmark's request table per request, measured (2026-12-02, commit
# 3b4f69f): 5,687 B at 1,000 requests, 6,104 B at 4,000; the bound takes the lower
REQUEST_BYTES = 5687


def check_sizes(args: argparse.Namespace, sizes: list[int], blocks: list[int]) -> None:
    """``--requests`` whose largest trace cannot fit in memory, and a ``--blocks``
    size of which not one block fits the GPU's KV cache, named before any run."""
    from sim.serving.build import default_gpu_kv_bytes, gpu_blocks

    most = max(sizes)
    need = most * REQUEST_BYTES
    if need > memory_bytes():
        raise InputError(
            f"--requests {most}: the trace needs at least {need / 2**30:,.1f} GiB "
            f"({REQUEST_BYTES:,} B a request), more than the "
            f"{memory_bytes() / 2**30:,.1f} GiB of memory here"
        )
    profile, card = load_profile(args.hw), get_model(args.model)
    kv = default_gpu_kv_bytes(profile, card, 0.9)  # as sim.serving.bench.build
    for b in blocks:
        if gpu_blocks(kv, card, b) < 1:
            raise InputError(
                f"--blocks {b}: one block of {b:,} tokens ({b * card.kv_bytes_per_token:,} B) "
                f"exceeds the GPU KV cache of {card.name} on {profile.name} ({max(kv, 0):,.0f} B)"
            )


def parse_designs(text: str) -> list[str]:
    """``--designs``: registered serving designs (``all``: every one, in registry order)."""
    names = DESIGNS.names()
    if text == "all":
        return list(names)
    out = [d.strip() for d in text.split(",")]
    for d in out:
        if d not in names:
            raise InputError(f"--designs: unknown serving design {d!r} (one of {', '.join(names)})")
    return out


def run_one(design: str, block: int, requests: int, args: argparse.Namespace, *extra: str) -> dict:
    """One run of ``python -m sim.serving.bench --json`` (and ``extra`` flags) in a
    fresh interpreter, with the CPU seconds of the whole child process (``cmd_cpu_s``)."""
    cmd = [sys.executable, "-m", "sim.serving.bench", "--requests", str(requests),
           "--design", design, "--block", str(block), "--hw", args.hw, "--model", args.model,
           "--seed", str(args.seed), "--load", repr(args.load), "--json", *extra]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        err = InputError if done.returncode == 2 else RuntimeError  # 2: its input; else a bug
        raise err(f"{design} block {block}: the run failed ({tail})")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"cmd_cpu_s": cpu}


def summarise(runs: list[dict], target: float) -> dict:
    """The passes of one (design, block, requests): best and median CPU time of
    the whole command, and the speeds from the best."""
    cpu = [r["cmd_cpu_s"] for r in runs]
    first = runs[0]
    best, median = min(cpu), statistics.median(cpu)
    duration, span = first["duration_s"], first["span_s"]
    return {
        "design": first["design"], "block": first["block"], "requests": first["requests"],
        "offered_load": first["offered_load"], "gpu_util": first["gpu_util"],
        "duration_s": duration, "span_s": span, "cmd_cpu_s": cpu, "best_cpu_s": best,
        "median_cpu_s": median, "run_cpu_s": min(r["cpu_s"] for r in runs),
        "speed_trace_best": duration / best, "speed_trace_median": duration / median,
        "speed_span_best": span / best, "speed_run_best": span / min(r["cpu_s"] for r in runs),
        "mean_output": first["mean_output"], "ops": first["ops"], "flows": first["flows"],
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "meets_target": duration / best >= target,
        "capacity_rps": first.get("capacity_rps"), "load_measured": first.get("load_measured"),
    }  # fmt: skip


def cmd_bench_serving(args: argparse.Namespace) -> int:
    sizes, blocks = parse_requests(args.requests), parse_blocks(args.blocks)
    designs = parse_designs(args.designs)
    out = check_out_dir(args.out)
    load_profile(args.hw), get_model(args.model)  # unknown ones: one line before any run
    check_sizes(args, sizes, blocks)
    out.mkdir(parents=True, exist_ok=True)
    console = make_console()
    load0 = os.getloadavg()
    passes: dict[tuple[str, int, int], list[dict]] = {}
    with Progress(console=console, transient=True) as bar:
        total = (args.repeat + args.capacity) * len(sizes) * len(blocks) * len(designs)
        task = bar.add_task("bench-serving", total=total)
        for _ in range(args.repeat):
            for n in sizes:
                for block in blocks:
                    for d in designs:
                        bar.update(task, description=f"{d} block {block}, {n:,} requests")
                        passes.setdefault((d, block, n), []).append(run_one(d, block, n, args))
                        bar.advance(task)
        if args.capacity:  # untimed: after every timed pass
            for d, block, n in list(passes):
                bar.update(task, description=f"capacity: {d} block {block}, {n:,} requests")
                c = run_one(d, block, n, args, "--capacity")
                for r in passes[(d, block, n)]:
                    r |= {k: c[k] for k in ("capacity_rps", "load_measured")}
                bar.advance(task)
    load1 = os.getloadavg()
    rows = [summarise(runs, args.target) for runs in passes.values()]
    console.print(table(rows, args, load0[0], load1[0]))
    if len(sizes) > 1:
        console.print(growth_table(rows, sizes))
    met = sum(r["meets_target"] for r in rows)
    console.print(f"{met} of {len(rows)} runs at >= {args.target:g}x real time per CPU second "
                  "of the whole command, against the trace's arrival duration (best of the "
                  "passes)")  # fmt: skip
    record = provenance(runs=rows, requests=sizes, load=args.load, target=args.target,
                        hw=args.hw, model=args.model, seed=args.seed,
                        loadavg=[load0, load1])  # fmt: skip
    (out / "bench-serving.json").write_text(json.dumps(record, indent=2, default=str))
    console.print(f"written: {out / 'bench-serving.json'}")
    return 0


def table(rows: list[dict], args: argparse.Namespace, load0: float, load1: float) -> Table:
    """The rows as a table: speeds per CPU second of the whole command, best (and
    median of the passes)."""
    title = (f"Serving engine speed ({args.hw}, {args.model}, load {args.load:g}, "
             f"{args.repeat} pass(es); load average {load0:.1f} -> {load1:.1f})")  # fmt: skip
    t = Table(title=title)
    loads = ("offered load", "of capacity") if args.capacity else ("offered load",)
    for col in ("design", "block", "requests", *loads, "GPU busy", "arrivals s",
                "span s", "CPU s", "x: arrivals / CPU s", "x: span / CPU s",
                "x: span / run CPU s", "peak RSS MiB", f">= {args.target:g}x"):  # fmt: skip
        t.add_column(col, justify="left" if col == "design" else "right")
    for r in rows:
        cpu = f"{r['best_cpu_s']:.2f}"
        speed = f"{r['speed_trace_best']:,.0f}"
        if args.repeat > 1:
            cpu += f" ({r['median_cpu_s']:.2f})"
            speed += f" ({r['speed_trace_median']:,.0f})"
        load = [f"{r['offered_load']:.2f}"]
        if args.capacity:
            load.append(f"{r['load_measured']:.2f}")
        t.add_row(r["design"], str(r["block"]), f"{r['requests']:,}",
                  *load, f"{r['gpu_util']:.0%}", f"{r['duration_s']:,.1f}",
                  f"{r['span_s']:,.1f}", cpu, speed, f"{r['speed_span_best']:,.0f}",
                  f"{r['speed_run_best']:,.0f}", f"{r['peak_rss_mib']:,.0f}",
                  "yes" if r["meets_target"] else "no")  # fmt: skip
    return t


def growth_table(rows: list[dict], sizes: list[int]) -> Table:
    """Best CPU s of the whole command per 1K requests at each request count
    (flat when the cost is linear in the requests) and the ratio of the largest
    count's to the smallest's."""
    t = Table(title="Growth: CPU s per 1K requests (whole command, best of the passes)")
    for col in ("design", "block", *(f"{n:,}" for n in sizes), f"{sizes[-1]:,} / {sizes[0]:,}"):
        t.add_column(col, justify="left" if col == "design" else "right")
    per: dict[tuple[str, int], dict[int, float]] = {}
    for r in rows:
        per.setdefault((r["design"], r["block"]), {})[r["requests"]] = (
            1000 * r["best_cpu_s"] / r["requests"]
        )
    for (d, block), by_n in per.items():
        cells = [f"{by_n[n]:.2f}" if n in by_n else "-" for n in sizes]
        lo, hi = by_n.get(sizes[0]), by_n.get(sizes[-1])
        ratio = f"{hi / lo:.2f}" if lo and hi else "-"
        t.add_row(d, str(block), *cells, ratio)
    return t

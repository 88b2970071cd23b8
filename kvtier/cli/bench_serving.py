"""``kvtier bench-serving``: how fast the serving engine runs, design by design.

Issue 13's first target in one command: every serving design at each KV
block size on the Mooncake-shaped conversation trace of
:mod:`sim.serving.bench`, with the speed per CPU second (simulated span /
CPU seconds of the run) against a target (300x real time by default).
Each (design, block) runs in a fresh interpreter (``python -m
sim.serving.bench --json``), so no run inherits another's heap, caches or
garbage-collector state, and each peak RSS is its own.  ``--repeat K``
runs the whole list K times, interleaved (design after design, then again),
so that a burst of load on a shared machine hits one pass of several
designs rather than every pass of one; the table gives the best and the
median of the K.  CPU time is what a loaded machine inflates least, but it
is inflated all the same: the load average at the start and the end is
printed and kept.  The op and flow counts show where a design's cost comes
from (CPU microseconds per flow, against ``kvtier bench``'s core alone).
Results, with machine and commit info, go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
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
    p.add_argument("--requests", type=int_arg(1), default=1000)
    p.add_argument("--blocks", default="16,256", help="KV block sizes, tokens (comma list)")
    p.add_argument("--designs", default="all", help="serving designs (comma list, or all)")
    p.add_argument("--repeat", type=int_arg(1), default=1, help="passes (best and median)")
    p.add_argument("--target", type=float_arg(0.0, strict=True), default=300.0,
                   help="speed per CPU second to meet (x real time)")  # fmt: skip
    p.add_argument("--hw", default="h100-2dimm-2ssd")
    p.add_argument("--model", default="Llama-3.1-8B")
    p.add_argument("--seed", type=int_arg(0), default=0)
    p.add_argument("--out", default="results/bench-serving")
    p.set_defaults(handler=cmd_bench_serving)


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


def check_sizes(args: argparse.Namespace, blocks: list[int]) -> None:
    """``--requests`` whose trace cannot fit in memory, and a ``--blocks`` size of
    which not one block fits the GPU's KV cache, named before any run."""
    from sim.serving.build import default_gpu_kv_bytes, gpu_blocks

    need = args.requests * REQUEST_BYTES
    if need > memory_bytes():
        raise InputError(
            f"--requests {args.requests}: the trace needs at least {need / 2**30:,.1f} GiB "
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


def run_one(design: str, block: int, args: argparse.Namespace) -> dict:
    """One run of ``python -m sim.serving.bench --json`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "sim.serving.bench", "--requests", str(args.requests),
           "--design", design, "--block", str(block), "--hw", args.hw, "--model", args.model,
           "--seed", str(args.seed), "--json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        err = InputError if done.returncode == 2 else RuntimeError  # 2: its input; else a bug
        raise err(f"{design} block {block}: the run failed ({tail})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict], target: float) -> dict:
    """The passes of one (design, block): best and median CPU time, speed from each."""
    cpu = [r["cpu_s"] for r in runs]
    first = runs[0]
    best, median = min(cpu), statistics.median(cpu)
    return {
        "design": first["design"], "block": first["block"], "requests": first["requests"],
        "span_s": first["span_s"], "cpu_s": cpu, "best_cpu_s": best, "median_cpu_s": median,
        "speed_cpu_best": first["span_s"] / best, "speed_cpu_median": first["span_s"] / median,
        "ops": first["ops"], "flows": first["flows"], "us_per_flow": 1e6 * best / first["flows"],
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "meets_target": first["span_s"] / best >= target,
    }  # fmt: skip


def cmd_bench_serving(args: argparse.Namespace) -> int:
    blocks, designs = parse_blocks(args.blocks), parse_designs(args.designs)
    out = check_out_dir(args.out)
    load_profile(args.hw), get_model(args.model)  # unknown ones: one line before any run
    check_sizes(args, blocks)
    out.mkdir(parents=True, exist_ok=True)
    console = make_console()
    load0 = os.getloadavg()
    passes: dict[tuple[str, int], list[dict]] = {}
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("bench-serving", total=args.repeat * len(blocks) * len(designs))
        for _ in range(args.repeat):
            for block in blocks:
                for d in designs:
                    bar.update(task, description=f"{d} block {block}")
                    passes.setdefault((d, block), []).append(run_one(d, block, args))
                    bar.advance(task)
    load1 = os.getloadavg()
    rows = [summarise(runs, args.target) for runs in passes.values()]
    console.print(table(rows, args, load0[0], load1[0]))
    met = sum(r["meets_target"] for r in rows)
    console.print(f"{met} of {len(rows)} (design, block) pairs at >= {args.target:g}x real time "
                  "per CPU second (best of the passes)")  # fmt: skip
    record = provenance(runs=rows, requests=args.requests, target=args.target, hw=args.hw,
                        model=args.model, seed=args.seed, loadavg=[load0, load1])  # fmt: skip
    (out / "bench-serving.json").write_text(json.dumps(record, indent=2, default=str))
    console.print(f"written: {out / 'bench-serving.json'}")
    return 0


def table(rows: list[dict], args: argparse.Namespace, load0: float, load1: float) -> Table:
    """The rows as a table: speed per CPU second, best (and median of the passes)."""
    title = (f"Serving engine speed ({args.hw}, {args.model}, {args.requests:,} requests, "
             f"{args.repeat} pass(es); load average {load0:.1f} -> {load1:.1f})")  # fmt: skip
    t = Table(title=title)
    for col in ("design", "block", "span s", "CPU s", "x real time / CPU s", "ops", "flows",
                "CPU us / flow", "peak RSS MiB", f">= {args.target:g}x"):  # fmt: skip
        t.add_column(col, justify="left" if col == "design" else "right")
    for r in rows:
        cpu = f"{r['best_cpu_s']:.2f}"
        speed = f"{r['speed_cpu_best']:,.0f}"
        if args.repeat > 1:
            cpu += f" ({r['median_cpu_s']:.2f})"
            speed += f" ({r['speed_cpu_median']:,.0f})"
        t.add_row(r["design"], str(r["block"]), f"{r['span_s']:,.1f}", cpu, speed,
                  f"{r['ops']:,}", f"{r['flows']:,}", f"{r['us_per_flow']:.1f}",
                  f"{r['peak_rss_mib']:,.0f}", "yes" if r["meets_target"] else "no")  # fmt: skip
    return t

"""``kvtier bench``: how fast the simulator itself runs.

The workload is the issue's reference shape: sparse-attention decoding on
``h20-8ssd`` with 1,000 steps x 64 layers x 8 SSDs = 512,000 SSD read flows,
plus a DRAM->GPU copy and a compute op per layer (and a CPU flow for the
software path of every read).  A scaling run doubles steps and devices.
Each run is timed against a bare simpy loop doing the same number of
timeouts (one process per step, ``flows / steps`` timeouts each) in the same
process, so the ratio ``sim / bare`` measures the simulator's overhead over
simpy itself.  Both are timed in wall seconds and in CPU seconds of this
process; the ratio is taken on CPU seconds, which a machine shared with other
work inflates far less than wall time.  ``--ssds`` sets the number of SSDs
(each attached like ssd0).  Results (with machine and commit info) go to
``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import simpy
from rich.table import Table

from hwprofiles import HardwareProfile, load_profile
from kvtier.contracts.console import make_console
from kvtier.contracts.provenance import provenance
from kvtier.contracts.validate import int_arg
from sim.config import ConfigError
from sim.executor import simulate
from sim.limits import PLAN_OPS_BEYOND_READS, check_plan_ops
from sim.models import decode_layer_cost, get_model
from sim.scenarios.sparse_decode import SparseDecodeShape, build_plan, entry_counts


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark the simulator's own speed")
    p.add_argument("--steps", type=int_arg(1), default=1000)
    p.add_argument("--layers", type=int_arg(1), default=64)
    p.add_argument("--hw", default="h20-8ssd")
    p.add_argument("--model", default="Qwen3-32B", help="64 layers, as the reference shape")
    p.add_argument("--ssds", type=int_arg(0), default=0, help="SSDs (default: the profile's)")
    p.add_argument(
        "--scaling",
        action="store_true",
        help="also run 2x steps and 2x devices (16 SSDs on a widened profile)",
    )
    p.add_argument("--out", default="results/bench")
    p.set_defaults(handler=cmd_bench)


def bench_once(
    profile_name: str, steps: int, layers: int, model: str, ssd_factor: int = 1, ssds: int = 0
) -> dict:
    """One timed run: ``ssd_factor`` times the profile's SSDs, or ``ssds`` of them."""
    profile = load_profile(profile_name)
    n_ssds = ssds or len(profile.ssd_names) * ssd_factor
    if n_ssds != len(profile.ssd_names):
        profile = with_ssds(profile, n_ssds)
    ssds = profile.ssd_names
    card = get_model(model)
    context, batch, sparsity = 131072, 1, 0.1
    cost = decode_layer_cost(card, batch, context, sparsity)
    shape = SparseDecodeShape(
        steps=steps,
        layers=layers,
        ssds=tuple(ssds),
        gpu="gpu0",
        dram=profile.dram_names[0],
        entries_per_layer=round(context * sparsity) * batch,
        entry_bytes=card.kv_bytes_per_token_layer,
        ios_per_entry=1,
        flops_per_layer=cost.flops,
        hbm_bytes_per_layer=cost.hbm_bytes,
        region_entries=-(-context * batch // len(ssds)),  # each layer's KV striped over SSDs
    )
    t0 = time.perf_counter()
    plan = build_plan(shape, entry_counts(shape, "even", None))
    t1, c1 = time.perf_counter(), time.process_time()
    records = simulate(plan, profile)
    t2, c2 = time.perf_counter(), time.process_time()
    reads = steps * layers * len(ssds)
    flows = records.stats["flows"]
    bare_s, bare_cpu_s = bare_simpy_s(steps, flows)
    return {
        "steps": steps,
        "layers": layers,
        "ssds": len(ssds),
        "ops": plan.num_rows,
        "ssd_flows": reads,
        "flows": records.stats["flows"],
        "reratings": records.stats["reratings"],
        "build_s": t1 - t0,
        "sim_s": t2 - t1,
        "sim_cpu_s": c2 - c1,
        "wall_s": t2 - t0,
        "flows_per_s": records.stats["flows"] / (t2 - t1),
        "ssd_flows_per_s": reads / (t2 - t1),
        "simulated_s": records.makespan_s,
        "bare_simpy_s": bare_s,
        "bare_simpy_cpu_s": bare_cpu_s,
        "ratio_to_bare": (c2 - c1) / bare_cpu_s,
        "wall_ratio_to_bare": (t2 - t1) / bare_s,
    }


def bare_simpy_s(processes: int, timeouts: int) -> tuple[float, float]:
    """Wall and CPU seconds a bare simpy loop takes: ``processes`` processes,
    ``timeouts`` timeouts in all (split as evenly as possible), each of a distinct
    small delay so the event queue interleaves the processes as the simulator's does."""
    env = simpy.Environment()
    base, extra = divmod(timeouts, processes)

    def proc(k: int, n: int):
        delay = 1e-6 * (1 + k % 7)
        for _ in range(n):
            yield env.timeout(delay)

    for k in range(processes):
        env.process(proc(k, base + (k < extra)))
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()
    return time.perf_counter() - t0, time.process_time() - c0


def with_ssds(profile: HardwareProfile, n: int) -> HardwareProfile:
    """``profile`` with ``n`` SSDs of its one SSD group, each attached like ssd0
    (SSDs beyond ``n`` and their links dropped, new ones added)."""
    if len(profile.ssds) != 1 or n <= 0:
        raise ConfigError(f"--ssds {n}: needs a profile with one SSD group and n > 0")
    old = profile.ssd_names
    template = next(lk for lk in profile.topology.links if "ssd0" in lk.between)
    gone = set(old[n:])
    links = [lk for lk in profile.topology.links if not gone.intersection(lk.between)]
    for k in range(len(old), n):
        ends = tuple(f"ssd{k}" if e == "ssd0" else e for e in template.between)
        links.append(dataclasses.replace(template, name=f"ssd{k}.link", between=ends))
    groups = (dataclasses.replace(profile.ssds[0], count=n),)
    topo = dataclasses.replace(profile.topology, links=tuple(links))
    return dataclasses.replace(profile, name=f"{profile.name}-{n}ssd", ssds=groups, topology=topo)


def cmd_bench(args: argparse.Namespace) -> int:
    for flag, value in (("--steps", args.steps), ("--layers", args.layers)):
        if value <= 0:
            raise ConfigError(f"{flag} must be > 0, got {value}")
    if args.ssds < 0:
        raise ConfigError(f"--ssds must be >= 0, got {args.ssds}")
    n_ssd = args.ssds or len(load_profile(args.hw).ssd_names)
    scale = 2 if args.scaling else 1  # the scaling runs double the steps, then the SSDs
    check_plan_ops(
        scale * args.steps * args.layers * (n_ssd + PLAN_OPS_BEYOND_READS),
        f"--steps {args.steps} x --layers {args.layers} x ({n_ssd} SSD reads + 2) ops",
    )
    console = make_console()
    runs = [(args.steps, 1)]
    if args.scaling:
        runs += [(2 * args.steps, 1), (args.steps, 2)]
    rows = []
    for steps, factor in runs:
        ssds = args.ssds * factor
        console.print(
            f"bench: {steps} steps x {args.layers} layers x "
            f"{ssds or ('all' if factor == 1 else f'{factor}x the')} SSDs ..."
        )
        rows.append(bench_once(args.hw, steps, args.layers, args.model, factor, ssds))
    table = Table(
        title=f"Simulator speed ({args.hw}, {args.model}; target: 1,000 x 64 x 8 in under 10 s, "
        "within 3x of bare simpy)"
    )
    for col in (
        "steps",
        "SSDs",
        "ops",
        "SSD flows",
        "all flows",
        "build s",
        "sim s",
        "sim CPU s",
        "wall s",
        "flows/s",
        "bare CPU s",
        "ratio (CPU)",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['steps']:,}",
            str(r["ssds"]),
            f"{r['ops']:,}",
            f"{r['ssd_flows']:,}",
            f"{r['flows']:,}",
            f"{r['build_s']:.2f}",
            f"{r['sim_s']:.2f}",
            f"{r['sim_cpu_s']:.2f}",
            f"{r['wall_s']:.2f}",
            f"{r['flows_per_s']:,.0f}",
            f"{r['bare_simpy_cpu_s']:.2f}",
            f"{r['ratio_to_bare']:.2f}x",
        )
    console.print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(provenance(runs=rows), indent=2, default=str))
    console.print(f"written: {out / 'bench.json'}")
    return 0

"""``kvtier profiles`` and ``kvtier models``: what the catalogs hold."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from hwprofiles import list_profiles, load_profile
from kvtier.contracts.console import make_console
from sim.hw.figures import path_figures
from sim.hw.measured import where
from sim.models import get_model, load_catalog


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profiles", help="list hardware profiles, or show one")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("name", nargs="?", help="profile name or YAML path (for show)")
    p.set_defaults(handler=profiles)
    m = sub.add_parser("models", help="list the model catalog, or show one model")
    m.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    m.add_argument("name", nargs="?", help="model name (for show)")
    m.set_defaults(handler=models)


def _need_name(command: str) -> int:
    print(f"kvtier: error: {command} show needs a NAME", file=sys.stderr)
    return 2


def profiles(args: argparse.Namespace) -> int:
    console = make_console()
    if args.action == "show":
        if not args.name:
            return _need_name("profiles")
        show_profile(console, args.name)
        return 0
    table = Table(title="Hardware profiles")
    for col in ("name", "GPUs", "HBM", "DRAM", "SSDs", "SSD read (sum)"):
        table.add_column(col, justify="left" if col in ("name", "GPUs", "SSDs") else "right")
    for name in list_profiles():
        p = load_profile(name)
        ssd_bw = sum(p.ssd(s).read_gbps for s in p.ssd_names)
        ssd_models = ", ".join(f"{g.count}x {_short(g.model)}" for g in p.ssds) or "none"
        dram = sum(m.capacity_gib for m in p.dram)
        table.add_row(
            name,
            f"{p.gpu.count}x {_short(p.gpu.model)}",
            f"{p.gpu.hbm_capacity_gib:g} GiB",
            f"{dram:.0f} GiB",
            ssd_models,
            f"{ssd_bw:.1f} GB/s",
        )
    console.print(table)
    console.print("details and derived path figures: kvtier profiles show NAME")
    return 0


def _short(model: str) -> str:
    """A model name without its parenthesised remarks."""
    return model.split(" (")[0]


def show_profile(console: Console, name: str) -> None:
    p = load_profile(name)
    console.print(f"[bold]{p.name}[/bold]: {p.description}  ({p.source_file})")
    g = p.gpu
    console.print(
        f"  GPUs: {g.count}x {g.model}, {g.hbm_capacity_gib} GiB HBM at "
        f"{g.hbm_gbps:g} GB/s, {g.bf16_tflops:g} TFLOP/s bf16"
    )
    console.print(f"  GPU step time: {where(p)}")
    console.print(f"  CPU: {p.cpu.model}, {p.cpu.cores} cores")
    for m in p.dram:
        console.print(f"  DRAM {m.name}: {m.capacity_gib:g} GiB at {m.gbps:g} GB/s")
    for s in p.ssds:
        console.print(
            f"  SSD: {s.count}x {s.model}: read {s.read_gbps:g} GB/s "
            f"{s.read_iops:,.0f} IOPS {s.read_latency_us:g} us; write {s.write_gbps:g} "
            f"GB/s {s.write_iops:,.0f} IOPS {s.write_latency_us:g} us; "
            f"QD<= {s.max_queue_depth}"
        )
    sw = p.software
    console.print(
        f"  software (us per I/O): kernel fs {sw.kernel_fs_per_io_us:g}, io_uring "
        f"{sw.io_uring_per_io_us:g}, passthrough {sw.passthrough_per_io_us:g}, "
        f"GDS +{sw.gds_per_io_us:g}; syscall {sw.syscall_us:g}; "
        + (f"io_uring per op {sw.io_uring_per_op_us:g}; " if sw.io_uring_per_op_us else "")
        + f"GPUDirect {'yes' if sw.gpudirect else 'no'}; "
        + f"cores per SSD op {sw.io_submit_cores}"
    )
    if p.ssd_names:
        read = sum(p.ssd(s).read_gbps for s in p.ssd_names)
        iops = sum(p.ssd(s).read_iops for s in p.ssd_names)
        console.print(
            f"  aggregate SSD read: {read:.1f} GB/s, {iops / 1e6:.2f} M IOPS "
            f"({iops * 4096 / 1e9:.1f} GB/s at 4 KiB)"
        )
    if p.assumptions:
        ranges = ", ".join(f"{a.field} {a.low:g}-{a.high:g}" for a in p.assumptions)
        console.print(f"  assumptions (ranges for --sensitivity): {ranges}")
    table = Table(title="Concurrent transfers (max-min over the topology)")
    for col in ("transfer", "flows", "GB/s", "at capacity"):
        table.add_column(col)
    for f in path_figures(p):
        table.add_row(f.label, str(f.flows), f"{f.total_gbps:.1f}", f.bottleneck)
    console.print(table)


def models(args: argparse.Namespace) -> int:
    console = make_console()
    if args.action == "show":
        if not args.name:
            return _need_name("models")
        card = get_model(args.name)
        for key, value in card.__dict__.items():
            console.print(f"  {key}: {value}")
        console.print(
            f"  KV bytes/token: {card.kv_bytes_per_token:,} "
            f"({card.kv_bytes_per_token / 2**20:.3f} MiB)"
        )
        return 0
    table = Table(title="Model catalog")
    for col in ("model", "layers", "q/kv heads", "head dim", "params (B)", "KV/token", "context"):
        table.add_column(col, justify="right" if col != "model" else "left")
    for card in load_catalog().values():
        params = f"{card.params_total_b:g}"
        if card.is_moe:
            params += f" ({card.params_active_b:g} active)"
        table.add_row(
            card.name,
            str(card.layers),
            f"{card.q_heads}/{card.kv_heads}",
            str(card.head_dim),
            params,
            f"{card.kv_bytes_per_token / 2**10:.0f} KiB",
            f"{card.max_context:,}",
        )
    console.print(table)
    return 0

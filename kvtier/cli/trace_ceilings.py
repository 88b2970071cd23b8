"""``kvtier trace ceilings FILE``: a request trace's hit-rate ceilings.

The hit rate an infinite cache, Belady's MIN and LRU reach on the trace at
each capacity given (:mod:`sim.serving.oracle`), in engine blocks of
``--block`` tokens (default: the trace's own hashed block).  A capacity is
given in blocks (``--capacity-blocks``) or in GiB of a model's KV
(``--capacity-gib`` with ``--model``: blocks = GiB / (block tokens x the
model's KV bytes per token), rounded down).
"""

from __future__ import annotations

import argparse

from rich.table import Table

from kvtier.cli.trace_requests import _input_args, _read
from kvtier.contracts.console import make_console
from kvtier.contracts.validate import float_arg, int_arg
from sim.models import get_model
from sim.serving.oracle import accesses, ceilings
from sim.serving.requests import RequestError, load_requests
from traces.errors import TraceError

GIB = 2**30


def add_parser(group: argparse._SubParsersAction) -> None:
    p = group.add_parser(
        "ceilings", help="hit-rate ceilings of a request trace: infinite, Belady and LRU caches"
    )
    _input_args(p)
    p.add_argument(
        "--block", type=int_arg(1), default=None, help="engine block, tokens (default: the trace's)"
    )
    p.add_argument(
        "--capacity-blocks", type=int_arg(0), nargs="+", default=[], metavar="N",
        help="cache capacities in engine blocks",
    )  # fmt: skip
    p.add_argument(
        "--capacity-gib", type=float_arg(0.0), nargs="+", default=[], metavar="GIB",
        help="cache capacities in GiB of --model's KV",
    )  # fmt: skip
    p.add_argument("--model", help="model whose KV bytes per token size --capacity-gib")
    p.set_defaults(handler=ceilings_command)


def ceilings_command(args: argparse.Namespace) -> int:
    if not args.capacity_blocks and not args.capacity_gib:
        raise TraceError("trace ceilings: give --capacity-blocks or --capacity-gib")
    if args.capacity_gib and not args.model:
        raise TraceError("trace ceilings: --capacity-gib needs --model")
    card = get_model(args.model) if args.model else None  # an unknown model fails before reading
    trace = _read(args.file, args.format, args.block_tokens)
    block = args.block or trace.block_tokens
    table = trace.table.replace_schema_metadata({"block_tokens": str(trace.block_tokens)})
    try:
        reqs = load_requests(table, block)
    except RequestError as exc:
        raise TraceError(f"{args.file}: --block {block}: {exc}") from None
    acc = accesses([r.hashes for r in reqs], [r.input_tokens for r in reqs], block)
    block_bytes = block * card.kv_bytes_per_token if card else 0
    caps = [(n, n * block_bytes / GIB if card else None) for n in args.capacity_blocks]
    caps += [(int(g * GIB // block_bytes), g) for g in args.capacity_gib]
    console = make_console()
    console.print(
        f"{args.file}: {len(reqs):,} requests, {len(acc.ids):,} block lookups of {block} tokens, "
        f"{acc.distinct:,} distinct blocks (a cache of as many reaches the infinite ceiling)"
    )
    out = Table(title="hit-rate ceilings (hit tokens / prompt tokens, %)")
    for col in ("capacity blocks", "GiB", "infinite", "Belady", "LRU"):
        out.add_column(col, justify="right")
    for n, gib in sorted(caps):
        c = ceilings(acc, n)
        pct = [f"{100 * x:.1f}" for x in (c.infinite, c.belady, c.lru)]
        out.add_row(f"{n:,}", "-" if gib is None else f"{gib:,.2f}", *pct)
    console.print(out)
    return 0

"""``kvtier trace stats | convert | gen-conversations``: request traces from the shell.

``stats FILE`` prints the rate, the length percentiles and the prefix-reuse
ratio of any supported trace; ``convert FILE --out OUT.parquet`` writes the
internal table (optionally windowed and rate-scaled); ``gen-conversations``
writes a multi-turn conversation trace.  Handlers return exit codes; user
mistakes raise :class:`TraceError`, which ``kvtier`` prints as one line.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kvtier.contracts.console import make_console
from kvtier.contracts.validate import check_out_file, float_arg, int_arg
from traces.conversation import ConversationParams, Exponential, generate_conversations
from traces.errors import TraceError
from traces.request_readers import FORMATS, TraceWarning, read_trace
from traces.requests import RequestTrace, TraceStats


def add_parsers(group: argparse._SubParsersAction) -> None:
    s = group.add_parser("stats", help="rate, lengths and prefix-reuse ratio of a request trace")
    _input_args(s)
    s.set_defaults(handler=stats_command)

    c = group.add_parser("convert", help="convert a request trace to the internal Parquet table")
    _input_args(c)
    c.add_argument("--out", required=True, type=Path, help="output .parquet file")
    c.add_argument(
        "--window",
        nargs=2,
        type=float_arg(0.0),
        metavar=("T0", "T1"),
        help="keep requests arriving in [T0, T1) seconds, shifted to start at 0",
    )
    c.add_argument(
        "--scale-rate",
        type=float_arg(0.0, strict=True),
        metavar="F",
        help="multiply the request rate by F (arrivals / F), after --window",
    )
    c.set_defaults(handler=convert_command)

    g = group.add_parser("gen-conversations", help="generate a multi-turn conversation trace")
    g.add_argument("--sessions", type=int_arg(1), default=1000, help="sessions (default 1000)")
    g.add_argument(
        "--rate",
        type=float_arg(0.0, strict=True),
        default=1.0,
        help="Poisson session arrivals per second",
    )
    g.add_argument("--seed", type=int_arg(0), default=0)
    g.add_argument("--out", required=True, type=Path, help="output .parquet file")
    g.add_argument("--block-tokens", type=int_arg(1), default=512, help="tokens per hashed block")
    g.add_argument(
        "--system-prompt-tokens",
        type=int_arg(0),
        default=0,
        help="a system prompt shared by every session",
    )
    g.add_argument(
        "--think-s",
        type=float_arg(0.0),
        default=30.0,
        help="mean think time between turns (exponential), seconds",
    )
    g.add_argument(
        "--arrivals-from",
        type=Path,
        metavar="TRACE",
        help="start sessions at the first N arrivals of this trace instead of Poisson",
    )
    g.set_defaults(handler=gen_command)


def _input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", *FORMATS),
        help="trace format (default: from the extension or CSV header)",
    )
    p.add_argument(
        "--block-tokens",
        type=int_arg(1),
        default=None,
        help="tokens per hash id in a Mooncake file (default 512)",
    )


def _read(path: Path, fmt: str = "auto", block_tokens: int | None = None) -> RequestTrace:
    """Read, printing reader warnings as ``kvtier: warning:`` lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        trace = read_trace(path, fmt, block_tokens)
    for w in caught:
        if issubclass(w.category, TraceWarning):
            print(f"kvtier: warning: {w.message}", file=sys.stderr)
    return trace


def stats_command(args: argparse.Namespace) -> int:
    trace = _read(args.file, args.format, args.block_tokens)
    print_stats(make_console(), trace)
    return 0


def convert_command(args: argparse.Namespace) -> int:
    check_out_file(args.out)  # before reading a large trace
    if args.window and not args.window[0] < args.window[1]:
        raise TraceError(f"--window: T0 must be < T1, got {args.window[0]:g} {args.window[1]:g}")
    trace = _read(args.file, args.format, args.block_tokens)
    if args.window:
        trace = trace.window(*args.window)
        if len(trace) == 0:
            raise TraceError(
                f"{args.file}: no request arrives in [{args.window[0]}, {args.window[1]})"
            )
    if args.scale_rate is not None:
        trace = trace.scale_rate(args.scale_rate)
    _write(trace, args.out)
    return 0


def gen_command(args: argparse.Namespace) -> int:
    check_out_file(args.out)
    params = ConversationParams(
        sessions=args.sessions,
        rate=args.rate,
        think_time_s=Exponential(args.think_s),
        system_prompt_tokens=args.system_prompt_tokens,
        block_tokens=args.block_tokens,
    )
    starts = None
    if args.arrivals_from is not None:
        source = _read(args.arrivals_from)
        if len(source) < args.sessions:
            raise TraceError(
                f"{args.arrivals_from}: {len(source)} arrivals, "
                f"fewer than --sessions {args.sessions}"
            )
        starts = source.arrival_s[: args.sessions]
    _write(generate_conversations(params, seed=args.seed, session_starts=starts), args.out)
    return 0


def _write(trace: RequestTrace, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    trace.write_parquet(out)
    console = make_console()
    print_stats(console, trace)
    console.print(f"wrote {out} ({len(trace)} requests)")


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def print_stats(console: Console, trace: RequestTrace) -> TraceStats:
    """The rich tables ``kvtier trace stats`` prints."""
    s = trace.stats()
    console.print(f"[bold]request trace[/bold] {trace.source}")
    lengths = Table()
    lengths.add_column("tokens")
    for col in ("mean", "p50", "p90", "p99", "max"):
        lengths.add_column(col, justify="right")
    for name, d in (("input", s.input_tokens), ("output", s.output_tokens)):
        lengths.add_row(name, *(_num(d[k]) for k in ("mean", "p50", "p90", "p99", "max")))
    console.print(lengths)
    summary = Table(show_header=False)
    summary.add_column("quantity")
    summary.add_column("value", justify="right")
    reuse = "- (no hashes)" if s.prefix_reuse is None else f"{s.prefix_reuse:.4f}"
    rows = [
        ("requests", f"{s.requests:,}"),
        ("duration", f"{s.duration_s:,.1f} s"),
        ("rate", f"{_num(s.rate_rps, ',.3f')} req/s"),
        ("sessions", f"{s.sessions:,}" if s.sessions else "- (unknown)"),
        ("turns per session (mean / max)", f"{_num(s.turns_mean, '.2f')} / {s.turns_max}"),
        (f"hashed blocks ({trace.block_tokens} tokens)", f"{s.blocks:,}"),
        ("prefix-reuse ratio (infinite cache)", reuse),
        ("reused token fraction", _num(s.reused_token_fraction, ".4f")),
        ("outputs clipped 0 -> 1", f"{s.clipped_outputs:,}"),
        ("rows sorted by arrival", f"{s.reordered:,}"),
    ]
    if trace.licence:
        rows.append(("licence", trace.licence))
    for row in rows:
        summary.add_row(*row)
    console.print(summary)
    if trace.attribution:
        console.print(f"attribution: {trace.attribution}")
    return s

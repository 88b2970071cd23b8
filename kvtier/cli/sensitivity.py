"""``--sensitivity`` of ``kvtier sim`` and ``kvtier sweep``: each assumption at its range
ends (:mod:`sim.sensitivity`), printed as a tornado table, written as CSV and a plot."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from sim.config import ConfigError
from sim.sensitivity import (
    MOVE,
    TIE_REL,
    UNREAD,
    Sensitivity,
    fragile,
    knobs,
    sensitivity,
)


def add_sensitivity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="also rerun with each assumption of the profile and designs at its range ends, "
        "one at a time: a tornado table, tornado.csv and tornado.png",
    )
    p.add_argument(
        "--assumptions",
        help="with --sensitivity: only these assumptions (comma-separated, e.g. "
        "efficiency.tensor,cpu.core_mem_gbps)",
    )


def chosen(args: argparse.Namespace, cfg, profile) -> tuple[str, ...]:
    """The ``--assumptions`` names, checked against what a run of ``cfg`` on ``profile``
    would vary (before any work: none to vary, or a name not among them, is one line)."""
    only = tuple(a.strip() for a in (args.assumptions or "").split(",") if a.strip())
    if not args.sensitivity:
        if args.assumptions is not None:
            raise ConfigError("--assumptions: goes with --sensitivity")
        return only
    if args.assumptions is not None and not only:
        raise ConfigError("--assumptions: no names given")
    knobs(cfg, profile, only)
    return only


def report(console: Console, args, cfg, profile, executor, out: Path) -> Sensitivity:
    """Run the sensitivity of ``cfg`` on ``profile``; print it; write CSVs and the plot
    into ``out`` (claimed by the caller)."""
    from analysis.tornado import write_tornado

    only = chosen(args, cfg, profile)
    n = 1 + 2 * len(knobs(cfg, profile, only))
    with Progress(console=console) as bar:
        task = bar.add_task(f"sensitivity: {n} runs, design point by design point", total=None)
        s = sensitivity(
            cfg, profile, executor, only, lambda d, t: bar.update(task, completed=d, total=t)
        )
    out.mkdir(parents=True, exist_ok=True)
    s.runs.to_csv(out / "sensitivity-runs.csv", index=False)
    s.table.to_csv(out / "tornado.csv", index=False)
    title = f"{cfg.name} on {profile.name}: {s.headline}"
    write_tornado(s.table, out / "tornado.png", title)
    console.print(tornado_table(s, title))
    for line in [*fragile_lines(s), *tie_lines(s)]:
        console.print(line)
    if s.unread:
        console.print(f"{UNREAD} in its run as given (not rerun): {', '.join(s.unread)}")
    console.print(
        f"design points simulated: {s.simulated} of {s.points} (a point whose read numbers "
        "an end leaves as given keeps its result; equal configurations run once)"
    )
    console.print(f"sensitivity: {out}/tornado.csv, tornado.png, sensitivity-runs.csv")
    return s


def tornado_table(s: Sensitivity, title: str) -> Table:
    """Per assumption: its range, each design's headline at low / as given / high,
    the top two's ratio at each, and the verdict; largest effect first."""
    t = s.table
    designs = [c.removesuffix(" @base") for c in t.columns if c.endswith(" @base")]
    better = "higher" if s.higher else "lower"
    table = Table(title=f"{title} ({better} is better): low / as given / high")
    for col in ("assumption", "range", *designs, f"{t['top'].iloc[0]} / {t['second'].iloc[0]}"):
        table.add_column(col, justify="left" if col == "assumption" else "right")
    table.add_column("verdict")
    for r in t.to_dict("records"):
        cells = [_three(r[f"{d} @low"], r[f"{d} @base"], r[f"{d} @high"]) for d in designs]
        ratio = _three(r["ratio_low"], r["ratio_base"], r["ratio_high"], "{:.2f}")
        verdict = r["verdict"] + (f" at {r['flips_at']}" if r["flips"] else "")
        verdict += "".join(
            f", {what} at {r[f'{col}_at']}"
            for col, what in (("tied", "tied"), ("no_figure", "no figure"))
            if r[col]
        )
        style = "bold red" if r["flips"] or r["moves"] else ""
        rng = f"{r['low']:g} / {r['value']:g} / {r['high']:g}"
        table.add_row(
            r["assumption"], rng, *cells, ratio, f"[{style}]{verdict}" if style else verdict
        )
    return table


def fragile_lines(s: Sensitivity) -> list[str]:
    """One line per fragile assumption (flips the ranking, or moves the ratio > 25%)."""
    f = fragile(s.table)
    if f.empty:
        return [
            f"fragile assumptions: none (each keeps the ranking and moves the top two's "
            f"{s.headline} ratio by at most {MOVE:.0%})"
        ]
    out = [f"fragile assumptions ({len(f)} of {len(s.table)}):"]
    for r in f.to_dict("records"):
        what = f"flips the ranking ({r['swap']})" if r["flips"] else f"moves the ratio > {MOVE:.0%}"
        out.append(
            f"  {r['assumption']} in [{r['low']:g}, {r['high']:g}] (as given {r['value']:g}): "
            f"{what}; {r['top']} / {r['second']} = {r['ratio_low']:.2f} / "
            f"{r['ratio_base']:.2f} / {r['ratio_high']:.2f}; why the range: {r['why']}"
        )
    return out


def tie_lines(s: Sensitivity) -> list[str]:
    """One line per assumption at whose ends designs tie or lose their figure: neither
    is a flip (a tied pair has no order; a design with no figure has no place), and
    a design that loses its figure at an end is a finding of its own."""
    out = []
    for r in s.table.to_dict("records"):
        if r["tied"]:
            out.append(
                f"  {r['assumption']} in [{r['low']:g}, {r['high']:g}]: tied within "
                f"{TIE_REL:g} of each other, not a flip: {r['tied']}"
            )
        if r["no_figure"]:
            out.append(
                f"  {r['assumption']} in [{r['low']:g}, {r['high']:g}]: no figure, not "
                f"ranked: {r['no_figure']}"
            )
    if out:
        out.insert(0, "ties and lost figures (not flips):")
    return out


def _three(a: float, b: float, c: float, fmt: str = "{:.3g}") -> str:
    return " / ".join("-" if math.isnan(x) else fmt.format(x) for x in (a, b, c))

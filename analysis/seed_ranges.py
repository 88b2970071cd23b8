"""Each seed figure of a scenario across a sensitivity run: kvtier's value as given and
at every assumption's range ends, and whether its verdict changes within the ranges.

``kvtier sim --scenario S --sensitivity`` writes ``sensitivity-runs.csv`` (every run's
summary rows, with ``assumption``, ``at`` and ``value``); the scenario's
``seed_figures:`` block (:mod:`sim.scenarios.seedref`) says which rows and columns
make each paper figure.  This script compares every run with the figures exactly as
``kvtier sim`` does (:func:`sim.scenarios.seedref.compare`) and prints, per figure
and row, the as-given value, the lowest and highest over the runs with the
assumption and end that gave each, and the verdict ("ok" / "OFF") as given and
every assumption end at which it differs.  A plain ``summary.csv`` (no ``assumption``
column: one run, e.g. of an earlier commit) gives the figures of that run alone, so
an earlier run is read with today's figure definitions.  Never runs a simulation.

    python -m analysis.seed_ranges SCENARIO_YAML RESULTS_DIR/sensitivity-runs.csv [--csv OUT]
    python -m analysis.seed_ranges SCENARIO_YAML OLD_RESULTS_DIR/summary.csv
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd
import yaml

from sim.scenarios.seedref import by_design_name, compare, load_seed_figures, verdict

BASE = "(as given)"


def ranges(scenario: str | Path, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per figure row: as given, low and high over the runs, verdict changes."""
    figs = load_seed_figures(scenario)
    if figs is None:
        raise SystemExit(f"{scenario}: no seed_figures block")
    if "assumption" not in runs.columns:
        runs = runs.assign(assumption=BASE, at="base")
    if _kind(scenario) == "kvdrive":  # as kvtier sim names a kvdrive run's rows
        runs = by_design_name(runs)
    per_run: dict[str, list] = {}
    for (assumption, at), df in runs.groupby(["assumption", "at"], sort=False):
        label = BASE if at == "base" else f"{assumption} {at}"
        per_run[label] = compare(figs, df.reset_index(drop=True))
    base = per_run.pop(next(k for k in per_run if k == BASE))
    out = []
    for i, b in enumerate(base):
        vals = [(b.kvtier, BASE)] + [(rows[i].kvtier, k) for k, rows in per_run.items()]
        finite = [(v, k) for v, k in vals if v is not None and math.isfinite(v)]
        lo = min(finite, key=lambda p: p[0], default=(math.nan, ""))
        hi = max(finite, key=lambda p: p[0], default=(math.nan, ""))
        changed = [k for k, rows in per_run.items() if verdict(rows[i]) != verdict(b)]
        out.append(
            {
                "figure": b.figure.name,
                "where": b.where,
                "section": b.figure.section,
                "relation": b.figure.relation,
                "seed": b.figure.seed,
                "unit": b.figure.unit,
                "kvtier": b.kvtier,
                "verdict": verdict(b),
                "low": lo[0],
                "low_at": lo[1],
                "high": hi[0],
                "high_at": hi[1],
                "verdict_changes_at": "; ".join(changed),
            }
        )
    return pd.DataFrame(out)


def _kind(scenario: str | Path) -> str:
    """The scenario's workload kind (its YAML's ``workload.kind``)."""
    raw = yaml.safe_load(Path(scenario).read_text())
    return str((raw.get("workload") or {}).get("kind", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", help="the scenario YAML (its seed_figures block)")
    ap.add_argument("runs", help="sensitivity-runs.csv of a --sensitivity run")
    ap.add_argument("--csv", help="also write the table here")
    args = ap.parse_args()
    table = ranges(args.scenario, pd.read_csv(args.runs))
    if args.csv:
        table.to_csv(args.csv, index=False)
    with pd.option_context(
        "display.width", 250, "display.max_columns", 20, "display.max_colwidth", 60
    ):
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()

"""A seed paper's own figures beside kvtier's: the ``seed_figures`` block.

A scenario that reproduces a seed may carry the numbers the seed reports, each
with the section, figure or table it comes from, so that ``kvtier sim`` prints
them beside what kvtier computed and the ratio of the two::

    seed_figures:
      seed: "004 Unified KV Pooling"
      figures:
        - name: pool TTFT
          section: "§V-B1, Fig. 9a"
          metric: ttft_mean_s          # a column of the scenario's summary
          unit: s
          seed: 5.6
          at: {design: Unified KV pooling, model: Llama-3.1-8B, context_tokens: 131072}
        - name: TTFT LMCache / pool
          section: "§V-B1, Fig. 9a"
          metric: ttft_mean_s
          unit: x
          seed: 2.9
          at: {design: LMCache, model: Llama-3.1-8B, context_tokens: 131072}
          over: {design: Unified KV pooling}

What a figure means:

* ``at`` selects summary rows by their key columns (``design``, ``model``,
  ``context_tokens``, ``batch``, ``variant``, ``hw``: the profile, where the
  report adds it); kvtier's value is ``metric`` there.  A key ``at``
  leaves out expands the figure: one table row per value of it (the seed's
  ablation names no model, so each model gets a row).
* ``over`` makes the figure a ratio: ``metric`` at ``at`` divided by ``metric``
  at ``at`` with ``over``'s keys replaced (same model and context unless
  ``over`` names them), e.g. "LMCache's TTFT / the pool's", or "TTFT at 128K /
  TTFT at 1K" (``over: {context_tokens: 1024}``).
* ``reduce: max`` (or ``min``) keeps one row of the expansion, the largest
  (smallest) value: the seed's "up to 1.70x over its pairs".
* ``relation``: ``=`` (default) when the seed gives a value; ``>`` or ``<``
  when it gives an ordering or a bound ("GPU-only remains the fastest": a
  span ratio ``> 1``; "all under 10 s": ``< 10``).

``gap`` names the mechanism behind a row more than ``tolerance`` away (one
line; the arithmetic is in the docs the scenario names): ``kvtier sim`` prints
it under the tables for every row that is off (:func:`gap_lines`).

A scenario's ``sweep_figures`` block (the same schema) holds the seed's figures
over factors -- prefixes, SSD types, SSD counts -- that one run cannot show;
``kvtier sweep`` prints it under the sweep's table.  Its ``at`` and ``over``
may also name any workload field (the sweep's factor columns, e.g. ``ssds``);
a factor swept is part of a row's "where" and of what a ratio's denominator
shares with its numerator (the same point), and a figure whose selection the
sweep ran no point of is left out of the table (the count is printed).

A row is *off* when kvtier's value is more than ``tolerance`` (default 25%)
away from the seed's (``|kvtier / seed - 1| > tolerance``), when a stated
ordering does not hold, or, for a seed value of 0 (no ratio exists), when
kvtier's value is not 0.  A row whose selection matches no run (a variant
the scenario does not have) says so instead of guessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwprofiles.loader import build_dataclass, read_yaml

if TYPE_CHECKING:  # a scenario loads without pandas (the summary it compares is one) or rich
    import pandas as pd
    from rich.table import Table

# summary columns a figure may select on; a ratio's denominator is the numerator's row
# with ``over``'s keys replaced, so it shares the numerator's SHARED keys (a variant's
# name is its own: ``over`` names the denominator's where it matters)
KEYS = ("design", "model", "context_tokens", "batch", "variant", "hw")
SHARED = ("design", "model", "context_tokens", "batch", "hw")
SHOWN = ("model", "context_tokens", "batch")  # a row's "where", when they vary
REDUCES = ("", "max", "min")
RELATIONS = ("=", ">", "<")
UNITS = {"s": 1.0, "ms": 1e3, "x": 1.0, "%": 100.0, "tok/s": 1.0}  # display scale of a value


@dataclass(frozen=True)
class SeedFigure:
    """One number the seed reports (see the module docstring)."""

    name: str  # what the seed reports, in a few words
    section: str  # where: "§V-B1, Fig. 9a"
    metric: str  # summary column compared
    unit: str  # one of UNITS; "%" values are fractions (0.06 = 6%)
    seed: float  # the seed's value (or bound, for relation > / <), in metric units
    at: dict[str, Any]  # selection of the numerator rows
    over: dict[str, Any] = field(default_factory=dict)  # ratio: keys changed for the denominator
    relation: str = "="
    note: str = "-"  # how the seed's words were read into a number
    gap: str = ""  # the mechanism of a gap over the tolerance, where one is off
    # "max" / "min": one row, the largest / smallest value over the selection's
    # expansion (the seed's "up to 1.70x" is a maximum over its pairs)
    reduce: str = ""


@dataclass(frozen=True)
class SeedFigures:
    """A seed's figures for one scenario."""

    seed: str  # which seed: "004 Unified KV Pooling"
    figures: tuple[SeedFigure, ...]
    tolerance: float = 0.25  # relative distance beyond which a row is off


@dataclass(frozen=True)
class Row:
    """One compared row: a figure at one expansion of its selection."""

    figure: SeedFigure
    where: str  # model and context of the row, where the scenario varies them ("" if not)
    kvtier: float | None  # None: the selection matched no run (inf/nan: a ratio over 0)
    ratio: float | None  # kvtier / seed; None for relations, zero seeds, no run
    off: bool


def parse_seed_figures(
    raw: Any, where: Any, key: str = "seed_figures", keys: tuple[str, ...] = KEYS
) -> SeedFigures:
    """The ``seed_figures`` block at ``key`` of a scenario YAML, checked: every
    figure names a section, a known unit and relation, and keys of ``at`` and
    ``over`` among ``keys`` (:data:`KEYS`; a ``sweep_figures`` block adds the
    workload's fields); errors are ``where.error`` (file:line: key)."""
    figs = build_dataclass(SeedFigures, raw, where, key)
    if not figs.figures:
        raise where.error(f"{key}.figures", "must list at least one figure")
    for i, f in enumerate(figs.figures):
        k = f"{key}.figures[{i}]"
        if f.unit not in UNITS:
            raise where.error(f"{k}.unit", f"must be one of {', '.join(UNITS)}, got {f.unit!r}")
        if f.relation not in RELATIONS:
            raise where.error(f"{k}.relation", f"must be one of {', '.join(RELATIONS)}")
        if f.reduce not in REDUCES:
            raise where.error(f"{k}.reduce", "must be max or min")
        for part in ("at", "over"):
            bad = sorted(set(getattr(f, part)) - set(keys))
            if bad:
                raise where.error(f"{k}.{part}.{bad[0]}", f"must be one of {', '.join(keys)}")
    if not figs.tolerance > 0:
        raise where.error(f"{key}.tolerance", "must be > 0")
    return figs


SWEEP = "sweep_figures"  # the block of figures over factors, printed by ``kvtier sweep``


def load_seed_figures(
    path: str | Path,
    error: type[ValueError] = ValueError,
    key: str = "seed_figures",
    keys: tuple[str, ...] = KEYS,
) -> SeedFigures | None:
    """The scenario file's block ``key`` (``seed_figures`` or :data:`SWEEP`), or
    None when it has none; ``keys``: what ``at`` and ``over`` may name."""
    data, where = read_yaml(Path(path), error=error)
    if not isinstance(data, dict) or data.get(key) is None:
        return None
    return parse_seed_figures(data[key], where, key, keys)


def by_design_name(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with each variant named without its point: a kvdrive run over pairs
    names its rows "name | 60K | 8", and the seed's figures select variants by name."""
    return summary.assign(variant=summary["variant"].str.split(" | ", n=1, regex=False).str[0])


def _select(df: pd.DataFrame, sel: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415

    mask = pd.Series(True, index=df.index)
    for k, v in sel.items():
        if k not in df.columns:
            return df.iloc[0:0]
        mask &= df[k] == v
    return df[mask]


def compare(figs: SeedFigures, df: pd.DataFrame, factors: tuple[str, ...] = ()) -> list[Row]:
    """Every figure against the scenario summary ``df`` (one row per run); a
    sweep's ``factors`` (its columns) are shown and shared like the model's."""
    rows: list[Row] = []
    shared = (*SHARED, *(k for k in factors if k not in SHARED))
    for f in figs.figures:
        num = _select(df, f.at)
        if num.empty or f.metric not in df.columns:
            rows.append(Row(f, "", None, None, False))
            continue
        keys = (*SHOWN, *(k for k in factors if k not in SHOWN))
        shown = [k for k in keys if k in df.columns and df[k].nunique() > 1]
        these = []
        for _, r in num.iterrows():
            label = " ".join(_key_cell(k, r[k]) for k in shown)
            value: float | None = float(r[f.metric])
            if f.over:
                den = _select(df, {**{k: r[k] for k in shared if k in df.columns}, **f.over})
                value = _ratio(value, float(den[f.metric].iloc[0])) if len(den) == 1 else None
            these.append((label, value))
        if f.reduce:
            these = _reduced(these, f.reduce)
        rows += [judge(f, label, value, figs.tolerance) for label, value in these]
    return rows


def compare_sweep(
    figs: SeedFigures, df: pd.DataFrame, factors: tuple[str, ...], workload: Any
) -> list[Row]:
    """:func:`compare` over a sweep's table ``df`` (factor columns ``factors``): a
    workload field a figure selects on that is neither swept nor a summary column
    has the scenario's value (``workload``'s) at every point."""
    named = {k for f in figs.figures for k in (*f.at, *f.over)} - set(df.columns)
    fixed = {k: getattr(workload, k) for k in sorted(named) if hasattr(workload, k)}
    return compare(figs, df.assign(**fixed), factors)


def _reduced(rows: list[tuple[str, float | None]], how: str) -> list[tuple[str, float | None]]:
    """The one row of the largest (``max``) or smallest (``min``) value, labelled with
    its own "where" and the count it was chosen from; rows without a value skipped."""
    known = [(w, v) for w, v in rows if v is not None and not math.isnan(v)]
    if not known:
        return rows[:1]
    pick = (max if how == "max" else min)(known, key=lambda wv: wv[1])
    return [(f"{how} of {len(known)}: {pick[0]}".rstrip(": "), pick[1])]


def _key_cell(key: str, value: Any) -> str:
    """A selection value as shown: context lengths in K tokens."""
    if key == "context_tokens" and int(value) % 1024 == 0:
        return f"{int(value) // 1024}K"
    if key == "batch":
        return f"x {int(value)}"
    if key == "ssds":
        return f"{int(value)} SSD" + ("s" if int(value) != 1 else "")
    if key in ("model", "hw", "variant", "design"):
        return str(value)
    return f"{key} {value}"


def _ratio(num: float, den: float) -> float:
    """num / den, with x / 0 = inf (x > 0) and 0 / 0 = nan."""
    if den == 0:
        return math.inf if num > 0 else math.nan
    return num / den


def judge(f: SeedFigure, where: str, kvtier: float | None, tolerance: float) -> Row:
    """The row of figure ``f`` given kvtier's value: its ratio and whether it is off."""
    if kvtier is None:
        return Row(f, where, None, None, False)
    if not math.isfinite(kvtier):  # a ratio over a zero: no comparison holds
        return Row(f, where, kvtier, None, True)
    if f.relation == ">":
        return Row(f, where, kvtier, None, not kvtier > f.seed)
    if f.relation == "<":
        return Row(f, where, kvtier, None, not kvtier < f.seed)
    if f.seed == 0:
        return Row(f, where, kvtier, None, kvtier != 0)
    ratio = kvtier / f.seed
    return Row(f, where, kvtier, ratio, abs(ratio - 1) > tolerance)


# ---- rendering -----------------------------------------------------------------------
def _num(v: float, unit: str) -> str:
    """``v`` (metric units) in display units, 3 significant digits, no exponent."""
    if not math.isfinite(v):
        return str(v)
    x = v * UNITS[unit]
    return f"{x:,.{max(0, 2 - math.floor(math.log10(abs(x))))}f}" if x else "0"


UNIT_NAMES = {"s": "times", "ms": "times", "x": "ratios", "%": "rates", "tok/s": "throughputs"}


def seed_cell(f: SeedFigure) -> str:
    """The seed column: the value (a bound's relation is in its own column)."""
    return _num(f.seed, f.unit)


def verdict(row: Row) -> str:
    if row.kvtier is None:
        return "no run"
    return "OFF" if row.off else "ok"


def seed_tables(figs: SeedFigures, rows: list[Row], title: str) -> list[Table]:
    """One table per unit (in the order the figures first use them), rows
    "figure | where | section | rel | seed | kvtier | ratio | verdict", the
    unit in the value columns' headers; ``rel`` is ``=``, or ``>`` / ``<`` for
    a stated ordering or bound; verdict OFF marks rows more than
    ``figs.tolerance`` away (or orderings not held)."""
    pct = f"{100 * figs.tolerance:.0f}%"
    head = f"{title}: seed {figs.seed} vs kvtier (ratio = kvtier / seed; OFF: > {pct} away)"
    units = list(dict.fromkeys(r.figure.unit for r in rows))
    out = []
    for n, unit in enumerate(units):
        these = [r for r in rows if r.figure.unit == unit]
        name = f"{UNIT_NAMES[unit]}, {unit}"
        out.append(_unit_table(these, unit, head + f"; {name}" if n == 0 else name))
    return out


def gap_lines(rows: list[Row]) -> list[str]:
    """One line per figure with an off row: its name, where it is off and the
    mechanism of the gap (its ``gap``, or that none is given)."""
    out: list[str] = []
    figures = list({id(r.figure): r.figure for r in rows if r.off}.values())
    for f in figures:
        wheres = [r.where for r in rows if r.figure is f and r.off]
        at = f" ({', '.join(w for w in wheres if w)})" if any(wheres) else ""
        out.append(f"OFF {f.name}{at}: {f.gap or 'no mechanism given'}")
    return out


def _unit_table(rows: list[Row], unit: str, title: str) -> Table:
    """The rows of one unit as a table (see :func:`seed_tables`)."""
    from rich.table import Table  # noqa: PLC0415  (here: a scenario loads without rich)

    table = Table(title=title)
    wheres = any(r.where for r in rows)
    rels = any(r.figure.relation != "=" for r in rows)
    for name in ("figure", "where", "section") if wheres else ("figure", "section"):
        table.add_column(name, overflow="fold")
    if rels:
        table.add_column("rel", no_wrap=True)
    for name in (f"seed {unit}", f"kvtier {unit}", "ratio"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for r in rows:
        f = r.figure
        kv = "-" if r.kvtier is None else _num(r.kvtier, f.unit)
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        mark = verdict(r)
        style = "red" if mark == "OFF" else ("yellow" if mark == "no run" else "green")
        keys = (f.name, r.where, f.section) if wheres else (f.name, f.section)
        rel = (f.relation,) if rels else ()
        table.add_row(*keys, *rel, seed_cell(f), kv, ratio, f"[{style}]{mark}")
    return table

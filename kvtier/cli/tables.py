"""Rich tables shared by the commands: one row per design, and fitting any
table into a narrow terminal.

House rule for every table the commands print: one unit per column, named in
the header ("TTFT ms", "hit SSD %"), never in the cells, whose numbers parse
as numbers; text columns are left-justified, numeric ones right-justified.
:func:`fit` then makes a table fit a terminal of any width without
truncating a cell: a table wider than the terminal is split into parts that
each repeat its leading text columns (the row keys: design, model) and take
as many of the other columns as fit, headers wrapped at spaces; long keys fold.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from rich.console import Console, RenderableType
from rich.table import Column, Table
from rich.text import Text

MISSING = "-"  # the cell of a value that does not exist (NaN, no run)
EDGE = 3  # columns a cell adds besides its text: padding of 1 each side and a rule
KEY_SHARE = 0.4  # the row keys take at most this share of the width before they fold
MAX_KEYS = 2  # leading text columns repeated in every part
MIN_KEY = 6  # a key column is never narrowed below this
KEY_CUT = 0.3  # keys may fold this much narrower if that saves a part
TEXT_WRAP = 14  # a text column (not a key) wraps at spaces to this width


def decode_title(w) -> str:
    """The title line of a sparse-decode workload's tables."""
    return (
        f"{w.model}, {w.context_tokens:,}-token prefix, batch {w.batch}, "
        f"{100 * w.sparsity:g}% sparsity, {w.steps} decode steps"
    )


def rows_table(df: pd.DataFrame, title: str, cols: list, caption: str | None = None) -> Table:
    """One row per design with the columns of ``cols`` that ``df`` has ("-" for NaN);
    ``cols`` are (header, key, format), the header naming the unit."""
    table = Table(title=title, caption=caption)
    cols = [c for c in cols if c[1] in df.columns]
    for header, key, _ in cols:
        table.add_column(header, justify="left" if key in TEXT_KEYS else "right")
    for _, row in df.iterrows():
        cells = [fmt(row[key]) if row.get(key) == row.get(key) else MISSING for _, key, fmt in cols]
        table.add_row(*cells)
    return table


TEXT_KEYS = frozenset({"variant", "design", "model", "match_reached", "oom", "io_path", "pair"})


# ---- fitting a table into a width -------------------------------------------------------
def _lines(cell: RenderableType) -> list[str]:
    text = cell if isinstance(cell, Text) else Text.from_markup(str(cell))
    return text.plain.splitlines() or [""]


def _widths(col: Column) -> tuple[int, int, int]:
    """(natural, wrapped, least) widths of a column's text: its longest line;
    its longest cell line with the header wrapped at spaces; its longest word."""
    head = _lines(col.header)
    cells = [ln for c in col._cells for ln in _lines(c)]
    natural = max(len(ln) for ln in head + cells)
    words = [len(w) for ln in head + cells for w in ln.split()]
    least = max(words, default=1)
    wrapped = max([len(ln) for ln in cells] + [len(w) for ln in head for w in ln.split()])
    return natural, max(wrapped, 1), max(least, 1)


def _need(widths: tuple[int, int, int], numeric: bool) -> int:
    """The width a non-key column takes: a number's whole cell (numbers never
    fold), a text's words wrapped to :data:`TEXT_WRAP` (or its longest word)."""
    natural, wrapped, least = widths
    return wrapped if numeric else min(natural, max(least, TEXT_WRAP))


def _n_keys(table: Table) -> int:
    """The leading left-justified columns: the keys each part repeats."""
    n = 0
    for col in table.columns:
        if col.justify not in ("left", "default", None):
            break
        n += 1
    return min(n, MAX_KEYS, len(table.columns) - 1) if len(table.columns) > 1 else n


def _shrink(key_w: list[int], excess: int) -> list[int]:
    """Key widths narrowed by ``excess`` in all, widest first, none below
    :data:`MIN_KEY` (a key cell then folds inside a word, never truncates)."""
    key_w = list(key_w)
    while excess > 0 and max(key_w, default=0) > MIN_KEY:
        i = key_w.index(max(key_w))
        key_w[i] -= 1
        excess -= 1
    return key_w


def _parts(need: list[int], room: int) -> list[list[int]]:
    """Indices of the non-key columns, greedily packed into parts of ``room``."""
    parts: list[list[int]] = [[]]
    used = 0
    for i, w in enumerate(need):
        if parts[-1] and used + w + EDGE > room:
            parts.append([])
            used = 0
        parts[-1].append(i)
        used += w + EDGE
    return parts


def fit(table: Table, width: int) -> list[Table]:
    """``table`` as one or more tables no wider than ``width`` (see the module
    docstring); the table itself when it fits as it is."""
    if not table.columns:
        return [table]
    widths = [_widths(c) for c in table.columns]
    if sum(n for n, _, _ in widths) + EDGE * len(widths) + 1 <= width:
        return [table]
    k = _n_keys(table)
    key_room = max(int(KEY_SHARE * width) - EDGE * k, k)
    key_w = [min(n, max(least, key_room // max(k, 1))) for n, _, least in widths[:k]]
    widest = max((wrapped for _, wrapped, _ in widths[k:]), default=0)
    key_w = _shrink(key_w, sum(w + EDGE for w in key_w) + widest + EDGE + 1 - width)
    room = width - 1 - sum(w + EDGE for w in key_w)
    rest = [
        max(1, min(_need(w, col.justify == "right"), room - EDGE))
        for w, col in zip(widths[k:], table.columns[k:], strict=True)
    ]
    parts = _parts(rest, room)
    for cut in range(1, int(KEY_CUT * sum(key_w)) + 1):  # a part less for narrower keys?
        narrower = _shrink(key_w, cut)
        wider = width - 1 - sum(w + EDGE for w in narrower)
        if len(parts) > 1 and len(_parts(rest, wider)) < len(parts):
            key_w, room = narrower, wider
            parts = _parts(rest, room)
            break
    out = []
    for p, idx in enumerate(parts):
        title = table.title if p == 0 else f"{table.title or ''} (cont. {p + 1}/{len(parts)})"
        t = Table(title=title, caption=table.caption if p == len(parts) - 1 else None)
        for col, w in zip(table.columns[:k], key_w, strict=True):
            t.add_column(col.header, justify=col.justify, width=w, overflow="fold")
        for i in idx:
            col = table.columns[k + i]
            t.add_column(col.header, justify=col.justify, width=rest[i], overflow="fold")
        chosen = table.columns[:k] + [table.columns[k + i] for i in idx]
        for r in range(table.row_count):
            t.add_row(*(c._cells[r] for c in chosen))
        out.append(t)
    return out


def print_tables(console: Console, tables: Iterable[Table] | Table) -> None:
    """Print each table fitted to the console's width (:func:`fit`)."""
    for table in [tables] if isinstance(tables, Table) else tables:
        for part in fit(table, console.width):
            console.print(part)


def frame_table(df: pd.DataFrame, title: str) -> Table:
    """``df`` as a table: its column names (which carry their units:
    ``tokens_per_s``, ``io_ms_per_step``) as headers, numbers to 3 decimals,
    text and flags left-justified, "-" for NaN."""
    table = Table(title=title)
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and df[c].dtype != bool for c in df.columns]
    for c, num in zip(df.columns, numeric, strict=True):
        table.add_column(str(c), justify="right" if num else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(_cell(v, num) for v, num in zip(row, numeric, strict=True)))
    return table


def _cell(v, numeric: bool) -> str:
    if numeric:
        if v != v:
            return MISSING
        return f"{v:,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:,.3f}"
    return str(v)

"""The assumptions a recorded sensitivity pass found a seed's verdict to hang on:
the ``fragile`` block of a scenario YAML, printed under its comparison tables.

A full sensitivity pass of a seed scenario (``kvtier sim ... --sensitivity``) takes
8-30 minutes on a small machine, so a plain run does not repeat it. What a pass
found is kept in the scenario as data, like the seed's own figures
(:mod:`sim.scenarios.seedref`), and ``kvtier sim`` prints it under the tables::

    fragile:
      - when: "2026-12-02, commit e4891e4"      # the date and commit the pass ran at
        hw: h20-8ssd                            # the profile it ran on
        source: "docs/seed-mechanisms.md, 'Seed 000'"   # where its tables are
        rerun: "kvtier sim --hw h20-8ssd --scenario default --sensitivity --jobs 1"
        found:                                  # [] : the pass found nothing fragile
          - assumption: workload.select_threads # as --assumptions names it
            end: 1                              # the range end where it happens
            effect: "Swarm / InfLLM 1.003 -> 0.39x: InfLLM ahead"

An entry of ``found`` is an assumption at one end of its range that flips a
ranking or moves the headline ratio by more than 25% (the report's own test,
:mod:`sim.sensitivity`). An entry of ``notes`` (same fields, optional) is what
the report prints at an end that is no flip but a finding: designs that tie
there (within ``sim.sensitivity.TIE_REL``) or lose their figure (out of
memory); a plain run prints it as ``NOT FRAGILE``. A pass with an empty
``found`` is the record that it found nothing fragile. A pass over some
assumptions only names them in its ``rerun`` command (``--assumptions``), so
what it did not vary is visible. A scenario no pass has covered yet says so,
and why, with the command to run::

    fragile:
      - pending: "needs the 8K capture (traces-real/pydoc-a.parquet, ~12 CPU min)"
        rerun: "kvtier sim --hw h20-8ssd --scenario swarm-real-matched --sensitivity"

Every scenario with ``seed_figures`` carries a ``fragile`` block
(tests/sim/test_fragile.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwprofiles.loader import build_dataclass, read_yaml

_WHEN = re.compile(r"^\d{4}-\d{2}-\d{2}(, [^,]*)?, commits? [0-9a-f]{7,40}\b")


@dataclass(frozen=True)
class Finding:
    """One assumption at one end of its range that a pass found fragile."""

    assumption: str
    end: float
    effect: str


@dataclass(frozen=True)
class Pass:
    """One recorded sensitivity pass of the scenario (see the module docstring)."""

    rerun: str
    when: str = ""
    hw: str = ""
    source: str = ""
    found: tuple[Finding, ...] = ()
    # what the pass printed at an end that is not fragile: a tie, a lost figure
    notes: tuple[Finding, ...] = ()
    # no pass has run yet: why (then ``when``, ``hw``, ``source`` and ``found`` are empty)
    pending: str = ""


def parse_fragile(raw: Any, where: Any, key: str = "fragile") -> tuple[Pass, ...]:
    """The ``fragile`` block at ``key``, checked: a list of passes, each dated with
    its commit ("2026-12-02, commit e4891e4"), a ``kvtier`` command to re-run it,
    and findings that name an assumption and an effect; errors are ``where.error``."""
    if not isinstance(raw, list) or not raw:
        raise where.error(key, "must list at least one recorded pass")
    out = []
    for i, item in enumerate(raw):
        k = f"{key}[{i}]"
        p = build_dataclass(Pass, item, where, k)
        if p.pending:
            if p.when or p.found or p.notes:
                raise where.error(f"{k}.pending", "a pass not run yet has no date or findings")
        elif not _WHEN.match(p.when):
            raise where.error(f"{k}.when", f"must read 'YYYY-MM-DD, commit SHA', got {p.when!r}")
        if not p.rerun.startswith("kvtier ") or "--sensitivity" not in p.rerun:
            raise where.error(f"{k}.rerun", "must be the kvtier command with --sensitivity")
        for field, fs in (("found", p.found), ("notes", p.notes)):
            for j, f in enumerate(fs):
                if not f.assumption.strip() or not f.effect.strip():
                    raise where.error(f"{k}.{field}[{j}]", "must name an assumption and its effect")
        out.append(p)
    return tuple(out)


def load_fragile(path: str | Path, error: type[ValueError] = ValueError) -> tuple[Pass, ...]:
    """The scenario file's recorded passes; () when it has no ``fragile`` block."""
    data, where = read_yaml(Path(path), error=error)
    if not isinstance(data, dict) or data.get("fragile") is None:
        return ()
    return parse_fragile(data["fragile"], where)


def fragile_lines(passes: tuple[Pass, ...]) -> list[str]:
    """What ``kvtier sim`` prints under the comparison tables: a heading, one line
    per finding (assumption, range end, effect, the pass's profile, date and
    commit), or that the pass found nothing, and each pass's command."""
    if not passes:
        return []
    out = [
        "Fragile assumptions (recorded sensitivity passes: at this end of its range an "
        "assumption flips a ranking or moves the headline ratio > 25%):"
    ]
    for p in passes:
        if p.pending:
            out.append(f"  no pass recorded yet: {p.pending}")
            out.append(f"    run: {p.rerun}")
            continue
        at = f"{p.hw}, {p.when}; {p.source}"
        if not p.found:
            out.append(f"  none found by the pass on {at}")
        for f in p.found:
            out.append(f"  FRAGILE {f.assumption} at {f.end:g}: {f.effect} ({at})")
        for f in p.notes:
            out.append(f"  NOT FRAGILE {f.assumption} at {f.end:g}: {f.effect} ({at})")
        out.append(f"    re-run: {p.rerun}")
    return out

"""Shared checks at the edges: command-line values and output paths.

Every failure is a :class:`InputError` whose message is one line naming where
the value came from (``--steps: must be an integer > 0, got 1.5``;
``--out results/x: not a directory``), which ``kvtier`` prints as
``kvtier: error: ...`` with exit status 2.

* ``int_arg(lo)`` / ``float_arg(lo, strict)`` are argparse ``type=``
  callables: they reject non-numbers, non-finite values (``nan``, ``inf``),
  fractions where an integer is meant (``1.5``; ``2.0`` is accepted as 2),
  values below the bound and integers beyond int64; argparse names the flag.
* :func:`check_plan_rows` refuses a transfer plan with no ops before a run
  starts (a replay would otherwise reach fio or the replayer with nothing to do).
* :func:`check_out_dir` / :func:`check_out_file` check, before any work is
  done, that an output can be created: every existing ancestor must be a
  directory the user can write into (a file in the way, ``/dev/null/x`` or a
  read-only mount fail here, not after a long run).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

INT64_LIMIT = 2**63  # integers are stored as int64 (plans, traces, records)


class InputError(ValueError):
    """A bad value given by the user; the message is one line."""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def int_arg(lo: int = 0) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo`` (``"4"``, ``"4.0"``; not ``"4.5"``)."""

    def parse(text: str) -> int:
        value = _number(text)
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        if value >= INT64_LIMIT:  # every count lands in an int64 column or array
            raise argparse.ArgumentTypeError(f"must be an integer below 2**63, got {text!r}")
        return int(value)

    parse.__name__ = "integer"
    return parse


def float_arg(lo: float = 0.0, strict: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number >= ``lo`` (> ``lo`` when ``strict``)."""

    def parse(text: str) -> float:
        value = _number(text)
        if value < lo or (strict and value == lo):
            raise argparse.ArgumentTypeError(
                f"must be a number {'>' if strict else '>='} {lo:g}, got {text!r}"
            )
        return value

    parse.__name__ = "number"
    return parse


def check_plan_rows(rows: int, path: str | Path, flag: str = "--plan") -> None:
    """A plan of ``rows`` ops read from ``path`` must have at least one."""
    if rows == 0:
        raise InputError(f"{flag} {path}: the plan has 0 rows (no ops): nothing to run")


def _writable_dir(path: Path, shown: str) -> None:
    """The deepest existing ancestor of ``path`` (or ``path`` itself) must be a
    directory the user can create entries in."""
    probe = path
    while not probe.exists():
        if probe.is_symlink():  # a dangling link: creating through it fails later
            raise InputError(f"{shown}: {probe} is a dangling symbolic link")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if not probe.is_dir():
        raise InputError(f"{shown}: {probe} is not a directory")
    if probe != path and not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{shown}: cannot create {path}: {probe} is not writable")
    if probe == path and not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{shown}: directory {path} is not writable")


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as an output directory that exists or can be created."""
    path = Path(path)
    _writable_dir(path, f"{flag} {path}")
    return path


def check_out_file(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as an output file that can be (re)written: its directory exists or
    can be made (the writer makes it)."""
    path = Path(path)
    shown = f"{flag} {path}"
    if path.is_dir():
        raise InputError(f"{shown}: is a directory, expected a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{shown}: file is not writable")
    _writable_dir(path.parent, shown)
    return path


__all__ = [
    "InputError",
    "check_out_dir",
    "check_out_file",
    "check_plan_rows",
    "float_arg",
    "int_arg",
]

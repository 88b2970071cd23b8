"""The console every subcommand prints through."""

from __future__ import annotations

import os

from rich.console import Console

WIDE = 140  # columns when output is not a terminal and COLUMNS does not say


def make_console() -> Console:
    """A console; when output is not a terminal, ``COLUMNS`` wide if set, else
    wide enough for the tables (:func:`kvtier.cli.tables.fit` fits them to either).
    Plain lines are never wrapped (``soft_wrap``): a path printed after "wrote" must
    stay one string a user can copy; tables are still laid out to the width."""
    console = Console(soft_wrap=True)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(width=WIDE, soft_wrap=True)

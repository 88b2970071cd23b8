"""The console every subcommand prints through."""

from __future__ import annotations

from rich.console import Console


def make_console() -> Console:
    """A console; when output is not a terminal, wide enough for the tables."""
    console = Console()
    return console if console.is_terminal else Console(width=140)

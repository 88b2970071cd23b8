"""Entry point for ``kvtier``; subcommands are filled in below."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("kvtier: under construction", file=sys.stderr)
    return 0

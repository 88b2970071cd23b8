"""The ``kvtier`` command line."""

from kvtier.cli.main import main

__all__ = ["main"]

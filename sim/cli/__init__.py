"""The ``kvtier`` command line."""

from sim.cli.main import main

__all__ = ["main"]

"""``kvtier real ...``: the real backend's commands (issue 4).

Each module of :mod:`real` that has commands exposes ``add_cli(sub)`` adding
its sub-commands to the ``kvtier real`` group.
"""

from __future__ import annotations

import argparse
import importlib

MODULES = ("real.replay", "real.emulate", "real.calibrate", "real.iolog", "real.validate")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("real", help="replay plans on real (or emulated) SSDs, calibrate, validate")
    group = p.add_subparsers(dest="real_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # not written yet
        module.add_cli(group)

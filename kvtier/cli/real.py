"""``kvtier real ...``: the real backend's commands (issue 4).

Each module listed exposes ``add_cli(sub)`` adding its sub-commands to the
``kvtier real`` group.
"""

from __future__ import annotations

import argparse
import importlib

# commands that need the simulator too (replay's modelled copy/compute times, validation)
# live in kvtier.cli; the others in the real module they drive.  An import error is loud.
MODULES = (
    "kvtier.cli.replay",
    "real.emulate",
    "real.calibrate",
    "real.iolog",
    "kvtier.cli.validate",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("real", help="replay plans on real (or emulated) SSDs, calibrate, validate")
    group = p.add_subparsers(dest="real_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for name in MODULES:
        importlib.import_module(name).add_cli(group)

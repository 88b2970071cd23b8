"""``kvtier real ...``: the real backend's commands (issue 4).

Each module listed exposes ``add_cli(sub)`` adding its sub-commands to the
``kvtier real`` group.  Every sub-command runs under
:func:`real._signals.guarded`: SIGINT, SIGTERM and SIGHUP end it with
everything it created removed and exit status 128 + the signal.
"""

from __future__ import annotations

import argparse
import functools
import importlib

from real._signals import guarded

# commands that need the simulator too (replay's modelled copy/compute times, validation)
# live in kvtier.cli; the others in the real module they drive.  An import error is loud.
MODULES = (
    "kvtier.cli.replay",
    "real.emulate",
    "real.calibrate",
    "real.iolog",
    "kvtier.cli.validate",
    "real.reclaim",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("real", help="replay plans on real (or emulated) SSDs, calibrate, validate")
    group = p.add_subparsers(dest="real_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for name in MODULES:
        importlib.import_module(name).add_cli(group)
    for cmd in group.choices.values():
        handler = cmd.get_default("handler")
        if handler is not None:
            cmd.set_defaults(handler=functools.partial(guarded, handler))

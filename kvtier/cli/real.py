"""``kvtier real ...``: the real backend's commands (issue 4).

Each command's flags and printing are in :mod:`kvtier.cli`: ``replay``
(:mod:`kvtier.cli.replay`) and ``validate`` (:mod:`kvtier.cli.validate`), which need
the simulator too, and ``emulate``, ``calibrate``, ``iolog``, ``cleanup``
(:mod:`kvtier.cli.real_commands`).  Every sub-command runs under
:func:`real._signals.guarded`: SIGINT, SIGTERM and SIGHUP end it with
everything it created removed and exit status 128 + the signal.
"""

from __future__ import annotations

import argparse
import functools

from kvtier.cli import real_commands, replay, validate
from real._signals import guarded

# in the order `kvtier real --help` lists them
COMMANDS = (
    replay.add_replay,
    real_commands.add_emulate,
    real_commands.add_calibrate,
    real_commands.add_iolog,
    validate.add_validate,
    real_commands.add_cleanup,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("real", help="replay plans on real (or emulated) SSDs, calibrate, validate")
    group = p.add_subparsers(dest="real_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for add in COMMANDS:
        add(group)
    for cmd in group.choices.values():
        handler = cmd.get_default("handler")
        if handler is not None:
            cmd.set_defaults(handler=functools.partial(guarded, handler))

"""``kvtier trace ...``: request-trace statistics, access-trace capture and fitting.

Each module of :mod:`traces` that has commands exposes ``add_cli(sub)`` adding
its sub-commands to the ``kvtier trace`` group.
"""

from __future__ import annotations

import argparse
import importlib

MODULES = ("traces.request_cli", "traces.capture", "traces.fit")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="request-trace stats, access-trace capture from a real model, generator fit"
    )
    group = p.add_subparsers(dest="trace_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for name in MODULES:
        importlib.import_module(name).add_cli(group)

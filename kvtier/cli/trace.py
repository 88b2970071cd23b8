"""``kvtier trace ...``: request-trace statistics, access-trace capture and fitting.

The commands' flags and printing: ``stats``, ``convert``, ``gen-conversations``
in :mod:`kvtier.cli.trace_requests`, ``ceilings`` in :mod:`kvtier.cli.trace_ceilings`,
``capture`` and ``fit`` in
:mod:`kvtier.cli.trace_access`; what they run is in :mod:`traces`.
"""

from __future__ import annotations

import argparse

from kvtier.cli import trace_access, trace_ceilings, trace_requests

# in the order `kvtier trace --help` lists them
COMMANDS = (
    trace_requests.add_parsers,
    trace_ceilings.add_parser,
    trace_access.add_capture,
    trace_access.add_fit,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="request-trace stats, access-trace capture from a real model, generator fit"
    )
    group = p.add_subparsers(dest="trace_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: p.print_help() or 0)
    for add in COMMANDS:
        add(group)

"""``kvtier``: the command line.

Every user mistake (unknown profile, bad YAML, impossible scenario) ends in a
one-line ``kvtier: error: ...`` on stderr and exit status 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from hwprofiles import ProfileError
from kvtier.plan import PlanError
from real.errors import RealError
from sim.config import ConfigError
from sim.hw.machine import RouteError
from sim.models import ModelError
from traces.access import AccessTraceError
from traces.errors import TraceError

USER_ERRORS = (
    ProfileError,
    ConfigError,
    ModelError,
    PlanError,
    RouteError,
    RealError,
    TraceError,
    AccessTraceError,
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    from kvtier.cli import bench, info, real, simulate, sweep, trace

    parser = argparse.ArgumentParser(
        prog="kvtier",
        description="Evaluate multi-tier KV-cache offloading designs: simulate, replay, compare.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    simulate.add_parser(sub)
    sweep.add_parser(sub)
    bench.add_parser(sub)
    info.add_parsers(sub)
    real.add_parser(sub)
    trace.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    try:
        return int(args.handler(args) or 0)
    except USER_ERRORS as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvtier: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

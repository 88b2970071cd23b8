"""``kvtier``: the command line.

Every user mistake (unknown profile, bad YAML, impossible scenario, a bad
flag value, an output path that cannot be written) ends in a one-line
``kvtier: error: ...`` on stderr and exit status 2, never a traceback.  An
unexpected failure (a bug) prints one line and exit status 1; ``--debug`` or
the environment variable ``KVTIER_DEBUG=1`` show its traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
import typing
from collections.abc import Callable

from hwprofiles import ProfileError
from kvtier.cli.process import keep_freed_memory, one_blas_thread
from kvtier.contracts.plan import PlanError
from kvtier.contracts.validate import InputError
from real.errors import RealError
from sim.config import ConfigError
from sim.hw.machine import RouteError
from sim.hw.measured import MeasuredError
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
    InputError,
    MeasuredError,
)

Handler = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors as one ``kvtier: error:`` line, exit 2
    (sub-commands' parsers are of this class too)."""

    def error(self, message: str) -> typing.NoReturn:
        sub = self.prog.removeprefix("kvtier").strip()
        where = f" {sub}" if sub else ""
        print(f"kvtier: error:{where} {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from kvtier.cli import bench, bench_serving, info, lab, plan, real, simulate, sweep, trace

    parser = Parser(
        prog="kvtier",
        description="Evaluate multi-tier KV-cache offloading designs: simulate, replay, compare.",
        epilog="Errors are one line; --debug (or KVTIER_DEBUG=1) shows the traceback of an "
        "unexpected one.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    simulate.add_parser(sub)
    sweep.add_parser(sub)
    plan.add_parser(sub)
    bench.add_parser(sub)
    bench_serving.add_parser(sub)
    info.add_parsers(sub)
    real.add_parser(sub)
    trace.add_parser(sub)
    lab.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, printed by Parser.error)
        return int(exc.code or 0)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    debug = args.debug or os.environ.get("KVTIER_DEBUG", "") not in ("", "0")
    keep_freed_memory()
    try:
        with one_blas_thread():
            return int(args.handler(args) or 0)
    except USER_ERRORS as exc:
        return _fail(str(exc), 2)
    except OSError as exc:  # an output (or input) the system refused: name the path
        return _fail(_os_error(exc, getattr(args, "out", None)), 2)
    except KeyboardInterrupt:
        print("kvtier: interrupted", file=sys.stderr)
        return 130
    except (RecursionError, MemoryError) as exc:  # an input too deep or too large
        return _fail(f"input too large or too deeply nested ({type(exc).__name__})", 2)
    except Exception as exc:
        if debug:
            traceback.print_exc()
            return 1
        msg = " ".join(str(exc).split()) or type(exc).__name__
        return _fail(f"internal error: {type(exc).__name__}: {msg} (rerun with --debug)", 1)


def _fail(message: str, status: int) -> int:
    print(f"kvtier: error: {' '.join(message.split())}", file=sys.stderr)
    return status


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def _os_error(exc: OSError, out: object = None) -> str:
    """One line: the path(s) and the system's reason (ENOSPC named plainly); an
    error only a write can raise, with no path (Arrow, a stream), names ``--out``."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason = "no space left on the device"
    paths = [p for p in (exc.filename, exc.filename2) if p is not None]
    if not paths and out is not None and exc.errno in WRITE_ERRNOS:
        paths = [f"--out {out}"]
    return f"{' -> '.join(map(str, paths))}: {reason}" if paths else reason


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

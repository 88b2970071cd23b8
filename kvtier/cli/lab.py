"""``kvtier lab``: JupyterLab on ``analysis/``, its notebooks pointed at the latest results.

The notebooks read ``KVTIER_RESULTS`` (:mod:`analysis.results`): set here to
``--results`` (default ``results``, where kvtier writes) when it holds any
results, else to the tiny run shipped in ``analysis/tiny-run``; the attention
notebook reads ``KVTIER_TRACES``: ``--traces`` (default ``traces-real``) when it
holds captures, else the tiny run's two.  JupyterLab
is the ``notebooks`` extra (``make lab`` installs it); its server replaces this
process and runs until stopped (Ctrl-C), with ``--no-browser`` for a headless machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from analysis.results import TINY, lab_results, lab_traces
from kvtier.contracts.console import make_console
from kvtier.contracts.validate import InputError, int_arg

ANALYSIS = TINY.parent


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lab",
        help="open JupyterLab on analysis/ at the latest results (or a shipped tiny run)",
        description="Sets KVTIER_RESULTS for the notebooks: --results when it holds results, "
        f"else the shipped tiny run ({TINY.relative_to(ANALYSIS.parent)}).  Needs the "
        "notebooks extra (make lab installs it).",
    )
    p.add_argument("--results", default="results", help="results folder (searched recursively)")
    p.add_argument(
        "--traces", default="traces-real", help="captured access traces (the attention notebook)"
    )
    p.add_argument("--no-browser", action="store_true", help="start the server, open no browser")
    p.add_argument("--port", type=int_arg(0), help="server port (default: JupyterLab's, 8888)")
    p.add_argument(
        "--allow-root", action="store_true", help="let JupyterLab run as root (a container)"
    )
    p.set_defaults(handler=cmd_lab)


def lab_command(args: argparse.Namespace) -> list[str]:
    """The JupyterLab command line (this Python's, rooted at ``analysis/``)."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={ANALYSIS}"]
    if args.no_browser:
        cmd.append("--no-browser")
    if args.port is not None:
        cmd.append(f"--port={args.port}")
    if args.allow_root:
        cmd.append("--allow-root")
    return cmd


def cmd_lab(args: argparse.Namespace) -> int:
    for flag, path in (("--results", args.results), ("--traces", args.traces)):
        if Path(path).exists() and not Path(path).is_dir():
            raise InputError(f"{flag} {path}: not a folder")
    if importlib.util.find_spec("jupyterlab") is None:
        raise InputError(
            "kvtier lab: JupyterLab is not installed: make lab, or pip install 'kvtier[notebooks]'"
        )
    results = lab_results(args.results)
    if not results.is_dir():  # an install without the checkout's analysis/tiny-run
        raise InputError(f"--results {args.results}: holds no results, and {TINY} is missing")
    console = make_console()
    if results == TINY:
        console.print(f"no results under {args.results}: the notebooks read the shipped tiny "
                      f"run {TINY} (its README.md says how it was made)")  # fmt: skip
    else:
        console.print(f"the notebooks read {results} (KVTIER_RESULTS)")
    traces = lab_traces(args.traces)
    env = {**os.environ, "KVTIER_RESULTS": str(results), "KVTIER_TRACES": str(traces)}
    cmd = lab_command(args)
    os.execve(cmd[0], cmd, env)  # JupyterLab takes this process: Ctrl-C and signals reach it
    return 0  # pragma: no cover - execve does not return

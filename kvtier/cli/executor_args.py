"""The flags every many-simulation command shares (``kvtier sweep``, ``kvtier plan``):
where its simulations run (:mod:`sim.parallel`)."""

from __future__ import annotations

import argparse

from kvtier.contracts.validate import int_arg
from sim.parallel import EXECUTORS, Executor, make_executor


def add_executor_args(p: argparse.ArgumentParser, runs: str = "") -> None:
    """``--executor local|ray``, ``--address`` (Ray only) and ``--jobs``; ``runs``
    says which of the command's simulations they place, where not all of them."""
    which = f" ({runs})" if runs else ""
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help=f"where the simulations run{which}: a local process pool, or Ray (the cluster extra)",
    )
    p.add_argument(
        "--address",
        help="--executor ray: the cluster, HOST:PORT, ray://HOST:PORT or auto "
        "(default: start a Ray instance on this machine)",
    )
    p.add_argument(
        "--jobs",
        type=int_arg(1),
        help=f"worker processes{which} (default: CPU count); with --executor ray and no "
        "--address, the CPUs of the Ray instance started here",
    )


def executor_of(args: argparse.Namespace) -> Executor:
    """The executor the parsed flags name (a ConfigError naming the flag at fault)."""
    return make_executor(args.executor, args.jobs, args.address)

"""The flags of ``kvtier real validate`` and their checks.

Every value is checked by argparse as it is parsed (:mod:`kvtier.contracts.validate`'s
typed flags), so nonsense ends in one line naming the flag, exit 2, before
anything runs: ``--n``/``--steps`` integers >= 1, ``--step-s`` a finite number
> 0, ``--scale`` a number in (0, 1] (left out: measured), ``--seed`` an
integer >= 0, ``--regimes`` a non-empty subset of :data:`real.validate.REGIMES`;
the regime plan they size must fit in memory.
:func:`check_args` then loads the named profiles (a bad name or file is reported
first) and makes sure fio is there when the run needs it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from hwprofiles import load_profile
from kvtier.contracts.validate import check_out_dir, float_arg, int_arg
from real.errors import RealError
from real.validate import REGIMES


def scale_arg(text: str) -> float:
    """An argparse type: a rate scale in (0, 1]."""
    value = float_arg(0.0, strict=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


scale_arg.__name__ = "scale"


def regimes_arg(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated, non-empty subset of :data:`REGIMES`."""
    regimes = tuple(r.strip() for r in text.split(",") if r.strip())
    unknown = [r for r in regimes if r not in REGIMES]
    if unknown or not regimes:
        what = f"unknown {', '.join(unknown)}" if unknown else "empty list"
        raise argparse.ArgumentTypeError(f"{what}; choose from {', '.join(REGIMES)}")
    return regimes


regimes_arg.__name__ = "regimes"


def add_run_args(p: argparse.ArgumentParser) -> None:
    """The flags that size the run: devices, scale, steps, regimes, seed."""
    p.add_argument("--n", type=int_arg(1), default=4, help="SSDs to use (default 4)")
    p.add_argument("--dir", default="/dev/shm", help="where data/backing files go")
    p.add_argument(
        "--scale",
        type=scale_arg,
        default=None,
        help="rate scale in (0, 1] (default: measured -- with fio, or the replayer with --no-fio)",
    )
    p.add_argument("--steps", type=int_arg(1), default=5, help="steps per regime")
    p.add_argument(
        "--step-s",
        type=float_arg(0.0, strict=True),
        default=0.3,
        help="modelled seconds per step (several of the throttle's 100 ms slices)",
    )
    p.add_argument("--regimes", type=regimes_arg, default=REGIMES, help="comma-separated subset")
    p.add_argument("--seed", type=int_arg(0), default=0)


def _check_dir(args: argparse.Namespace) -> None:
    """``--dir`` before any work: the paced files' directory may be created; the
    data files and emulated backing files go into an existing directory."""
    where = getattr(args, "dir", None)
    if where is None:
        return
    if getattr(args, "pace", None):
        check_out_dir(where, "--dir")
    elif not Path(where).is_dir():
        raise RealError(f"--dir {where}: not an existing directory")


def _check_plan_size(args: argparse.Namespace) -> None:
    """The regime plan (:func:`real.validate.regime_plan`: per regime, one warm-up step
    and ``--steps`` steps of one op on each of the ``--n`` SSDs) must fit in memory, as
    :func:`sim.limits.check_plan_ops` bounds a simulated plan, before anything runs."""
    from sim.limits import check_plan_ops

    ops = len(args.regimes) * (1 + args.steps) * args.n
    what = f"--steps {args.steps} x {len(args.regimes)} regimes x --n {args.n} SSDs"
    check_plan_ops(ops, what)


def _check_serving(args: argparse.Namespace) -> None:
    """``--serving`` names a registered serving design (or ``none``)."""
    name = getattr(args, "serving", "none")
    if name == "none":
        return
    from sim.serving.designs import DESIGNS

    if name not in DESIGNS:
        have = ", ".join(DESIGNS.names())
        raise RealError(f"--serving {name}: no such serving design (have: {have})")


def check_args(args: argparse.Namespace) -> None:
    """Refuse, in one line, values built without the parser (library callers) and
    make sure fio is there when the run uses it (``--install-fio`` installs it).

    fio replays the bandwidth steps unless ``--no-fio``; with ``--no-fio`` an
    ``--emulate`` run without ``--scale`` measures the devices with the replayer."""
    from real import fio

    scale_ok = args.scale is None or (math.isfinite(args.scale) and 0 < args.scale <= 1)
    bad = [
        ("--n", args.n, args.n >= 1, ">= 1"),
        ("--steps", args.steps, args.steps >= 1, ">= 1"),
        ("--step-s", args.step_s, math.isfinite(args.step_s) and args.step_s > 0, "> 0"),
        ("--scale", args.scale, scale_ok, "in (0, 1]"),
        ("--seed", args.seed, args.seed >= 0, ">= 0"),
    ]
    repeats = getattr(args, "design_repeats", 1)
    bad.append(("--design-repeats", repeats, isinstance(repeats, int) and repeats >= 1, ">= 1"))
    for flag, value, ok, want in bad:
        if not ok:
            raise RealError(f"{flag} must be {want}, got {value}")
    _check_serving(args)
    _check_dir(args)
    if isinstance(args.regimes, str):
        try:
            args.regimes = regimes_arg(args.regimes)
        except argparse.ArgumentTypeError as exc:
            raise RealError(f"--regimes: {exc}") from None
    _check_plan_size(args)
    for flag in ("emulate", "pace", "hw"):  # a bad profile is named before fio is asked for
        if getattr(args, flag, None):
            profile = load_profile(getattr(args, flag))
            if args.n > len(profile.ssd_names):  # the run uses the first --n SSDs
                raise RealError(
                    f"--n {args.n}: --{flag} {getattr(args, flag)} has "
                    f"{len(profile.ssd_names)} SSDs"
                )
    if not args.no_fio and fio.fio_binary() is None:
        if not args.install_fio:
            raise RealError(
                f"{fio.missing_message()} (the fio cross-check is then skipped and the "
                "replayer measures the emulated devices), or --install-fio"
            )
        fio.ensure_fio(True)

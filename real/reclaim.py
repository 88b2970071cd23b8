"""``kvtier real cleanup``: remove what crashed runs left behind.

A run killed by SIGKILL (or a power cut) cannot clean up; its state file
(:mod:`real.cleanup`) still lists its loop devices, cgroups, files and fio
process groups.  This command lists, for every state file whose process is
gone, exactly those resources -- a dry run by default (``--dry-run`` says so
explicitly) -- and removes them with ``--yes``, each only if it still is what
was recorded (same inode, same loop backing file, same process-group leader).
Runs still alive are listed as such and left alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from real import blkio  # noqa: F401  (registers how a loop device entry is removed)
from real.cleanup import describe, reclaim, runs
from real.errors import RealError


def add_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cleanup", help="remove loop devices, cgroups, files a crashed run left")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--dry-run", action="store_true", help="only list (the default)")
    act.add_argument("--yes", action="store_true", help="remove what dead runs left")
    p.add_argument("--runtime-dir", default=None, help="state files (default: kvtier's own)")
    p.set_defaults(handler=_cli)


def _cli(args: argparse.Namespace) -> int:
    where = Path(args.runtime_dir) if args.runtime_dir else None
    if where is not None and not where.is_dir():
        raise RealError(f"--runtime-dir {where}: not a directory")
    found = runs(where)
    if not found:
        print("nothing to clean up: no kvtier run state found")
        return 0
    for run in found:
        if run.live:
            print(f"pid {run.pid}: still running; left alone ({len(run.resources)} resources)")
            continue
        if not args.yes:
            print(f"pid {run.pid}: gone; would remove:")
            for entry in reversed(run.resources):
                print(f"  {describe(entry)}")
            continue
        print(f"pid {run.pid}: gone; removing:")
        for entry, done in reclaim(run):
            print(f"  {describe(entry)}: {'removed' if done else 'already gone or not ours'}")
    if not args.yes and any(not r.live for r in found):
        print("dry run: pass --yes to remove")
    return 0

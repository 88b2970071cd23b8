"""The suite collects the same tests however pytest is invoked.

A test module that does ``from conftest import ...`` gets whichever ``conftest``
module pytest imported last, which depends on the arguments: ``pytest tests/sim
tests/real`` loads both directories' conftests before collecting, ``pytest`` alone
one directory at a time.  So the ids under tests/sim and tests/real must be the
same whether those directories are named or the whole suite is collected.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRS = ("tests/sim", "tests/real")


def _start(args: list[str]) -> subprocess.Popen[str]:
    """``pytest --collect-only -q`` in a fresh interpreter at the repository root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    # addopts carries -q; emptied so that -q lists ids (-qq would list counts per file)
    cmd += ["-o", "addopts=", *args]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _ids(proc: subprocess.Popen[str]) -> list[str]:
    """The collected ids under DIRS, sorted (duplicates kept); fails on collection errors."""
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode}\n{out[-4000:]}"
    return sorted(line for line in out.splitlines() if line.startswith(DIRS) and "::" in line)


def test_sim_and_real_collect_the_same_ids_alone_and_in_the_whole_suite() -> None:
    named, whole = _start(list(DIRS)), _start([])  # both at once: the check stays fast
    named_ids, whole_ids = _ids(named), _ids(whole)
    assert named_ids, "nothing collected under tests/sim and tests/real"
    assert {i.split("::")[0].split("/")[1] for i in named_ids} == {"sim", "real"}
    assert named_ids == whole_ids

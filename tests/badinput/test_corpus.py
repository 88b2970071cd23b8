"""Every case of the bad-input corpus (:mod:`tests.badinput.cases`): exit 2,
exactly one line on stderr, naming the key or flag at fault, no traceback.

Run in-process through :func:`kvtier.cli.main.main` (fast); a few run as
subprocesses too, to see the real stderr of ``python -m kvtier.cli``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.cli.main import main
from tests.badinput.cases import CASES
from tests.badinput.probes import PROBES, SLOW

# the corpus: the hand-written cases, and every probe that fails before real work
CORPUS = CASES + [(f"probe-{c[0]}", *c[1:]) for c in PROBES if c[0] not in SLOW]

ROOT = Path(__file__).resolve().parents[2]


def _materialise(files: dict, where: Path) -> None:
    for name, content in files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _check(status: int, err: str, needle: str) -> None:
    assert status == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err  # exactly one line
    assert err.startswith("kvtier: error: "), err
    assert "Traceback" not in err
    assert needle in err, f"{needle!r} not named in: {err}"


def test_corpus_ids_unique_and_large() -> None:
    ids = [c[0] for c in CORPUS]
    assert len(ids) == len(set(ids))
    assert len([p for p in PROBES if p[0] not in SLOW]) >= 100
    assert {p[0] for p in PROBES} >= SLOW  # no stale name


@pytest.mark.parametrize("argv, files, needle", [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_bad_input(argv, files, needle, tmp_path, monkeypatch, capsys) -> None:
    _materialise(files, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVTIER_DEBUG", raising=False)
    status = main(argv.split())
    _check(status, capsys.readouterr().err, needle)


SUBPROCESS = ("sim-steps-nan", "yaml-bomb", "out-devnull-sim", "trace-broken-gz")


@pytest.mark.parametrize("case", SUBPROCESS)
def test_bad_input_subprocess(case, tmp_path) -> None:
    (_, argv, files, needle) = next(c for c in CASES if c[0] == case)
    _materialise(files, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KVTIER_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kvtier.cli", *argv.split()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _check(proc.returncode, proc.stderr, needle)

"""The io_uring probe's self-test child: a failure by exit is tried once more (a race
with another process importing the binding), a second failure is the verdict."""

from __future__ import annotations

import subprocess

import real._uring as uring


def _probe_with(monkeypatch, codes: list[int]) -> tuple[tuple[bool, str], int]:
    calls = []

    def run(*args, **kwargs):
        code = codes[len(calls)]
        calls.append(code)
        err = "FileNotFoundError: [Errno 2] .../liburing/__pycache__/x.pyc" if code else ""
        return subprocess.CompletedProcess(args[0], code, "", err)

    monkeypatch.setattr(uring, "binding_version", lambda: "2024.5.3")
    monkeypatch.setattr(uring, "kernel_version", lambda: (6, 1))
    monkeypatch.setattr(uring.subprocess, "run", run)
    return uring.probe.__wrapped__(), len(calls)


def test_a_child_that_lost_an_import_race_is_run_once_more(monkeypatch):
    (ok, why), runs = _probe_with(monkeypatch, [1, 0])
    assert ok and runs == 2 and "liburing 2024.5.3" in why


def test_two_failures_are_the_verdict_with_the_childs_last_line(monkeypatch):
    (ok, why), runs = _probe_with(monkeypatch, [1, 1, 0])
    assert not ok and runs == 2
    assert why.startswith("io_uring self-test failed with liburing 2024.5.3: FileNotFoundError")


def test_a_passing_child_runs_once(monkeypatch):
    (ok, _), runs = _probe_with(monkeypatch, [0, 1])
    assert ok and runs == 1

"""``kvtier real cleanup``: what a SIGKILLed run left is found by its state file and
removed exactly; a live run's resources are never touched; dry run by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from real.cleanup import Registry, file_id, runs
from tests.real.test_signals import (
    ROOT,
    VALIDATE,
    _write_plan,
    leftovers,
    needs_throttle,
    start,
    wait_for_phase,
)


def cleanup(runtime: Path, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KVTIER_RUNTIME_DIR=str(runtime), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "kvtier.cli", "real", "cleanup", *flags]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def kill9(args: list[str], phase: str, tmp: Path) -> int:
    proc = start([*args, "--out", str(tmp / "out")], phase, tmp / "rt")
    wait_for_phase(proc, phase)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    return proc.pid


def test_files_of_a_killed_replay_are_listed_then_removed(tmp_path: Path, direct_dir: Path):
    plan = _write_plan(tmp_path / "plan.parquet")
    data = direct_dir / "targets"
    data.mkdir()
    pid = kill9(["replay", "--plan", str(plan), "--targets-dir", str(data)], "fill", tmp_path)
    made = data / "ssd0" / "kvtier-ssd0.dat"
    assert made.exists()  # SIGKILL: nothing could clean up
    (bystander := data / "kvtier-ssd9.dat").write_bytes(b"not from that run")
    dry = cleanup(tmp_path / "rt")
    assert dry.returncode == 0 and f"pid {pid}: gone; would remove:" in dry.stdout
    assert str(made) in dry.stdout and made.exists()  # a dry run removes nothing
    done = cleanup(tmp_path / "rt", "--yes")
    assert done.returncode == 0, done.stderr
    assert not made.exists() and not (data / "ssd0").exists()
    assert bystander.read_bytes() == b"not from that run"  # same name pattern, not listed
    assert runs(tmp_path / "rt") == []  # the state file went with them
    assert "nothing to clean up" in cleanup(tmp_path / "rt", "--yes").stdout


def test_a_live_run_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KVTIER_RUNTIME_DIR", str(tmp_path / "rt"))
    held = tmp_path / "held.dat"
    held.write_bytes(b"x")
    reg = Registry()  # this (live) process holds the file
    reg.add("file", **file_id(held))
    out = cleanup(tmp_path / "rt", "--yes")
    assert f"pid {os.getpid()}: still running; left alone (1 resources)" in out.stdout
    assert held.exists()
    assert reg.release_all() == [] and not held.exists()
    assert runs(tmp_path / "rt") == []


def test_a_replaced_file_is_not_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The entry names an inode: a new file at the same path is someone else's."""
    monkeypatch.setenv("KVTIER_RUNTIME_DIR", str(tmp_path / "rt"))
    path = tmp_path / "f.dat"
    path.write_bytes(b"old")
    reg = Registry()
    reg.add("file", **file_id(path))
    os.link(path, tmp_path / "old")  # the old inode lives on, so the new one differs
    path.unlink()
    path.write_bytes(b"new owner")  # same path, another inode
    assert reg.release_all() == []
    assert path.read_bytes() == b"new owner"


@needs_throttle
def test_loops_cgroup_and_shm_of_a_killed_validate_are_removed(tmp_path: Path):
    pid = kill9(VALIDATE, "replay", tmp_path)
    out, runtime = tmp_path / "out", tmp_path / "rt"
    left = leftovers(pid, runtime, out)
    assert any("loop" in x or "/dev/loop" in x for x in left)  # really left behind
    assert any(f"kvtier-{pid}-" in x for x in left)  # its cgroup
    assert any(f"kvtier-emu-{pid}-" in x for x in left)  # its /dev/shm files
    done = cleanup(runtime, "--yes")
    assert done.returncode == 0, done.stderr
    assert "already gone or not ours" not in done.stdout, done.stdout
    assert leftovers(pid, runtime, out) == []

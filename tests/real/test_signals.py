"""Interrupts of the real backend: whatever phase a signal hits, nothing is left.

Each test runs ``kvtier real ...`` in a child process with the phase hook
(``KVTIER_TEST_SIGNAL_AT``, :func:`real._signals.phase`) so the child waits at
that phase, signals it there, and checks the exit status (128 + signal) and
that nothing the child made survives: no state file, no loop device backed
by its emulation files, no blkio cgroup named for its pid, no ``/dev/shm``
or data files of its own, no process whose command line names its output.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtier.contracts.plan import PlanBuilder, write_plan
from real import blkio

ROOT = Path(__file__).resolve().parents[2]
NO_THROTTLE = blkio.throttle_unavailable()
needs_throttle = pytest.mark.skipif(
    NO_THROTTLE is not None, reason=f"needs root, loop devices and blkio: {NO_THROTTLE}"
)
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (apt install fio)")
SIGS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MiB = 1 << 20


def start(args: list[str], phase: str, runtime: Path) -> subprocess.Popen:
    env = dict(os.environ, KVTIER_TEST_SIGNAL_AT=phase, KVTIER_RUNTIME_DIR=str(runtime))
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "kvtier.cli", "real", *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # the test's own terminal signals never reach it
    )


def wait_for_phase(proc: subprocess.Popen, phase: str, timeout_s: float = 120) -> list[str]:
    """Read the child's stderr until it announces ``phase``; its lines so far."""
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == f"kvtier-phase {phase}":
            return lines
    proc.kill()
    pytest.fail(f"the child never reached phase {phase}: {''.join(lines)[-2000:]}")


def leftovers(pid: int, runtime: Path, out: Path, data: Path | None = None) -> list[str]:
    """Everything of child ``pid`` still on the machine (should be empty)."""
    left = [str(p) for p in runtime.glob("run-*.json")] if runtime.is_dir() else []
    left += [str(p) for p in Path("/dev/shm").glob(f"kvtier-emu-{pid}-*")]
    if blkio.CGROUP_ROOT.is_dir():
        left += [str(p) for p in blkio.CGROUP_ROOT.glob(f"kvtier-{pid}-*")]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    left += [ln for ln in loops.splitlines() if f"kvtier-emu-{pid}-" in ln]
    if data is not None:
        left += [str(p) for p in data.rglob("kvtier-*.dat")]
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(out) in cmd and "pytest" not in cmd:
                left.append(f"process {d.name}: {cmd[:120]}")
    return left


def interrupt(
    args: list[str], phase: str, sigs: list[int], tmp: Path, data: Path | None = None
) -> None:
    runtime, out = tmp / "rt", tmp / "out"
    proc = start([*args, "--out", str(out)], phase, runtime)
    wait_for_phase(proc, phase)
    for k, sig in enumerate(sigs):
        if k:
            time.sleep(0.2)
        os.kill(proc.pid, sig)
    err = proc.stderr.read()
    rc = proc.wait(timeout=120)
    assert rc == 128 + sigs[0], err[-2000:]
    assert "Traceback" not in err and "BufferError" not in err, err[-2000:]
    assert f"interrupted by {signal.Signals(sigs[0]).name}; cleaned up" in err
    assert leftovers(proc.pid, runtime, out, data) == []


VALIDATE = [
    "validate", "--emulate", "h20-8ssd", "--n", "2", "--steps", "1", "--step-s", "0.05",
    "--regimes", "bandwidth,write", "--designs", "none", "--no-engine-costs", "--scale", "0.05",
]  # fmt: skip
if shutil.which("fio") is None:  # the phases before fio are the same without its cross-check
    VALIDATE.append("--no-fio")
FIO_PHASE = pytest.param("fio", marks=needs_fio)


@needs_throttle
@pytest.mark.parametrize("sig", SIGS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("phase", ["setup", "fill", "replay", FIO_PHASE])
def test_validate_on_emulated_ssds_leaves_nothing(tmp_path: Path, phase: str, sig: int):
    interrupt(VALIDATE, phase, [sig], tmp_path)


@needs_throttle
@pytest.mark.parametrize("phase", ["fill", FIO_PHASE])
def test_double_ctrl_c_during_cleanup_leaves_nothing(tmp_path: Path, phase: str):
    interrupt(VALIDATE, phase, [signal.SIGINT, signal.SIGINT], tmp_path)


def _write_plan(path: Path) -> Path:
    b = PlanBuilder()
    b.read("ssd0", "dram0", 16 * MiB, 4, io_path="io_uring")
    b.write("dram0", "ssd0", 4 * MiB, 1, io_path="io_uring")
    write_plan(b.table(), path)
    return path


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: signal.Signals(s).name)
def test_replay_interrupted_during_the_fill_removes_its_files(
    tmp_path: Path, direct_dir: Path, sig: int
):
    """No root needed: the data files of ``real replay`` (the BufferError case)."""
    plan = _write_plan(tmp_path / "plan.parquet")
    data = direct_dir / "targets"
    data.mkdir()
    args = ["replay", "--plan", str(plan), "--targets-dir", str(data)]
    interrupt(args, "fill", [sig], tmp_path, data)
    assert list(data.iterdir()) == []  # the per-node directories it made went too

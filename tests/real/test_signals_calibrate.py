"""``kvtier real calibrate`` interrupted: nothing it made survives (see
:mod:`tests.real.test_signals` for the hook and the leftover checks)."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.real.test_signals import SIGS, interrupt, needs_throttle

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio (apt install fio)")
CAL = ["calibrate", "--size", "64MiB"]


@needs_throttle
@needs_fio
@pytest.mark.parametrize("sig", SIGS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("phase", ["setup", "fio"])
def test_calibrate_on_emulated_ssds_leaves_nothing(tmp_path: Path, phase: str, sig: int):
    args = [*CAL, "--emulate", "h20-8ssd", "--n", "2", "--scale", "0.05"]
    args += ["--profile", str(tmp_path / "local.yaml")]
    interrupt(args, phase, [sig], tmp_path)
    assert not (tmp_path / "local.yaml").exists()  # no half-measured profile written


@needs_fio
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_calibrate_of_directories_removes_its_files(tmp_path: Path, sig: int):
    """No root needed: the files ``--dir`` calibration lays out in each directory."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    for d in dirs:
        d.mkdir()
    args = [*CAL, "--dir", str(dirs[0]), "--dir", str(dirs[1])]
    args += ["--profile", str(tmp_path / "local.yaml")]
    interrupt(args, "fio", [sig], tmp_path, tmp_path)
    assert [list(d.iterdir()) for d in dirs] == [[], []]
    assert not (tmp_path / "local.yaml").exists()

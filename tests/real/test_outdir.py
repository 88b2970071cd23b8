"""The output lock (:mod:`kvtier.contracts.outdir`): one run per directory, for every command.

A concurrent second run is refused naming the holder's pid; a directory holding
another run's results is refused unless ``--force``; a rerun of the very same
deterministic run reuses its directory; a failed run leaves no directory it made.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.cli.main import main
from kvtier.contracts.outdir import LOCK, claim, run_id
from kvtier.contracts.validate import InputError

ROOT = Path(__file__).resolve().parents[2]
SIM = ["sim", "--scenario", "tiers", "--hw", "h20-8ssd", "--steps", "1"]


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


def test_run_id_equal_exactly_when_parts_are() -> None:
    assert run_id(a=1, b=[2, 3]) == run_id(b=[2, 3], a=1)  # key order does not matter
    assert run_id(a=1, seed=0) != run_id(a=1, seed=1)


def test_claim_records_pid_and_run_then_reuses_only_the_same_run(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    with claim(out, run="r1", label="first") as got:
        assert got == out
        (out / "x.csv").write_text("1")
        doc = json.loads((out / LOCK).read_text())
        assert doc == {"pid": os.getpid(), "run": "r1", "label": "first"}
    with claim(out, run="r1", label="first"):  # the same run again: no --force needed
        pass
    refused = pytest.raises(InputError, match=r"another run \(first\).*x\.csv.*--force")
    with refused, claim(out, run="r2"):
        pass
    with pytest.raises(InputError, match="--force"), claim(out):  # a measurement: no run id
        pass
    with claim(out, run="r2", force=True):
        pass
    assert json.loads((out / LOCK).read_text())["run"] == "r2"


def test_failed_run_removes_only_the_directories_it_made(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper"
    with pytest.raises(RuntimeError), claim(out):
        raise RuntimeError("boom")
    assert not (tmp_path / "new").exists()  # both levels made by the claim are gone
    keep = tmp_path / "keep"
    with pytest.raises(RuntimeError), claim(keep):
        (keep / "partial.parquet").write_text("x")  # something written: kept for a look
        raise RuntimeError("boom")
    assert (keep / "partial.parquet").exists()


def test_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="--out .*f"), claim(tmp_path / "f" / "sub"):
        pass


HOLD = textwrap.dedent(
    """
    import sys, time
    from kvtier.contracts.outdir import claim
    with claim(sys.argv[1], label="holder"):
        print("held", flush=True)
        time.sleep(60)
    """
)


@contextlib.contextmanager
def holding(path: Path) -> Iterator[int]:
    """``path`` claimed by another process while the block runs; yields its pid."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


SWEEP = ["sweep", "--scenario", "tiers", "--factor", "ssds=1", "--steps", "1", "--jobs", "1"]


@pytest.mark.parametrize(
    "argv, locked",
    [
        (SIM, "tiers/h20-8ssd"),  # sim and sweep write OUT/<scenario>/<profile>
        (SWEEP, "tiers/h20-8ssd"),
        (["real", "replay", "--plan", "p.parquet", "--targets-dir", "t"], ""),
        (["real", "validate", "--hw", "h20-8ssd", "--no-fio"], ""),
        (["real", "calibrate", "--dir", "d"], ""),
        (["real", "emulate", "--profile", "h20-8ssd"], ""),
    ],
    ids=["sim", "sweep", "replay", "validate", "calibrate", "emulate"],
)
def test_concurrent_second_run_is_refused_naming_the_holder(argv, locked, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    with holding(out / locked if locked else out) as pid:
        assert main([*argv, "--out", str(out), "--force"]) == 2  # --force does not break a lock
        err = _err(capsys)
    assert f"another kvtier run (pid {pid})" in err and str(out) in err


def test_the_lock_dies_with_its_holder(tmp_path) -> None:
    out = tmp_path / "res"
    with holding(out / "tiers" / "h20-8ssd"):
        pass  # killed
    assert main([*SIM, "--out", str(out), "--force"]) == 0


def test_sim_reruns_the_same_run_but_refuses_another_seed(tmp_path, capsys) -> None:
    out = tmp_path / "res"
    assert main([*SIM, "--out", str(out), "--seed", "1"]) == 0
    summary = out / "tiers" / "h20-8ssd" / "summary.csv"
    first = summary.read_bytes()
    assert main([*SIM, "--out", str(out), "--seed", "1"]) == 0  # same run: same bytes
    assert summary.read_bytes() == first
    capsys.readouterr()
    assert main([*SIM, "--out", str(out), "--seed", "2"]) == 2
    err = _err(capsys)
    assert "seed 1" in err and "--force" in err  # names the run it would overwrite
    assert summary.read_bytes() == first  # nothing mixed in
    assert main([*SIM, "--out", str(out), "--seed", "2", "--force"]) == 0


def test_sweep_refuses_another_sweep_in_its_directory(tmp_path, capsys) -> None:
    base = ["sweep", "--scenario", "tiers", "--steps", "1", "--jobs", "1", "--out", str(tmp_path)]
    assert main([*base, "--factor", "ssds=1"]) == 0
    capsys.readouterr()
    assert main([*base, "--factor", "ssds=2"]) == 2
    assert "--force" in _err(capsys)
    assert main([*base, "--factor", "ssds=1"]) == 0  # the same sweep again


def test_real_commands_refuse_results_already_there(tmp_path, capsys) -> None:
    """Measurements never reuse a directory silently (checked before any I/O: the
    plan and the devices given here do not even exist)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    for argv in (
        ["real", "replay", "--plan", "missing.parquet", "--targets-dir", "t"],
        ["real", "validate", "--hw", "h20-8ssd", "--no-fio"],
        ["real", "calibrate", "--dir", str(tmp_path / "nodir")],
        ["real", "emulate", "--profile", "h20-8ssd"],
    ):
        assert main([*argv, "--out", str(out)]) == 2, argv
        err = _err(capsys)
        assert "already holds results" in err and "report.json" in err, err

"""A plan subprocess killed by SIGKILL midway resumes: the rerun never simulates a stored point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sim.capacity.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["plan", "--context-tokens", "16384", "--docs", "2", "--designs", "pool",
        "--ssd-models", "9100 PRO", "--ssd-counts", "1,2,3,4", "--dram-modules", "1,2",
        "--dram-gib", "32", "--no-prune", "--jobs", "1"]  # fmt: skip


def test_sigkill_midway_then_rerun_computes_each_point_once(tmp_path):
    out = tmp_path / "plan"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kvtier.cli.main", *ARGS, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list((out / "points").glob("part-*.parquet"))) < 2:  # killed after 2 of 8
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("part-*.parquet")}
    assert 2 <= len(done) < 8 and len(ResultStore(out / "points")) == len(done)
    rerun = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"simulated {8 - len(done)} points this run" in rerun.stdout
    after = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("part-*.parquet")}
    assert len(after) == 8 and all(after[k] == v for k, v in done.items())  # none rewritten
    meta = json.loads((out / "plan.json").read_text())  # the rerun's provenance
    assert meta["executor"] == {"executor": "local", "workers": 1}  # --jobs 1
    assert (meta["simulated_this_run"], meta["resumed"]) == (8 - len(done), len(done))

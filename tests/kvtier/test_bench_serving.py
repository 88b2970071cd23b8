"""``kvtier bench-serving``: each row is a fresh-process run of the serving bench.

The span, op and flow counts it reports must be what an in-process run of
:func:`sim.serving.bench.run` with the same arguments gives (the simulation
is deterministic: two processes, one answer), and the speeds must be the
span over the best and the median CPU time of the passes it kept.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from kvtier.cli.main import main
from sim.serving import bench


def test_rows_equal_in_process_runs_and_speeds_are_span_over_cpu(tmp_path: Path) -> None:
    argv = [
        "bench-serving",
        "--requests",
        "12",
        "--blocks",
        "256,16",
        "--designs",
        "lmcache,gpu-only",
        "--repeat",
        "2",
        "--target",
        "1e9",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    record = json.loads((tmp_path / "bench-serving.json").read_text())
    rows = record["runs"]
    # blocks in the order given, designs in the order given within each
    assert [(r["block"], r["design"]) for r in rows] == [
        (256, "lmcache"), (256, "gpu-only"), (16, "lmcache"), (16, "gpu-only")
    ]  # fmt: skip
    for r in rows:
        ref = bench.run(12, r["design"], r["block"], "h100-2dimm-2ssd", "Llama-3.1-8B", 0)
        assert r["span_s"] == ref["span_s"]
        assert (r["ops"], r["flows"], r["requests"]) == (ref["ops"], ref["flows"], 12)
        assert len(r["cpu_s"]) == 2 and r["best_cpu_s"] == min(r["cpu_s"])
        assert r["median_cpu_s"] == statistics.median(r["cpu_s"])
        assert r["speed_cpu_best"] == r["span_s"] / r["best_cpu_s"]
        assert r["us_per_flow"] == pytest.approx(1e6 * r["best_cpu_s"] / r["flows"])
        assert r["meets_target"] is False  # nothing runs at 1e9x real time
    assert record["requests"] == 12 and "git" in record and "machine" in record
    assert len(record["loadavg"]) == 2


def test_lmcache_moves_more_than_gpu_only_on_the_same_trace(tmp_path: Path) -> None:
    """The op counts are the runs' own: offloading adds store ops to the
    GPU-only design's compute ops (at least one per request whose blocks it
    keeps), so LMCache issues more ops and flows on the same requests."""
    argv = [
        "bench-serving",
        "--requests",
        "12",
        "--blocks",
        "256",
        "--designs",
        "gpu-only,lmcache",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    gpu, lmc = json.loads((tmp_path / "bench-serving.json").read_text())["runs"]
    assert lmc["ops"] > gpu["ops"] and lmc["flows"] > gpu["flows"]
    assert gpu["ops"] == gpu["flows"]  # GPU only: one compute flow per iteration, nothing else

"""``kvtier bench-serving``: each row is a fresh-process run of the serving bench.

The span, arrival duration, offered load, op and flow counts it reports must
be what an in-process run of :func:`sim.serving.bench.run` with the same
arguments gives (the simulation is deterministic: two processes, one
answer), and the speeds must be the arrival duration and the span over the
best and the median CPU time of the whole command in the passes it kept.
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
        "--load",
        "0.5",
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
        ref = bench.run(12, r["design"], r["block"], "h100-2dimm-2ssd", "Llama-3.1-8B", 0, load=0.5)
        assert (r["span_s"], r["duration_s"]) == (ref["span_s"], ref["duration_s"])
        assert r["offered_load"] == pytest.approx(0.5, rel=1e-12)
        assert (r["ops"], r["flows"], r["requests"]) == (ref["ops"], ref["flows"], 12)
        cpu = r["cmd_cpu_s"]
        assert len(cpu) == 2 and r["best_cpu_s"] == min(cpu)
        assert r["median_cpu_s"] == statistics.median(cpu)
        assert r["speed_trace_best"] == r["duration_s"] / r["best_cpu_s"]
        assert r["speed_trace_median"] == r["duration_s"] / r["median_cpu_s"]
        assert r["speed_span_best"] == r["span_s"] / r["best_cpu_s"]
        assert r["run_cpu_s"] < r["best_cpu_s"]  # the run is part of the whole command
        assert r["meets_target"] is False  # nothing runs at 1e9x real time
    assert record["requests"] == [12] and record["load"] == 0.5
    assert "git" in record and "machine" in record
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


def test_growth_is_cpu_seconds_per_thousand_requests() -> None:
    """1,000 requests in 2.0 CPU s and 4,000 in 10.0 s: 2.00 and 2.50 s per 1K,
    1.25 times the cost per request at the larger count; a count not run: '-'."""
    from kvtier.cli.bench_serving import growth_table

    rows = [
        {"design": "gpu-only", "block": 16, "requests": 1000, "best_cpu_s": 2.0},
        {"design": "gpu-only", "block": 16, "requests": 4000, "best_cpu_s": 10.0},
        {"design": "pool", "block": 256, "requests": 1000, "best_cpu_s": 3.0},
    ]
    cols = growth_table(rows, [1000, 4000]).columns
    assert [list(c._cells) for c in cols] == [
        ["gpu-only", "pool"], ["16", "256"], ["2.00", "3.00"], ["2.50", "-"], ["1.25", "-"]
    ]  # fmt: skip


def test_requests_list_refuses_what_is_not_a_count() -> None:
    from kvtier.cli.bench_serving import parse_requests
    from kvtier.contracts.validate import InputError

    assert parse_requests("1000,4000,12000") == [1000, 4000, 12000]
    for bad in ("0", "1,-2", "1.5", "1,,2"):
        with pytest.raises(InputError, match="--requests"):
            parse_requests(bad)

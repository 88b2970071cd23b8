"""kvtier replay vs fio: fio's rate without its tail bias, and the cross-check end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from kvtier.contracts.plan import PlanBuilder
from real.crosscheck import describe, fio_cross_check, steps_of
from real.datafile import prepare_targets
from real.errors import RealError
from real.iolog import summarize_replay
from real.replay import replay

MIB = 1 << 20


def two_step_plan():
    """Step 0: 4 x 1 MiB from each of two SSDs at QD2; step 1 (after 0): the same again."""
    b, io = PlanBuilder(), {"io_path": "io_uring", "queue_depth": 2}
    first = [
        b.read(s, "dram0", 4 * MIB, 4, step=0, tag="bandwidth", **io) for s in ("ssd0", "ssd1")
    ]
    for s in ("ssd0", "ssd1"):
        b.read(
            s, "dram0", 4 * MIB, 4, offset=4 * MIB, step=1, depends_on=first, tag="bandwidth", **io
        )
    steps = pd.DataFrame(
        {"step": [0, 1], "regime": ["bandwidth", "bandwidth"], "warmup": [True, False]}
    )
    return b.table(), steps


def fio_job(node: str, runtime_ms: int, counted: int, ios: int) -> dict:
    return {
        "jobname": node,
        "job_runtime": runtime_ms,
        "read": {"io_bytes": counted, "total_ios": ios},
        "write": {"io_bytes": 0, "total_ios": 0},
    }


def test_fio_rate_counts_only_what_fio_counted() -> None:
    plan, _ = two_step_plan()
    # fio issued all 8 I/Os per device but counted 7 MiB (the last completion left out)
    doc = {"jobs": [fio_job("ssd0", 100, 7 * MIB, 8), fio_job("ssd1", 200, 7 * MIB, 8)]}
    got = summarize_replay(doc, plan)
    assert got["bytes"] == 16 * MIB  # the plan's bytes
    assert got["elapsed_s"] == pytest.approx(0.2)
    assert got["throughput_bps"] == pytest.approx(16 * MIB / 0.2)  # tail-biased
    assert got["measured_bps"] == pytest.approx(14 * MIB / 0.2)
    with pytest.raises(RealError, match="fio issued 7 I/Os on ssd1, the plan has 8"):
        summarize_replay({"jobs": [fio_job("ssd1", 10, MIB, 7)]}, plan)


def test_steps_of_keeps_only_the_chosen_steps() -> None:
    plan, _ = two_step_plan()
    sub = steps_of(plan, [1])
    assert sub.column("op_id").to_pylist() == [2, 3]
    assert steps_of(plan, []).num_rows == 0


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_cross_check_replays_the_measured_steps_with_fio(direct_dir: Path, tmp_path: Path) -> None:
    plan, steps = two_step_plan()
    files = prepare_targets(plan, direct_dir / "t")
    try:
        real = replay(plan, files.targets, engine="threads")
        got = fio_cross_check(plan, steps, real, files.targets, tmp_path / "fio")
    finally:
        files.cleanup()
    assert got["steps"] == [1]  # the warm-up step is left out
    assert got["bytes"] == 8 * MIB and got["iodepth"] == 2
    ops = real.ops.to_pandas().set_index("op_id").loc[[2, 3]]
    assert got["kvtier_s"] == pytest.approx(ops["end_s"].max() - ops["start_s"].min())
    assert got["ratio"] == pytest.approx(got["kvtier_bps"] / got["fio_bps"])
    assert got["fio_bps"] > 0 and "ratio" in describe(got)
    log = (tmp_path / "fio" / "ssd0.iolog").read_text().splitlines()
    assert [line.split()[-2:] for line in log[3:-1]] == [
        [str(4 * MIB + k * MIB), str(MIB)] for k in range(4)
    ]


def test_cross_check_says_why_it_is_skipped() -> None:
    plan, steps = two_step_plan()
    if shutil.which("fio") is None:
        assert fio_cross_check(plan, steps, None, {}, ".") == {"skipped": "fio is not installed"}
        return
    none = steps.assign(regime="iops")
    got = fio_cross_check(plan, none, None, {}, ".")
    assert got == {"skipped": "the plan has no measured 'bandwidth' steps"}
    assert describe(got).startswith("fio cross-check skipped")

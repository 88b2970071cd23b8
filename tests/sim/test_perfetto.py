"""Perfetto / Chrome trace export: one complete event per op, one track per device."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from kvtier.contracts.plan import PlanBuilder
from kvtier.contracts.records import op_records
from sim.perfetto import trace_events, write_trace

# (start_s, end_s) of each op of the plan below
TIMES = [(0.0, 0.25), (0.0, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.125)]


@pytest.fixture
def ops() -> pa.Table:
    b = PlanBuilder()
    r0 = b.read("ssd0", "dram0", 4096, 1, io_path="io_uring", layer=0)
    r1 = b.read("ssd1", "dram0", 8192, 2, io_path="io_uring", layer=0)
    c = b.copy("dram0", "gpu0", 12288, depends_on=[r0, r1], layer=0)
    k = b.compute("gpu0", 1e9, 1e6, depends_on=[c], layer=0, step=1)
    b.write("dram0", "ssd0", 4096, 1, io_path="kernel_fs", depends_on=[k], layer=1, step=1)
    start = [s for s, _ in TIMES]
    end = [e for _, e in TIMES]
    return op_records(b.table(), start, start, end, [0.0] * 5, "sim")


def test_one_complete_event_per_op(ops: pa.Table) -> None:
    events = trace_events(ops, name="demo")
    xs = [e for e in events if e["ph"] == "X"]
    assert [e["args"]["op_id"] for e in xs] == [0, 1, 2, 3, 4]
    for e, (start, end) in zip(xs, TIMES, strict=True):
        assert e["ts"] == pytest.approx(start * 1e6)
        assert e["dur"] == pytest.approx((end - start) * 1e6)
        assert e["pid"] == 1
    assert [e["cat"] for e in xs] == ["read", "read", "copy", "compute", "write"]
    assert [e["args"]["bytes"] for e in xs] == [4096, 8192, 12288, 0, 4096]
    assert [e["args"]["step"] for e in xs] == [0, 0, 0, 1, 1]


def test_tracks_are_devices_with_thread_names(ops: pa.Table) -> None:
    events = trace_events(ops, name="demo")
    process = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert [e["args"]["name"] for e in process] == ["demo"]
    names = {
        e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
    }
    # reads on their SSD, a copy on its src->dst route, compute on its GPU, writes on the SSD
    assert sorted(names.values()) == ["dram0->gpu0", "gpu0", "ssd0", "ssd1"]
    track = [names[e["tid"]] for e in events if e["ph"] == "X"]
    assert track == ["ssd0", "ssd1", "dram0->gpu0", "gpu0", "ssd0"]


def test_empty_timeline_has_only_the_process_name() -> None:
    empty = op_records(PlanBuilder().table(), [], [], [], [], "sim")
    assert [e["name"] for e in trace_events(empty)] == ["process_name"]


def test_write_trace_writes_valid_json(ops: pa.Table, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    write_trace(ops, path, name="demo")
    data = json.loads(path.read_text())
    assert data["traceEvents"] == json.loads(json.dumps(trace_events(ops, name="demo")))
    assert sum(e["ph"] == "X" for e in data["traceEvents"]) == ops.num_rows

"""Transfer plans: building, Parquet round trip and validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kvtier.contracts.plan import (
    PLAN_SCHEMA,
    PlanBuilder,
    PlanError,
    depends_csr,
    extent_totals,
    extents_csr,
    io_extents,
    plan_from_columns,
    read_plan,
    validate_plan,
    write_plan,
)

NODES = {"ssd0", "dram0", "gpu0", "rc0"}
SSDS = {"ssd0"}
GPUS = {"gpu0"}


def small_plan() -> PlanBuilder:
    """read ssd0 -> dram0, write dram0 -> ssd0, copy dram0 -> gpu0, compute on gpu0."""
    b = PlanBuilder()
    r = b.read("ssd0", "dram0", 8192, 2, io_path="io_uring", layer=0, tag="kv_fetch")
    w = b.write("dram0", "ssd0", 4096, 1, io_path="kernel_fs", queue_depth=4, offset=4096)
    c = b.copy("dram0", "gpu0", 8192, depends_on=[r], layer=0, tag="h2d")
    b.compute("gpu0", 1e9, 2e6, depends_on=[c, w], step=1, layer=0, release_s=0.5, tag="attn")
    return b


def check(plan: pa.Table) -> None:
    validate_plan(plan, NODES, SSDS, GPUS)


def test_builder_assigns_row_numbers_as_ids_and_fills_columns() -> None:
    b = small_plan()
    assert len(b) == 4
    plan = b.table()
    assert plan.schema.equals(PLAN_SCHEMA)
    cols = plan.to_pydict()
    assert cols["op_id"] == [0, 1, 2, 3]
    assert cols["kind"] == ["read", "write", "copy", "compute"]
    assert cols["src"] == ["ssd0", "dram0", "dram0", ""]
    assert cols["dst"] == ["dram0", "ssd0", "gpu0", "gpu0"]
    assert cols["bytes"] == [8192, 4096, 8192, 0]
    assert cols["n_ios"] == [2, 1, 1, 0]  # a copy is one transfer unless told otherwise
    assert cols["io_path"] == ["io_uring", "kernel_fs", "none", "none"]
    assert cols["queue_depth"] == [0, 4, 0, 0]
    assert cols["offset"] == [0, 4096, 0, 0]
    assert cols["step"] == [0, 0, 0, 1]
    assert cols["layer"] == [0, -1, 0, 0]
    assert cols["flops"] == [0.0, 0.0, 0.0, 1e9]
    assert cols["hbm_bytes"] == [0.0, 0.0, 0.0, 2e6]
    assert cols["release_s"] == [0.0, 0.0, 0.0, 0.5]
    assert cols["depends_on"] == [[], [], [0], [2, 1]]
    assert cols["tag"] == ["kv_fetch", "", "h2d", "attn"]
    check(plan)


def test_builder_rejects_unknown_column() -> None:
    with pytest.raises(TypeError, match="nbytes"):
        PlanBuilder().add("read", "dram0", nbytes=1)


def test_plan_from_columns_with_csr_dependencies_equals_builder() -> None:
    columns = {
        "step": [0, 0, 0, 1],
        "layer": [0, -1, 0, 0],
        "kind": ["read", "write", "copy", "compute"],
        "src": ["ssd0", "dram0", "dram0", ""],
        "dst": np.array(["dram0", "ssd0", "gpu0", "gpu0"], dtype=object),
        "bytes": np.array([8192, 4096, 8192, 0]),
        "n_ios": np.array([2, 1, 1, 0]),
        "queue_depth": [0, 4, 0, 0],
        "io_path": ["io_uring", "kernel_fs", "none", "none"],
        "offset": [0, 4096, 0, 0],
        "flops": np.array([0.0, 0.0, 0.0, 1e9]),
        "hbm_bytes": [0.0, 0.0, 0.0, 2e6],
        "release_s": [0.0, 0.0, 0.0, 0.5],
        "tag": ["kv_fetch", "", "h2d", "attn"],
    }
    plan = plan_from_columns(columns, depends_offsets=[0, 0, 0, 1, 3], depends_values=[0, 2, 1])
    assert plan.equals(small_plan().table())
    offsets, values = depends_csr(plan)
    assert offsets.tolist() == [0, 0, 0, 1, 3]
    assert values.tolist() == [0, 2, 1]


def test_plan_from_columns_defaults_and_no_dependencies() -> None:
    plan = plan_from_columns(
        {"kind": ["compute"] * 3, "dst": ["gpu0"] * 3, "flops": [1.0, 2.0, 3.0]}
    )
    cols = plan.to_pydict()
    assert cols["op_id"] == [0, 1, 2]
    assert cols["layer"] == [-1, -1, -1]
    assert cols["io_path"] == ["none"] * 3
    assert cols["depends_on"] == [[], [], []]
    check(plan)


@pytest.mark.parametrize(
    "columns, match",
    [
        ({"kind": ["compute"]}, "'dst' is required"),
        ({"kind": ["compute"], "dst": ["gpu0"], "colour": ["red"]}, "colour"),
    ],
)
def test_plan_from_columns_errors(columns: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_from_columns(columns)


def test_depends_csr_of_a_sliced_plan() -> None:
    offsets, values = depends_csr(small_plan().table().slice(2, 2))
    assert offsets.tolist() == [0, 1, 3]
    assert values.tolist() == [0, 2, 1]


def test_parquet_round_trip(tmp_path: Path) -> None:
    plan = small_plan().table()
    write_plan(plan, tmp_path / "plan.parquet")
    back = read_plan(tmp_path / "plan.parquet")
    assert back.equals(plan)
    assert back.schema.equals(PLAN_SCHEMA)


def test_a_plan_written_before_gpu_s_reads_with_the_roofline(tmp_path: Path) -> None:
    plan = small_plan().table()
    pq.write_table(plan.drop_columns(["gpu_s"]), tmp_path / "old.parquet")
    back = read_plan(tmp_path / "old.parquet")
    assert back.equals(plan)  # gpu_s 0 everywhere: every compute op on its roofline
    assert back.column("gpu_s").to_pylist() == [0.0] * 4


def _one_line_plan_error(path: Path) -> str:
    with pytest.raises(PlanError) as exc:
        read_plan(path)
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(path) in msg
    return msg


def test_read_plan_of_other_parquet(tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "other.parquet")
    assert "not a transfer plan" in _one_line_plan_error(tmp_path / "other.parquet")


def test_read_plan_of_text_file(tmp_path: Path) -> None:
    (tmp_path / "text.parquet").write_text("line one\nline two\n")
    _one_line_plan_error(tmp_path / "text.parquet")


def test_read_plan_of_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _one_line_plan_error(tmp_path / "missing.parquet")


# (op number, column named in the message, plan)
def _bad(**fields) -> PlanBuilder:
    b = PlanBuilder()
    b.read("ssd0", "dram0", 4096, 1, io_path="io_uring")  # op 0 is always fine
    kind = fields.pop("kind")
    dst = fields.pop("dst")
    b.add(kind, dst, **fields)
    return b


READ = {
    "kind": "read",
    "src": "ssd0",
    "dst": "dram0",
    "bytes": 4096,
    "n_ios": 1,
    "io_path": "io_uring",
}
COPY = {"kind": "copy", "src": "dram0", "dst": "gpu0", "bytes": 4096, "n_ios": 1}
COMPUTE = {"kind": "compute", "dst": "gpu0", "flops": 1.0}

BAD_ROWS = {
    "unknown kind": ({**READ, "kind": "move"}, "kind"),
    "unknown src node": ({**READ, "src": "ssd9"}, "src"),
    "unknown dst node": ({**COPY, "dst": "gpu7"}, "dst"),
    "read from dram": ({**READ, "src": "dram0", "dst": "gpu0"}, "src"),
    "write to dram": ({**READ, "kind": "write", "src": "gpu0", "dst": "dram0"}, "dst"),
    "copy from ssd": ({**COPY, "src": "ssd0"}, "src"),
    "copy to ssd": ({**COPY, "dst": "ssd0"}, "dst"),
    "compute on dram": ({**COMPUTE, "dst": "dram0"}, "dst"),
    "compute on a switch": ({**COMPUTE, "dst": "rc0"}, "dst"),
    "compute with no work": ({**COMPUTE, "flops": 0.0}, "flops"),
    "zero bytes": ({**READ, "bytes": 0}, "bytes"),
    "negative bytes": ({**COPY, "bytes": -1}, "bytes"),
    "zero n_ios": ({**READ, "n_ios": 0}, "n_ios"),
    "read with io_path none": ({**READ, "io_path": "none"}, "io_path"),
    "write with io_path none": (
        {**READ, "kind": "write", "src": "dram0", "dst": "ssd0", "io_path": "none"},
        "io_path",
    ),
    "unknown io_path": ({**READ, "io_path": "mmap"}, "io_path"),
    "depends on itself": ({**COPY, "depends_on": [1]}, "depends_on"),
    "depends on a later op": ({**COPY, "depends_on": [0, 2]}, "depends_on"),
    "depends on a negative op": ({**COPY, "depends_on": [-1]}, "depends_on"),
    "negative queue_depth": ({**READ, "queue_depth": -1}, "queue_depth"),
    "negative offset": ({**READ, "offset": -4096}, "offset"),
    "negative stride": ({**READ, "stride": -1}, "stride"),
    "negative release_s": ({**COMPUTE, "release_s": -0.1}, "release_s"),
    "negative gpu_s": ({**COMPUTE, "gpu_s": -1e-3}, "gpu_s"),
    "infinite gpu_s": ({**COMPUTE, "gpu_s": float("inf")}, "gpu_s"),
    "gpu_s on a copy": ({**COPY, "gpu_s": 1e-3}, "gpu_s"),
    "gpu_s on a cpu op": ({**COMPUTE, "dst": "cpu", "threads": 1, "gpu_s": 1e-3}, "gpu_s"),
}


@pytest.mark.parametrize("row, column", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_validate_rejects_bad_op(row: dict, column: str) -> None:
    plan = _bad(**row).table()
    with pytest.raises(PlanError) as exc:
        check(plan)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("op 1:"), msg
    assert column in msg


def test_validate_rejects_op_id_not_row_number() -> None:
    plan = small_plan().table()
    ids = pa.array([0, 1, 3, 2], pa.int64())
    plan = plan.set_column(0, PLAN_SCHEMA.field("op_id"), ids)
    with pytest.raises(PlanError, match=r"^op row 2: op_id .*got 3$"):
        check(plan)


def test_validate_rejects_wrong_schema() -> None:
    plan = small_plan().table().drop_columns(["tag"])
    with pytest.raises(PlanError, match="tag"):
        check(plan)


def test_validate_accepts_good_plans_and_empty_plan() -> None:
    check(small_plan().table())
    check(PlanBuilder().table())
    gds = PlanBuilder()
    gds.read("ssd0", "gpu0", 4096, 1, io_path="gds")
    check(gds.table())


# ---- geometry: offset/stride patterns and the extents side table ------------------------
def test_extents_set_the_regular_columns_and_survive_parquet(tmp_path: Path) -> None:
    b = PlanBuilder()
    ext = np.array([[8192, 4096], [40960, 12288], [4096, 4096]])
    b.read("ssd0", "dram0", extents=ext, io_path="io_uring")
    b.copy("dram0", "gpu0", 20480, depends_on=[0])
    plan = b.table()
    check(plan)
    row = plan.slice(0, 1).to_pylist()[0]
    # 4096 + 12288 + 4096 bytes in 3 I/Os, first at 8192, no stride
    assert (row["bytes"], row["n_ios"], row["offset"], row["stride"]) == (20480, 3, 8192, 0)
    assert row["extents"] == [
        {"offset": 8192, "length": 4096},
        {"offset": 40960, "length": 12288},
        {"offset": 4096, "length": 4096},
    ]
    write_plan(plan, tmp_path / "p.parquet")
    back = read_plan(tmp_path / "p.parquet")
    assert back.equals(plan)
    ptr, table = extents_csr(back)
    assert ptr.tolist() == [0, 3, 3]
    np.testing.assert_array_equal(table, ext)


def test_io_extents_expand_both_forms() -> None:
    b = PlanBuilder()
    # 5 blocks in 2 I/Os from offset 0, contiguous: 3 + 2 blocks
    b.read("ssd0", "dram0", 5 * 4096, 2, io_path="io_uring")
    # 3 I/Os of 2 blocks, 1 MiB apart, from 64 KiB
    b.read("ssd0", "dram0", 6 * 4096, 3, io_path="io_uring", offset=65536, stride=1 << 20)
    b.compute("gpu0", 1e9, 0.0)
    b.write("dram0", "ssd0", extents=np.array([[0, 8192], [16384, 4096]]), io_path="io_uring")
    io = io_extents(b.table())
    assert io.op.tolist() == [0, 0, 1, 1, 1, 3, 3]
    assert io.offset.tolist() == [0, 12288, 65536, 65536 + (1 << 20), 65536 + (2 << 20), 0, 16384]
    assert io.length.tolist() == [12288, 8192, 8192, 8192, 8192, 8192, 4096]
    assert io.ptr.tolist() == [0, 2, 5, 7]
    only = io_extents(b.table(), np.array([3]))
    assert only.offset.tolist() == [0, 16384] and only.op.tolist() == [3, 3]


@pytest.mark.parametrize(
    "col, value, match",
    [
        ("bytes", 4096, "bytes 4096 disagrees with its extents \\(8192\\)"),
        ("n_ios", 1, "n_ios 1 disagrees"),
        ("offset", 0, "offset 0 disagrees"),
        ("stride", 4096, "stride 4096 disagrees"),
    ],
)
def test_validate_rejects_columns_that_contradict_extents(col: str, value: int, match: str):
    b = PlanBuilder()
    b.read("ssd0", "dram0", extents=np.array([[4096, 4096], [12288, 4096]]), io_path="io_uring")
    plan = b.table()
    i = plan.schema.get_field_index(col)
    plan = plan.set_column(i, col, pa.array([value], plan.schema.field(col).type))
    with pytest.raises(PlanError, match=f"op 0: {match}"):
        check(plan)


def test_validate_rejects_bad_extents() -> None:
    b = PlanBuilder()
    b.read("ssd0", "dram0", extents=np.array([[4096, 0]]), io_path="io_uring")
    with pytest.raises(PlanError, match="op 0: extent \\(4096, 0\\) needs"):
        check(b.table())
    cols = {"kind": ["copy"], "src": ["dram0"], "dst": ["gpu0"], "bytes": [4096], "n_ios": [1]}
    plan = plan_from_columns(cols, extents=(np.array([0, 1]), np.array([[0, 4096]])))
    with pytest.raises(PlanError, match="op 0: only read/write ops carry extents"):
        check(plan)


def test_io_bytes_cuts_ranges_into_ios_that_never_cross_a_range() -> None:
    b = PlanBuilder()
    # ranges of 300 KiB and 128 KiB at 128 KiB I/Os: 128 + 128 + 44, then 128 -> 4 I/Os
    ext = np.array([[1 << 20, 300 << 10], [0, 128 << 10]])
    b.read("ssd0", "dram0", extents=ext, io_bytes=128 << 10, io_path="io_uring")
    b.write("dram0", "ssd0", extents=np.array([[8192, 8192]]), io_path="io_uring")
    plan = b.table()
    check(plan)
    row = plan.slice(0, 1).to_pylist()[0]
    assert (row["bytes"], row["n_ios"], row["offset"]) == (428 << 10, 4, 1 << 20)
    io = io_extents(plan)
    kib = [(int(o) >> 10, int(n) >> 10) for o, n in zip(io.offset, io.length, strict=True)]
    assert kib == [(1024, 128), (1152, 128), (1280, 44), (0, 128), (8, 8)]
    assert io.ptr.tolist() == [0, 4, 5]
    assert extent_totals(ext, 128 << 10) == (428 << 10, 4)
    assert extent_totals(ext, 0) == (428 << 10, 2)


def test_validate_rejects_io_bytes_without_extents_or_wrong_io_count() -> None:
    b = PlanBuilder()
    b.read("ssd0", "dram0", 8192, 2, io_bytes=4096, io_path="io_uring")
    with pytest.raises(PlanError, match="op 0: io_bytes 4096 needs extents"):
        check(b.table())
    b = PlanBuilder()
    b.read("ssd0", "dram0", extents=np.array([[0, 16384]]), io_bytes=4096, io_path="io_uring")
    plan = b.table()
    i = plan.schema.get_field_index("n_ios")
    plan = plan.set_column(i, "n_ios", pa.array([1], pa.int64()))  # 16 KiB / 4 KiB is 4
    with pytest.raises(PlanError, match="op 0: n_ios 1 disagrees with its extents \\(4\\)"):
        check(plan)


def test_validate_names_the_first_bad_op_among_repeats() -> None:
    # rows are checked once per distinct combination: op 3 repeats op 2's bad shape
    # (bytes -1 vs -2: same failure), so the message must still name op 2, its bytes
    b = PlanBuilder()
    for _ in range(2):
        b.read("ssd0", "dram0", 4096, 1, io_path="io_uring")
    b.add("copy", "gpu0", src="dram0", bytes=-1, n_ios=1)
    b.add("copy", "gpu0", src="dram0", bytes=-2, n_ios=1)
    with pytest.raises(PlanError, match=r"^op 2: copy needs bytes > 0, got -1$"):
        check(b.table())


@pytest.mark.parametrize("column", ["kind", "src", "io_path"])
def test_validate_rejects_a_null_string(column: str) -> None:
    plan = small_plan().table()
    values = plan.column(column).to_pylist()
    values[2] = None
    i = plan.schema.get_field_index(column)
    plan = plan.set_column(i, plan.schema.field(column), pa.array(values, pa.string()))
    with pytest.raises(PlanError, match=rf"^op 2: .*{column}.*None"):
        check(plan)

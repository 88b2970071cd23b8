"""Arrow arrays built and read from their buffers (kvtier.contracts.arrays): the
same arrays and values as pyarrow's own converters, and no pandas import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from kvtier.contracts.arrays import arrow_array, nulls, to_numpy


@pytest.mark.parametrize(
    "values, type_",
    [
        (np.array([1.5, np.nan, -0.0, 1e300]), pa.float64()),
        (np.array([3, -7, 2**31 - 1], dtype=np.int64), pa.int32()),  # narrowed, exact
        (np.array([0.0, 2.0, -5.0]), pa.int64()),  # whole floats as pyarrow takes them
        ([4, 5, 6], pa.int64()),
        (np.array([True, False, True, True, False, False, True, False, True]), pa.bool_()),
        (["gpu0", "dram0", "ssd \u00e9", "gpu0", ""], pa.string()),
        ([], pa.string()),
        (np.zeros(0), pa.float64()),
    ],
)
def test_arrow_array_is_what_pyarrow_array_makes(values, type_) -> None:
    got = arrow_array(values, type_)
    got.validate(full=True)
    ref = pa.array(values, type_)
    assert got.type == ref.type and got.null_count == ref.null_count == 0
    assert repr(got.to_pylist()) == repr(ref.to_pylist())  # repr: NaN equals NaN, -0.0 shows


def test_string_bytes_are_utf8_with_offsets_worked_by_hand() -> None:
    a = arrow_array(["ab", "\u00e9", "", "ab"], pa.string())
    offsets = np.frombuffer(a.buffers()[1], np.int32)[: len(a) + 1]
    assert offsets.tolist() == [0, 2, 4, 4, 6]  # 'é' is two bytes in UTF-8
    assert a.buffers()[2].to_pybytes()[:6] == b"ab\xc3\xa9ab"


@pytest.mark.parametrize(
    "values, type_",
    [(np.array([2**40]), pa.int32()), (np.array([1.5]), pa.int64()), (["a", None], pa.string())],
)
def test_arrow_array_refuses_what_does_not_fit(values, type_) -> None:
    with pytest.raises(ValueError):
        arrow_array(values, type_)


def test_to_numpy_reads_chunks_with_offsets_and_fills_nulls() -> None:
    # sliced chunks start inside their buffers (bit 3 of a bitmap, element 2 of an int array)
    ints = pa.chunked_array([pa.array([9, 9, 1, None, 3], pa.int64())[2:], pa.array([4, 5])])
    assert to_numpy(ints, fill=-1).tolist() == [1, -1, 3, 4, 5]
    assert nulls(ints).tolist() == [False, True, False, False, False]
    with pytest.raises(ValueError):
        to_numpy(ints)  # nulls and no fill value
    bits = pa.array([True, True, True, False, True, False, False, True, True, False])[3:]
    assert to_numpy(bits).tolist() == [False, True, False, False, True, True, False]
    assert to_numpy(pa.chunked_array([], pa.float64())).dtype == np.float64
    strs = pa.chunked_array([pa.array(["x", "y"]), pa.array(["z"])])
    assert to_numpy(strs).tolist() == ["x", "y", "z"]


def test_to_numpy_agrees_with_pyarrow_on_every_type_it_reads() -> None:
    rng = np.random.default_rng(7)
    for type_, make in [
        (pa.int32(), lambda n: rng.integers(-(2**31), 2**31 - 1, n)),
        (pa.int64(), lambda n: rng.integers(-(2**62), 2**62, n)),
        (pa.float64(), lambda n: rng.normal(size=n)),
        (pa.bool_(), lambda n: rng.random(n) < 0.5),
    ]:
        col = pa.chunked_array([pa.array(make(n), type_)[1:] for n in (1, 9, 33)])
        assert np.array_equal(to_numpy(col), col.to_numpy(), equal_nan=type_ == pa.float64())


def test_a_serving_bench_run_imports_no_pandas() -> None:
    """The whole benchmark command (trace, engine, records) runs without pandas
    (0.16-0.22 CPU s to import), pyarrow's compute and parquet modules and rich,
    which it does not use (their imports are where they are used)."""
    unused = ["pandas", "pyarrow.compute", "pyarrow.parquet", "rich"]
    code = (
        "import sys\n"
        "from sim.serving import bench\n"
        "assert bench.main(['--requests', '40', '--design', 'paged-cpu-ssd', '--block', '16',"
        " '--load', '0.8', '--json']) == 0\n"
        f"print([m for m in {unused!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"

"""The serving run's compact plan: extent runs, chunks, and runs without a plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.contracts.plan import PlanBuilder, read_plan, write_plan
from sim.serving import planstore
from sim.serving.planstore import COLUMNS, PlanStore, encode_runs, expand_runs


def _csr(ops: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.cumsum([0] + [len(o) for o in ops])
    rows = [e for o in ops for e in o]
    return np.array(rows, dtype=np.int64).reshape(-1, 2), ptr


def test_runs_by_hand() -> None:
    ops = [
        [(0, 64), (64, 64), (128, 64), (1000, 64), (1064, 64)],  # two contiguous runs
        [],
        [(5000, 8), (4000, 8), (3000, 8), (3000, 16)],  # a falling run, then a new length
        [(7, 4), (100, 4), (1, 4)],  # 7 -> 100 is a run of two; 1 starts another
        [(9, 4)],  # an op boundary breaks the run 100 -> ... even at the same length
    ]
    runs, per_op = encode_runs(*_csr(ops))
    assert runs.tolist() == [
        [0, 64, 3, 64], [1000, 64, 2, 64],
        [5000, 8, 3, -1000], [3000, 16, 1, 0],
        [7, 4, 2, 93], [1, 4, 1, 0],
        [9, 4, 1, 0],
    ]  # fmt: skip
    assert per_op.tolist() == [2, 0, 2, 2, 1]
    assert expand_runs(runs).tolist() == [list(e) for o in ops for e in o]


def _greedy(ext: np.ndarray, ptr: np.ndarray) -> list[list[int]]:
    """The same greedy rule, one extent at a time (the reference)."""
    runs: list[list[int]] = []
    for a, b in zip(ptr[:-1], ptr[1:], strict=True):
        mine: list[list[int]] = []  # this op's runs: (offset, length, count, stride)
        for off, length in ext[a:b].tolist():
            r = mine[-1] if mine else None
            if r is not None and r[1] == length and (r[2] == 1 or off - r[0] == r[2] * r[3]):
                r[3] = off - r[0] if r[2] == 1 else r[3]
                r[2] += 1
            else:
                mine.append([off, length, 1, 0])
        runs += mine
    return runs


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([0, 8, 16, 40]), st.sampled_from([8, 16])), max_size=9),
        max_size=6,
    )
)
def test_runs_equal_the_one_at_a_time_greedy_and_expand_back(ops) -> None:
    # offsets as running sums of a few steps: many runs, many broken ones
    ops = [
        [(int(np.sum([s for s, _ in o[: i + 1]])), ln) for i, (_, ln) in enumerate(o)] for o in ops
    ]
    ext, ptr = _csr(ops)
    runs, per_op = encode_runs(ext, ptr)
    assert runs.tolist() == _greedy(ext, ptr)
    assert per_op.tolist() == [len(_greedy(*_csr([o]))) for o in ops]
    assert np.array_equal(expand_runs(runs), ext)


def _ops(n: int, rng: np.random.Generator) -> list[tuple[dict, list[int], np.ndarray | None]]:
    out = []
    for i in range(n):
        k = int(rng.integers(0, 7))
        ext = None
        if k:
            base = int(rng.integers(0, 100)) * 4096
            ext = np.array([(base + j * 8192, 4096) for j in range(k)], dtype=np.int64)
        row = {"kind": "read" if k else "compute", "src": "ssd0" if k else "", "dst": "gpu0",
               "bytes": 4096 * k, "n_ios": k, "queue_depth": 8 if k else 0,
               "io_path": "gds" if k else "none", "offset": 0 if ext is None else int(ext[0, 0]),
               "io_bytes": 0, "flops": 0.0 if k else 1e9, "hbm_bytes": 0.0 if k else 2e6,
               "gpu_s": 0.0 if k or i % 2 else 1e-3, "release_s": 0.5 * i, "step": i // 3,
               "layer": i % 4 - 1, "tag": "load"}  # fmt: skip
        deps = sorted({int(d) for d in rng.integers(0, i, size=2)}) if i else []
        out.append((row, deps, ext))
    return out


@pytest.mark.parametrize("as_runs", [False, True])
def test_chunks_rebuild_the_plan_a_builder_makes(monkeypatch, tmp_path, as_runs: bool) -> None:
    """Chunks of a few ops and extents, encoding mid-run and rows buffered
    three at a time: the concatenated plan, and the one written chunk by
    chunk, equal PlanBuilder's.  ``as_runs``: every other op with extents
    gives them as runs already (a store piece's way: one run of one extent
    each, or pairs at their stride), between ops whose extents wait to be
    encoded."""
    monkeypatch.setattr(planstore, "PENDING_EXTENTS", 5)
    monkeypatch.setattr(planstore, "CHUNK_EXTENTS", 7)
    monkeypatch.setattr(planstore, "CHUNK_OPS", 4)
    monkeypatch.setattr(planstore, "PENDING_ROWS", 3)  # rows reach the columns mid-run
    ops = _ops(23, np.random.default_rng(5))
    store, builder = PlanStore(), PlanBuilder()
    for i, (row, deps, ext) in enumerate(ops):
        if as_runs and ext is not None and i % 2:
            step = 8192  # _ops spaces an op's extents 8 KiB apart: pairs are runs of two
            runs = [[int(o), int(n), 2 if k + 1 < len(ext) else 1, step]
                    for k, (o, n) in enumerate(ext.tolist()) if k % 2 == 0]  # fmt: skip
            store.add(tuple(row[c] for c in COLUMNS), deps, None, np.array(runs, dtype=np.int64))
        else:
            store.add(tuple(row[c] for c in COLUMNS), deps, ext)
        fields = {k: v for k, v in row.items() if k not in ("kind", "dst", "offset")}
        if ext is not None:
            fields.update(bytes=0, n_ios=0)  # the builder takes them from the extents
        builder.add(row["kind"], row["dst"], depends_on=deps, extents=ext, **fields)
    expect = builder.table()
    chunks = list(store.chunks())
    assert len(chunks) > 4 and all(c.num_rows <= 4 for c in chunks)
    assert store.table().equals(expect)
    write_plan(store.chunks(), tmp_path / "plan.parquet")
    assert read_plan(tmp_path / "plan.parquet").equals(expect)


def test_a_store_without_its_plan_keeps_the_op_columns_only() -> None:
    ops = _ops(10, np.random.default_rng(1))
    kept, lean = PlanStore(), PlanStore(keep_plan=False)
    for row, deps, ext in ops:
        kept.add(tuple(row[c] for c in COLUMNS), deps, ext)
        lean.add(tuple(row[c] for c in COLUMNS), deps, ext)
    for name in ("bytes", "n_ios", "step", "layer", "kind", "src", "dst", "tag"):
        assert list(lean.column(name)) == list(kept.column(name))
    assert lean.runs_held() == 0 and len(lean.deps) == 0
    assert kept.runs_held() > 0 and len(kept.deps) > 0
    with pytest.raises(KeyError):
        lean.column("release_s")
    with pytest.raises(ValueError, match="keep_plan"):
        next(lean.chunks())

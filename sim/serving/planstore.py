"""The serving run's plan, written down compactly while the engine runs.

A serving run at real scale issues few ops (tens per request) but each SSD
op carries hundreds of extents (one byte range per offload block and layer):
the 12K-request Mooncake-shaped trace at 16-token blocks issues ~150M of
them, 2.4 GB as an (n, 2) int64 table.  They are regular: a piece's ranges
are consecutive slots of equal length, so :class:`PlanStore` keeps them as
*runs* (offset, length, count, stride) — extent ``i`` of a run is
(``offset + i * stride``, ``length``) — a few per op, and expands them back
only when the plan is asked for, in chunks of ops
(:meth:`PlanStore.chunks`), so that writing ``plan.parquet``
(:func:`kvtier.contracts.plan.write_plan`) never holds the whole extents table.  The
expanded plan is the one the ops were issued with, extent for extent.

Ops' scalar columns are kept in typed arrays (``array.array``: 8 bytes a
value, no Python object per value).  An op's row (a tuple) waits in a list of
at most :data:`PENDING_ROWS` rows, which are turned into columns together
(transposed by ``zip`` and appended by ``extend``, both in C): one list append
per op rather than one per column; a numeric column's values are made a typed
array at once (``array(code, values)``, about half the cost of extending a
typed array from a tuple, measured) and appended as one block.  The raw
extents of the latest ops wait in a bounded buffer and are encoded together
(vectorised) every :data:`PENDING_EXTENTS` rows.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import arrow_array
from kvtier.contracts.geometry import expand_runs
from kvtier.contracts.plan import plan_from_columns
from kvtier.contracts.plan_schema import OP_IDENTITY

PENDING_EXTENTS = 1 << 20  # raw extent rows buffered before they are encoded as runs
PENDING_ROWS = 1024  # op rows buffered before they are appended to the columns
CHUNK_EXTENTS = 1 << 22  # expanded extent rows per plan chunk (64 MiB), at most
CHUNK_OPS = 1 << 16  # ops per plan chunk, at most

# the plan columns an online op fills, in the order PlanStore.add takes them
COLUMNS = ("kind", "src", "dst", "bytes", "n_ios", "queue_depth", "io_path", "offset",
           "io_bytes", "flops", "hbm_bytes", "gpu_s", "release_s", "step", "layer",
           "tag")  # fmt: skip
NUMERIC = {"bytes": "q", "n_ios": "q", "queue_depth": "q", "offset": "q", "io_bytes": "q",
           "flops": "d", "hbm_bytes": "d", "gpu_s": "d", "release_s": "d", "step": "q",
           "layer": "q"}  # fmt: skip
STRINGS = ("kind", "src", "dst", "io_path", "tag")
RECORDED = set(OP_IDENTITY)  # the op records'
_DTYPE = {"q": np.int64, "d": np.float64}


def encode_runs(ext: np.ndarray, ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(runs, runs per op) of the extents of ops ``ptr`` delimits: op ``i``'s
    (offset, length) rows are ``ext[ptr[i]:ptr[i+1]]``.  A run is (offset,
    length, count, stride), ``(k, 4)`` int64, runs of one op in order.

    Runs are taken greedily, in order: extent ``i`` continues the run of
    extent ``i-1`` when both are of one op and have the same length (``i``
    *links* to ``i-1``), and either ``i-1`` starts its run or the step ``i-1
    -> i`` equals the step ``i-2 -> i-1``.  So a contiguous or evenly spaced
    sequence of equal ranges is one run.  Vectorised: a link with an equal
    step always continues, no link always starts, and a link with a new step
    starts a run exactly when ``i-1`` did not, so along a stretch of those
    starts alternate from the last position before the stretch.
    """
    ext = np.asarray(ext, dtype=np.int64).reshape(-1, 2)
    ptr = np.asarray(ptr, dtype=np.int64)
    n = len(ext)
    if n == 0:
        return np.zeros((0, 4), dtype=np.int64), np.zeros(len(ptr) - 1, dtype=np.int64)
    off, length = ext[:, 0], ext[:, 1]
    op_start = np.zeros(n, dtype=bool)
    op_start[ptr[:-1][np.diff(ptr) > 0]] = True
    link = np.zeros(n, dtype=bool)  # i may follow i-1 in one run
    link[1:] = ~op_start[1:] & (length[1:] == length[:-1])
    step = np.zeros(n, dtype=np.int64)
    step[1:] = off[1:] - off[:-1]
    same = np.zeros(n, dtype=bool)  # i-1 linked to i-2 with the step i-1 -> i
    same[2:] = link[1:-1] & (step[2:] == step[1:-1])
    toggle = link & ~same
    idx = np.arange(n)
    before = np.maximum.accumulate(np.where(toggle, 0, idx))  # last non-toggle position
    start = np.where(toggle, ~link[before] ^ ((idx - before) % 2 == 1), ~link)
    starts = np.flatnonzero(start)
    count = np.diff(np.append(starts, n))
    runs = np.empty((len(starts), 4), dtype=np.int64)
    runs[:, 0], runs[:, 1], runs[:, 2] = off[starts], length[starts], count
    runs[:, 3] = np.where(count > 1, step[np.minimum(starts + 1, n - 1)], 0)
    owner = np.searchsorted(ptr, starts, side="right") - 1
    return runs, np.bincount(owner, minlength=len(ptr) - 1).astype(np.int64)


class PlanStore:
    """Every op an online run issued, compactly; a plan again on demand.

    ``keep_plan=False``: only the columns the op records need are kept
    (:data:`RECORDED`; extents, dependencies and the other columns are
    dropped as they come, :meth:`chunks` is refused)."""

    def __init__(self, keep_plan: bool = True):
        self.keep_plan = keep_plan
        kept = set(NUMERIC) | set(STRINGS) if keep_plan else RECORDED
        self.num = {name: array(code) for name, code in NUMERIC.items() if name in kept}
        self.text: dict[str, list[str]] = {name: [] for name in STRINGS if name in kept}
        cols: dict[str, Any] = {**self.num, **self.text}
        # per kept column: its position in a row, its store, its typecode (None: strings)
        self._sinks = [
            (k, cols[name], NUMERIC.get(name)) for k, name in enumerate(COLUMNS) if name in cols
        ]
        self._rows: list[tuple] = []  # rows not yet in the columns (PENDING_ROWS at most)
        self.dep_count = array("q")
        self.deps = array("q")
        self.ext_count = array("q")  # extents per op (a kept plan only)
        self._runs: list[np.ndarray] = []
        self._run_count: list[np.ndarray] = []  # runs per op, for the ops encoded so far
        self._encoded = 0  # ops whose runs are in _runs
        self._arrow: dict[str, pa.Array] = {}  # string columns made Arrow arrays (strings())
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0

    def __len__(self) -> int:
        return len(self.text["kind"]) + len(self._rows)

    def add(
        self,
        row: tuple,
        deps: Sequence[int],
        extents: np.ndarray | None,
        runs: np.ndarray | None = None,
    ) -> None:
        """Write down one op: its scalar columns (``row``, in :data:`COLUMNS`
        order), dependencies and extents, or its extents as ``runs`` already
        (a store's pieces are made so: kept as they are)."""
        rows = self._rows
        rows.append(row)
        if len(rows) >= PENDING_ROWS:
            self._flush()
        if not self.keep_plan:
            return
        self.dep_count.append(len(deps))
        self.deps.extend(deps)
        if runs is not None:
            self._encode()  # the ops before this one first: runs stay in op order
            self.ext_count.append(int(runs[:, 2].sum()))
            self._runs.append(runs)
            self._run_count.append(np.array([len(runs)], dtype=np.int64))
            self._encoded += 1
            return
        n_ext = 0 if extents is None else len(extents)
        self.ext_count.append(n_ext)
        if n_ext:
            self._pending.append(extents)
            self._pending_rows += n_ext
            if self._pending_rows >= PENDING_EXTENTS:
                self._encode()

    def _flush(self) -> None:
        """Append the buffered rows to the columns, column by column."""
        if self._rows:
            cols = list(zip(*self._rows, strict=True))
            for k, col, code in self._sinks:
                col.extend(cols[k] if code is None else array(code, cols[k]))
            self._rows = []

    def _encode(self) -> None:
        """Turn the buffered extents (of the ops not yet encoded) into runs."""
        n = len(self.ext_count)
        if self._encoded == n:
            return
        if self._pending:
            counts = np.frombuffer(self.ext_count, dtype=np.int64)[self._encoded :]
            ptr = np.concatenate([[0], np.cumsum(counts)])
            runs, per_op = encode_runs(np.concatenate(self._pending), ptr)
            self._runs.append(runs)
        else:  # ops without extents since the last
            per_op = np.zeros(n - self._encoded, dtype=np.int64)
        self._run_count.append(per_op)
        self._encoded = n
        self._pending, self._pending_rows = [], 0

    def column(self, name: str) -> np.ndarray | list[str]:
        """One scalar column of every op (numpy view, or the list of strings);
        KeyError for a column not kept."""
        self._flush()
        if name in self.num:
            col = self.num[name]
            return np.frombuffer(col, dtype=_DTYPE[col.typecode])
        return self.text[name]

    def strings(self, name: str) -> pa.Array:
        """A string column of every op as an Arrow ``string`` array, made once
        while no op is added (the op records and the plan's chunks share it);
        KeyError for a column not kept."""
        self._flush()
        col = self.text[name]
        made = self._arrow.get(name)
        if made is None or len(made) != len(col):
            made = self._arrow[name] = arrow_array(col, pa.string())
        return made

    def runs_held(self) -> int:
        """Extent runs held (after encoding what is pending)."""
        self._encode()
        return sum(len(r) for r in self._runs)

    # ---- the plan -----------------------------------------------------------------
    def chunks(self) -> Iterator[pa.Table]:
        """The plan, as consecutive tables of whole ops (op ids global), each
        of at most :data:`CHUNK_OPS` ops and, but for an op with more,
        :data:`CHUNK_EXTENTS` extents."""
        if not self.keep_plan:
            raise ValueError("this run did not keep its plan (keep_plan=False)")
        self._encode()
        n = len(self)
        runs = np.concatenate(self._runs) if self._runs else np.zeros((0, 4), np.int64)
        per_op = np.concatenate(self._run_count) if self._run_count else np.zeros(0, np.int64)
        run_ptr = np.concatenate([[0], np.cumsum(per_op)])
        ext_ptr = np.concatenate([[0], np.cumsum(np.frombuffer(self.ext_count, np.int64))])
        dep_ptr = np.concatenate([[0], np.cumsum(np.frombuffer(self.dep_count, np.int64))])
        deps = np.frombuffer(self.deps, np.int64) if len(self.deps) else np.zeros(0, np.int64)
        a = 0
        while a < n or (a == 0 and n == 0):
            b = int(np.searchsorted(ext_ptr, ext_ptr[a] + CHUNK_EXTENTS, side="right")) - 1
            b = min(max(b, a + 1), a + CHUNK_OPS, n)
            ext = expand_runs(runs[run_ptr[a] : run_ptr[b]])
            cols: dict[str, Any] = {name: self.column(name)[a:b] for name in NUMERIC}
            cols.update({name: self.strings(name).slice(a, b - a) for name in STRINGS})
            table = plan_from_columns(
                cols,
                dep_ptr[a : b + 1] - dep_ptr[a],
                deps[dep_ptr[a] : dep_ptr[b]],
                (ext_ptr[a : b + 1] - ext_ptr[a], ext),
            )
            yield table.set_column(0, "op_id", pa.array(np.arange(a, b, dtype=np.int64)))
            if n == 0:
                return
            a = b

    def table(self) -> pa.Table:
        """The whole plan as one table (small runs and tests: it holds every extent)."""
        return pa.concat_tables(list(self.chunks())).combine_chunks()

"""Request traces: the one internal table every request-trace source becomes.

A request trace says what a serving workload asks for: when each request
arrives, how many tokens it sends and asks back, which session and turn it
belongs to, and the prefix-block hashes of its input.  Readers for the public
formats live in :mod:`traces.request_readers`, the multi-turn conversation
generator in :mod:`traces.conversation`, the ``kvtier trace`` commands in
:mod:`kvtier.cli.trace_requests`.

The table (:attr:`RequestTrace.table`, a ``pyarrow.Table``), one row per
request in arrival order:

=============  ===========  ==================================================
column         type         meaning
=============  ===========  ==================================================
request_id     int64        0..n-1 in arrival order
arrival_s      float64      seconds from the trace start, non-decreasing
session_id     int64        conversation the request belongs to; -1 unknown
turn           int32        0-based turn within the session; -1 unknown
input_tokens   int64        prompt tokens, > 0 (a multi-turn request counts its
                            whole re-sent history)
output_tokens  int64        tokens to decode, >= 1
block_hashes   list<int64>  one id per *full* block of ``block_tokens`` input
                            tokens, chained: equal ids mean equal prefixes up
                            to and including that block; empty when unknown
=============  ===========  ==================================================

Decisions:

* ``output_tokens`` >= 1: the serving model needs at least one decode token
  (the one that ends prefill), so a source's 0 is clipped to 1 and the number
  of clipped rows kept as :attr:`RequestTrace.clipped_outputs`.
* Only full blocks carry a hash: a prefix cache (vLLM, LMCache, Mooncake's
  store) can share a block only once it is full.  Mooncake's last, partial
  block id is dropped on reading (see :mod:`traces.request_readers`).
* ``prefix_reuse`` in :meth:`RequestTrace.stats` is the fraction of input
  blocks whose hash already appeared in an *earlier* request's input: the hit
  ratio of an infinite cache that holds every prefilled block.  Decoded tokens
  are not counted as cached, so a next turn's blocks that cover the previous
  answer are misses here (an engine that caches decode blocks can do better).
* Out-of-order source lines are sorted (stable) with a warning, not rejected:
  the order is recoverable without guessing (see :mod:`traces.request_readers`).

On disk a trace is one Parquet file with exactly these columns; the metadata
(``block_tokens``, ``source``, ``licence``, ``attribution``,
``clipped_outputs``, ``reordered``) is JSON in the schema metadata under the
key ``b"kvtier.requests"``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import arrow_array
from traces.errors import TraceError

META_KEY = b"kvtier.requests"
FORMAT_VERSION = 1
DATA_DIR = Path(__file__).parent / "data"  # small real-trace excerpts (see data/README.md)

SCHEMA = pa.schema(
    [
        ("request_id", pa.int64()),
        ("arrival_s", pa.float64()),
        ("session_id", pa.int64()),
        ("turn", pa.int32()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("block_hashes", pa.list_(pa.int64())),
    ]
)
_META_FIELDS = ("block_tokens", "source", "licence", "attribution", "clipped_outputs", "reordered")


def build_table(
    arrival_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    *,
    session_id: np.ndarray | None = None,
    turn: np.ndarray | None = None,
    hash_offsets: np.ndarray | None = None,
    hash_values: np.ndarray | None = None,
) -> pa.Table:
    """A table in :data:`SCHEMA` from columns already in arrival order.

    ``block_hashes`` comes CSR-style: request ``i`` has
    ``hash_values[hash_offsets[i]:hash_offsets[i + 1]]``; ``None`` = no hashes.
    """
    n = len(arrival_s)
    if hash_offsets is None:
        hash_offsets, hash_values = np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
    minus_one = np.full(n, -1, np.int64)
    i32, i64 = pa.int32(), pa.int64()
    columns = [  # built from buffers: pyarrow.array would import pandas (kvtier.contracts.arrays)
        arrow_array(np.arange(n, dtype=np.int64), i64),
        arrow_array(np.asarray(arrival_s, np.float64), pa.float64()),
        arrow_array(np.asarray(minus_one if session_id is None else session_id, np.int64), i64),
        arrow_array(np.asarray(minus_one if turn is None else turn, np.int32), i32),
        arrow_array(np.asarray(input_tokens, np.int64), i64),
        arrow_array(np.asarray(output_tokens, np.int64), i64),
        pa.ListArray.from_arrays(
            arrow_array(np.asarray(hash_offsets, np.int32), i32),
            arrow_array(np.asarray(hash_values, np.int64), i64),
        ),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


@dataclass(frozen=True)
class TraceStats:
    """Summary numbers of a request trace (what ``kvtier trace stats`` prints)."""

    requests: int
    duration_s: float  # last arrival - first arrival
    rate_rps: float  # 1 / mean inter-arrival time = (n - 1) / duration; nan if undefined
    input_tokens: dict[str, float]  # mean, p50, p90, p99, max
    output_tokens: dict[str, float]
    sessions: int  # distinct session_id >= 0
    turns_mean: float  # requests per known session (nan without sessions)
    turns_max: int
    blocks: int  # input blocks that carry a hash
    reused_blocks: int  # of those, seen in an earlier request
    prefix_reuse: float | None  # reused_blocks / blocks; None when the trace has no hashes
    reused_token_fraction: float | None  # reused_blocks * block_tokens / input tokens
    clipped_outputs: int
    reordered: int


def _summary(x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return dict.fromkeys(("mean", "p50", "p90", "p99", "max"), math.nan)
    p50, p90, p99 = (float(v) for v in np.percentile(x, [50, 90, 99]))
    return {"mean": float(x.mean()), "p50": p50, "p90": p90, "p99": p99, "max": float(x.max())}


@dataclass(frozen=True)
class RequestTrace:
    """A request table in :data:`SCHEMA` and where it came from.

    Attributes:
        table: the requests, one row each, in arrival order.
        block_tokens: tokens per hashed block (512 for Mooncake).
        source: provenance, ``<format>:<file>`` or ``generator:conversation ...``.
        licence: licence of the source data where known (``CC-BY-4.0`` for Azure).
        attribution: the citation the licence asks for, where known.
        clipped_outputs: rows whose ``output_tokens`` 0 was raised to 1 on reading.
        reordered: rows that arrived out of order in the source and were sorted.
    """

    table: pa.Table
    block_tokens: int
    source: str
    licence: str = ""
    attribution: str = ""
    clipped_outputs: int = 0
    reordered: int = 0

    def __len__(self) -> int:
        return self.table.num_rows

    def column(self, name: str) -> np.ndarray:
        """One scalar column as a numpy array."""
        return self.table.column(name).to_numpy()

    @property
    def arrival_s(self) -> np.ndarray:
        return self.column("arrival_s")

    @property
    def input_tokens(self) -> np.ndarray:
        return self.column("input_tokens")

    @property
    def output_tokens(self) -> np.ndarray:
        return self.column("output_tokens")

    def hashes(self) -> tuple[np.ndarray, np.ndarray]:
        """``block_hashes`` CSR-style: ``(offsets, values)``, request ``i`` owning
        ``values[offsets[i]:offsets[i + 1]]`` (no per-row Python objects)."""
        col = self.table.column("block_hashes").combine_chunks()
        offsets = col.offsets.to_numpy().astype(np.int64)
        values = col.values.to_numpy()[offsets[0] : offsets[-1]]
        return offsets - offsets[0], values

    def block_hashes(self, i: int) -> np.ndarray:
        """The hashes of request ``i``."""
        return np.asarray(self.table.column("block_hashes")[i].values, np.int64)

    def to_pandas(self):  # -> pandas.DataFrame (block_hashes as arrays)
        return self.table.to_pandas()

    def meta(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in _META_FIELDS}

    def _with(self, table: pa.Table, **changes: object) -> RequestTrace:
        return dataclasses.replace(self, table=table, **changes)

    def _take(self, rows: np.ndarray, arrival_s: np.ndarray) -> RequestTrace:
        """Rows (in order) renumbered 0..k-1 with new arrival times."""
        t = self.table.take(pa.array(rows, pa.int64()))
        t = t.set_column(0, "request_id", pa.array(np.arange(len(rows), dtype=np.int64)))
        t = t.set_column(1, "arrival_s", pa.array(np.asarray(arrival_s, np.float64)))
        return self._with(t)

    def window(self, t0: float, t1: float) -> RequestTrace:
        """Requests arriving in ``[t0, t1)``, shifted so the window starts at 0
        and renumbered; sessions cut by the window keep their turn numbers."""
        if not t1 > t0:
            raise TraceError(f"window: need t0 < t1, got [{t0}, {t1})")
        t = self.arrival_s
        rows = np.flatnonzero((t >= t0) & (t < t1))
        return self._take(rows, t[rows] - t0)

    def head(self, n: int) -> RequestTrace:
        """The first ``n`` requests."""
        rows = np.arange(min(max(n, 0), len(self)))
        return self._take(rows, self.arrival_s[rows])

    def scale_rate(self, factor: float) -> RequestTrace:
        """Arrivals compressed by ``factor``: ``arrival_s / factor``, so the
        request rate is multiplied by ``factor`` (2 = twice as many per second)."""
        if not (factor > 0 and math.isfinite(factor)):
            raise TraceError(f"scale_rate: factor must be a positive number, got {factor}")
        rows = np.arange(len(self))
        return self._take(rows, self.arrival_s / factor)

    def with_rate(self, rate_rps: float) -> RequestTrace:
        """Arrivals scaled so the mean rate (:attr:`TraceStats.rate_rps`) is ``rate_rps``."""
        current = self.stats().rate_rps
        if not (current > 0 and math.isfinite(current)):
            raise TraceError(f"with_rate: {self.source} has no defined rate to scale")
        return self.scale_rate(rate_rps / current)

    def with_block_tokens(self, block_tokens: int) -> RequestTrace:
        """Hashes of coarser blocks, ``block_tokens`` a multiple ``k`` of the current
        size: a chained id stands for its whole prefix, so the id of every
        ``k``-th block is the id of the coarse block ending there."""
        k, rest = divmod(block_tokens, self.block_tokens)
        if block_tokens <= 0 or rest:
            raise TraceError(
                f"with_block_tokens: {block_tokens} is not a multiple of {self.block_tokens}"
            )
        offsets, values = self.hashes()
        lengths = np.diff(offsets)
        pos = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
        new_offsets = np.r_[0, np.cumsum(lengths // k)]
        column = pa.ListArray.from_arrays(
            pa.array(new_offsets.astype(np.int32)), pa.array(values[pos % k == k - 1], pa.int64())
        )
        table = self.table.set_column(6, "block_hashes", column)
        return self._with(table, block_tokens=block_tokens)

    def validate(self) -> None:
        """Raise :class:`TraceError` naming the first request that breaks the schema."""
        _validate(self)

    def stats(self) -> TraceStats:
        return _stats(self)

    def write_parquet(self, path: str | Path) -> None:
        """Write as one Parquet file, the metadata in the schema metadata."""
        import pyarrow.parquet as pq  # noqa: PLC0415  (here: a serving run reads and writes no file)

        doc = {"format_version": FORMAT_VERSION, **self.meta()}
        table = self.table.replace_schema_metadata({META_KEY: json.dumps(doc)})
        pq.write_table(table, str(path))


def read_parquet(path: str | Path) -> RequestTrace:
    """Read and validate a trace written by :meth:`RequestTrace.write_parquet`."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (here: a serving run reads and writes no file)

    where = str(path)
    if not Path(path).is_file():
        raise TraceError(f"{where}: no such file")
    try:
        table = pq.read_table(where)
    except (OSError, pa.ArrowException) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TraceError(f"{where}: not a readable Parquet file ({first})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise TraceError(f"{where}: not a request trace (no {META_KEY.decode()} metadata)")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise TraceError(f"{where}: {META_KEY.decode()} metadata is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.pop("format_version", None) != FORMAT_VERSION:
        raise TraceError(f"{where}: {META_KEY.decode()} format_version is not {FORMAT_VERSION}")
    if set(doc) != set(_META_FIELDS):
        raise TraceError(f"{where}: metadata keys {sorted(doc)}, expected {list(_META_FIELDS)}")
    table = table.replace_schema_metadata(None)
    if table.schema != SCHEMA:
        raise TraceError(f"{where}: columns {table.schema.names} do not match the request schema")
    trace = RequestTrace(table=table, **doc)
    _validate(trace, where)
    return trace


def _validate(trace: RequestTrace, where: str | None = None) -> None:
    where = where or trace.source or "request trace"
    if not isinstance(trace.block_tokens, int) or trace.block_tokens <= 0:
        raise TraceError(f"{where}: block_tokens must be a positive integer")
    t = trace.table
    if t.schema.remove_metadata() != SCHEMA:
        raise TraceError(f"{where}: columns {t.schema} do not match the request schema")
    for name in t.column_names:
        if t.column(name).null_count:
            raise TraceError(f"{where}: column {name!r} has nulls")
    n = len(trace)
    arr = trace.arrival_s
    inp, out = trace.input_tokens, trace.output_tokens
    sess, turn = trace.column("session_id"), trace.column("turn")
    offsets, _ = trace.hashes()
    checks = [
        (trace.column("request_id") != np.arange(n), "request_id is not its row number"),
        (~np.isfinite(arr) | (arr < 0), "arrival_s is not a finite number >= 0"),
        (np.r_[False, np.diff(arr) < 0], "arrival_s earlier than the previous request"),
        (sess < -1, "session_id < -1"),
        (turn < -1, "turn < -1"),
        (inp <= 0, "input_tokens <= 0"),
        (out < 1, "output_tokens < 1"),
        (np.diff(offsets) > inp // trace.block_tokens, "more block_hashes than full blocks"),
    ]
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(f"{where}: request {i}: {what}")


def _stats(trace: RequestTrace) -> TraceStats:
    n = len(trace)
    arr = trace.arrival_s
    duration = float(arr[-1] - arr[0]) if n else 0.0
    rate = (n - 1) / duration if duration > 0 else math.nan
    sess = trace.column("session_id")
    known = sess[sess >= 0]
    _, per_session = np.unique(known, return_counts=True)
    offsets, values = trace.hashes()
    blocks = len(values)
    reused = _reused_blocks(offsets, values)
    inp = trace.input_tokens
    has_hashes = np.diff(offsets) > 0
    hashed_tokens = int(inp[has_hashes].sum())
    return TraceStats(
        requests=n,
        duration_s=duration,
        rate_rps=rate,
        input_tokens=_summary(inp),
        output_tokens=_summary(trace.output_tokens),
        sessions=len(per_session),
        turns_mean=float(per_session.mean()) if len(per_session) else math.nan,
        turns_max=int(per_session.max()) if len(per_session) else 0,
        blocks=blocks,
        reused_blocks=reused,
        prefix_reuse=reused / blocks if blocks else None,
        reused_token_fraction=reused * trace.block_tokens / hashed_tokens if blocks else None,
        clipped_outputs=trace.clipped_outputs,
        reordered=trace.reordered,
    )


def _reused_blocks(offsets: np.ndarray, values: np.ndarray) -> int:
    """Blocks whose hash appeared in an earlier request (vectorised: the
    flattened hashes are in request order, so a hash's first occurrence is in
    the earliest request that had it)."""
    if len(values) == 0:
        return 0
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    return int((owner > owner[first[inverse]]).sum())

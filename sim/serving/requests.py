"""Request tables -> the serving engine's requests (plain state).

The request table is the contract of :mod:`traces.requests` (its ``SCHEMA``):

==============  ================  ===========================================
column          type              meaning
==============  ================  ===========================================
request_id      int64             unique id
arrival_s       float64           when the client sends it
session_id      int64             conversation it belongs to; -1 = unknown
turn            int32             turn within the session (0, 1, ...)
input_tokens    int64             prompt length (the whole history in a chat)
output_tokens   int64             tokens to generate (>= 1)
block_hashes    list<int64>       one prefix-chained hash per full block of
                                  ``block_tokens`` input tokens; empty =
                                  unknown
==============  ================  ===========================================

with ``block_tokens`` in the schema metadata (Mooncake traces use 512).

The engine caches KV in GPU blocks of its own size (``engine_block``
tokens, 16 in vLLM).  Its block hashes come from the trace's:

* trace block = ``m`` engine blocks: engine block ``e`` is identified by
  (trace hash ``e // m``, position ``e % m``): equal trace hashes mean equal
  token prefixes, so their sub-blocks are equal too;
* engine block = ``m`` trace blocks: engine block ``e`` takes the hash of the
  last trace block it covers (the hashes are chained, so that one stands for
  the whole prefix);
* no hashes given: a known session's turns re-send the growing history, so
  block ``j`` of every turn of session ``s`` holds the same tokens and gets
  hash (s, j); a request of unknown session gets hashes nobody shares.

By default only full blocks of input tokens are hashed.  With
``reply_hashes`` (:func:`load_requests`) a request of a known session
without trace hashes also gets the hashes of its reply's full blocks
(positions ``input_tokens ...``): the next turn re-sends the reply at those
positions, so an engine that caches generated tokens' KV (vLLM v1's prefix
cache hashes every full block, decode included; SGLang inserts input plus
output into its radix tree at request end) serves them to turn n+1.  Trace
hashes cover prompts only, so traced rows keep their prompt's hashes.

**Keys are dense ids.**  The engine, its offload tiers, a router and the
oracle key a block by a dense integer id, not by its 64-bit hash: one
:class:`KeySpace` per run numbers the distinct hashes 0, 1, ... in the
order they are first seen (every :func:`load_requests` call of a run shares
it, so a warm-up pass and the trace, or a fleet's instances, agree), and a
request's ``hashes`` are those ids.  Caches then index arrays by id instead
of hashing.  Where a key's *value* decided something (the iteration order of
a set of keys), :attr:`KeySpace.hashes` gives the hash back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import nulls, to_numpy
from traces.requests import SCHEMA

REQUEST_SCHEMA = SCHEMA  # one request-table contract (traces/requests.py)

_MASK = (1 << 64) - 1
_SESSION_SALT = 0x5E55_10A5
_UNIQUE_SALT = 0x0DD_BA11
HASH_CHUNK = 1 << 20  # engine hashes computed per batch of rows (load_requests)


class RequestError(ValueError):
    """A request table is malformed; the message names the row and column."""


def mix(a: int, b: int) -> int:
    """A 63-bit hash of two integers (splitmix64 finaliser of ``a * K + b``)."""
    z = (a * 0x9E3779B97F4A7C15 + b + 0x632BE59BD9B4E019) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) >> 1


class KeySpace:
    """One run's block keys: each distinct engine-block hash gets the next
    dense id (0, 1, ...) the first time it is seen; :attr:`hashes` maps an id
    back to its hash (all it keeps: 8 bytes a key).  Interning is vectorised:
    a batch is matched against the known hashes by one ``searchsorted`` (over
    them sorted for the call) and its new hashes numbered by one stable sort
    (:func:`_first_seen_ids`)."""

    def __init__(self) -> None:
        self.hashes = np.zeros(0, dtype=np.int64)  # id -> hash

    def __len__(self) -> int:
        return len(self.hashes)

    def intern(self, flat: np.ndarray) -> np.ndarray:
        """The ids of hashes ``flat`` (int64), new ones numbered on from
        ``len(self)`` in order of first appearance in ``flat``."""
        flat = np.asarray(flat, dtype=np.int64)
        out = np.full(len(flat), -1, dtype=np.int64)
        if len(self.hashes) and len(flat):
            by = np.argsort(self.hashes, kind="stable")  # the known ids by hash
            pos = np.searchsorted(self.hashes[by], flat)
            np.minimum(pos, len(by) - 1, out=pos)
            pos = by[pos]  # the id of the nearest known hash
            hit = self.hashes[pos] == flat
            out[hit] = pos[hit]
        fresh = np.flatnonzero(out < 0) if len(self.hashes) else None  # None: all of them
        new = flat if fresh is None else flat[fresh]
        if len(new):
            ids, first = _first_seen_ids(new, len(self.hashes))
            self.hashes = np.concatenate([self.hashes, new[first]])
            if fresh is None:
                out = ids
            else:
                out[fresh] = ids
        return out

    def hash_list(self, ids: Sequence[int]) -> list[int]:
        """The hashes of ``ids``, as Python ints."""
        return self.hashes[np.asarray(ids, dtype=np.int64)].tolist()


def _first_seen_ids(x: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, first): ``base + i`` for the ``i``-th distinct value of ``x`` in
    order of first appearance, per element, and each distinct value's first
    position in that order.  One stable sort: what ``np.unique`` with
    ``return_index`` and ``return_inverse`` gives, with fewer temporaries at
    once (a trace's whole hash array passes through here)."""
    order = np.argsort(x, kind="stable")
    head = np.empty(len(x), dtype=bool)  # the first of each run of equal values
    head[0] = True
    srt = x[order]
    np.not_equal(srt[1:], srt[:-1], out=head[1:])
    del srt
    first = order[head]  # each distinct value's first position (stable: the earliest)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_first] = np.arange(base, base + len(first), dtype=np.int64)
    run = np.cumsum(head, dtype=np.int64)  # 1 + each sorted element's distinct value
    run -= 1
    ids = np.empty(len(x), dtype=np.int64)
    ids[order] = rank[run]
    return ids, first[by_first]


def check_one_space(reqs: Iterable[Request]) -> None:
    """Raise ValueError if ``reqs`` (one engine's, warm-up included) carry keys
    of more than one :class:`KeySpace`: ids of different spaces collide."""
    if len({id(r.space) for r in reqs if r.space is not None}) > 1:
        raise ValueError("requests of several key spaces in one run: load them with one KeySpace")


@dataclass(eq=False, slots=True)
class Request:
    """One request of the trace (times in seconds).  What the engine observes
    of it is written to its columnar log (:class:`sim.serving.metrics.RequestLog`)."""

    rid: int
    arrival_s: float
    session: int
    turn: int
    input_tokens: int
    output_tokens: int
    # the keys of its full input blocks: dense ids of their engine-block hashes in
    # ``space`` (a read-only view of the trace's one int64 id array, :func:`load_requests`),
    # or any sequence of small ints >= 0 (no ``space``: each is its own hash)
    hashes: Sequence[int]
    hits: dict[str, int] = field(default_factory=dict)  # tier -> GPU blocks hit (manager)
    preemptions: int = 0  # times vLLM-style preemption sent it back to the queue (engine)
    space: KeySpace | None = None  # the run's key space (the hashes of the ids)


def request_table(rows: Iterable[dict[str, Any]], block_tokens: int) -> pa.Table:
    """A request table from row dicts (``block_hashes`` may be omitted)."""
    cols: dict[str, list] = {f.name: [] for f in REQUEST_SCHEMA}
    for row in rows:
        for name in cols:
            cols[name].append(row.get(name, [] if name == "block_hashes" else None))
    table = pa.Table.from_pydict(cols, schema=REQUEST_SCHEMA)
    return table.replace_schema_metadata({"block_tokens": str(block_tokens)})


def table_block_tokens(table: pa.Table, default: int = 0) -> int:
    meta = table.schema.metadata or {}
    raw = meta.get(b"block_tokens")
    return int(raw) if raw else default


def engine_hashes(
    trace_hashes: Sequence[int], trace_block: int, engine_block: int, input_tokens: int
) -> tuple[int, ...]:
    """Hashes of the full engine blocks of a prompt (see the module docstring)."""
    n_full = input_tokens // engine_block
    if trace_block % engine_block == 0:
        m = trace_block // engine_block
        if m == 1:
            return tuple(int(h) for h in trace_hashes[:n_full])
        n = min(n_full, len(trace_hashes) * m)
        return tuple(mix(int(trace_hashes[e // m]), e % m) for e in range(n))
    if engine_block % trace_block == 0:
        m = engine_block // trace_block
        n = min(n_full, len(trace_hashes) // m)
        return tuple(int(trace_hashes[e * m + m - 1]) for e in range(n))
    raise RequestError(
        f"block sizes do not nest: trace {trace_block} tokens, engine {engine_block} tokens"
    )


def session_hashes(session: int, request_id: int, n_blocks: int) -> tuple[int, ...]:
    """Hashes for a request without trace hashes: shared by a session's turns."""
    base = mix(_SESSION_SALT, session) if session >= 0 else mix(_UNIQUE_SALT, request_id)
    return tuple(mix(base, j) for j in range(n_blocks))


def mix_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`mix` of arrays, elementwise (uint64 arithmetic wraps as ``& _MASK`` does)."""
    z = np.asarray(a).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z += np.asarray(b).astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) >> np.uint64(1)).astype(np.int64)


def _column(table: pa.Table, name: str, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as ``fill``, null mask) of a scalar column."""
    col = table.column(name)
    return to_numpy(col, fill), nulls(col)


def _trace_hashes(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first value, count, values) of each row's ``block_hashes`` (null = none)."""
    col = table.column("block_hashes").combine_chunks()
    offsets = to_numpy(col.offsets).astype(np.int64)
    count = np.diff(offsets)
    count[nulls(col)] = 0
    values = to_numpy(col.values).astype(np.int64, copy=False)
    return offsets[:-1], count, values


def _engine_hash_array(
    cols: dict[str, np.ndarray], trace_block: int, engine_block: int, reply: bool, space: KeySpace
) -> tuple[np.ndarray, np.ndarray]:
    """(ptr, ids) of every row's engine-block hashes (:func:`engine_hashes`
    or :func:`session_hashes`, vectorised over the whole table) as ids in
    ``space`` (interned batch by batch); ``reply``: a known session's
    untraced rows also hash their reply's full blocks."""
    first, count, values = cols["first"], cols["count"], cols["values"]
    n_full = cols["input_tokens"] // engine_block
    traced = count > 0
    if reply:
        whole = (cols["input_tokens"] + cols["output_tokens"]) // engine_block
        n_full = np.where(~traced & (cols["session_id"] >= 0), whole, n_full)
    m_down = m_up = 0  # engine blocks per trace block, or trace blocks per engine block
    if trace_block > 0 and trace_block % engine_block == 0:
        m_down = trace_block // engine_block
    elif trace_block > 0:
        m_up = engine_block // trace_block
    n = np.where(traced, np.minimum(n_full, count * m_down if m_down else count // max(m_up, 1)),
                 n_full)  # fmt: skip
    ptr = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    session, rid = cols["session_id"], cols["request_id"]
    base = np.where(session >= 0, mix_array(np.full(len(n), _SESSION_SALT), session),
                    mix_array(np.full(len(n), _UNIQUE_SALT), rid))  # fmt: skip
    out = np.empty(int(ptr[-1]), dtype=np.int64)
    lo = 0
    while lo < len(n):  # rows in chunks of about HASH_CHUNK hashes: bounded temporaries
        hi = max(int(np.searchsorted(ptr, ptr[lo] + HASH_CHUNK, side="right")) - 1, lo + 1)
        owner = np.repeat(np.arange(lo, hi), n[lo:hi])
        e = np.arange(int(ptr[hi] - ptr[lo]), dtype=np.int64) - (ptr[owner] - ptr[lo])
        part = out[ptr[lo] : ptr[hi]]
        t = traced[owner]
        src = first[owner] + np.where(t, e // max(m_down, 1) if m_down else e * m_up + m_up - 1, 0)
        got = values[np.where(t, src, 0)] if len(values) else np.zeros(len(e), np.int64)
        if m_down > 1:
            got = np.where(t, mix_array(got, e % m_down), got)
        part[:] = np.where(t, got, mix_array(base[owner], e))
        del owner, e, t, src, got  # the batch's temporaries go before its interning
        part[:] = space.intern(part)
        lo = hi
    return ptr, out


def _first_error(table: pa.Table, cols: dict[str, np.ndarray], nulls: dict[str, np.ndarray]):
    """Raise the error :func:`_check_row` (or the hash checks) gives the first bad row."""
    bad = (
        nulls["request_id"] | nulls["arrival_s"] | nulls["input_tokens"] | nulls["output_tokens"]
        | (cols["input_tokens"] < 1) | (cols["output_tokens"] < 1) | (cols["arrival_s"] < 0)
    )  # fmt: skip
    bad_row = int(np.argmax(bad)) if bad.any() else table.num_rows
    traced = np.flatnonzero(cols["count"] > 0)
    first_traced = int(traced[0]) if len(traced) else table.num_rows
    if bad_row < table.num_rows and bad_row <= first_traced:
        row = {name: table.column(name)[bad_row].as_py() for name in table.schema.names}
        _check_row(bad_row, row)
    if first_traced < table.num_rows:
        trace_block = table_block_tokens(table)
        if trace_block <= 0:
            raise RequestError("request table has block_hashes but no block_tokens metadata")
        engine_hashes([], trace_block, cols["engine_block"], 0)  # raises if they do not nest
        if bad_row < table.num_rows:
            row = {name: table.column(name)[bad_row].as_py() for name in table.schema.names}
            _check_row(bad_row, row)


def load_requests(
    table: pa.Table, engine_block: int, reply_hashes: bool = False, space: KeySpace | None = None
) -> list[Request]:
    """The table's requests in arrival order, with their blocks' keys: ids in
    ``space`` (a new one if None; pass the same one to every call of a run)
    of their engine-block hashes, all in one int64 array (each request's
    ``hashes`` is a read-only view of it); ``reply_hashes``: hash the
    replies too (module docstring)."""
    missing = [f.name for f in REQUEST_SCHEMA if f.name not in table.schema.names]
    if missing:
        raise RequestError(f"request table lacks column(s) {missing}")
    cols: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    for name, fill in (("request_id", 0), ("arrival_s", 0.0), ("input_tokens", 1),
                       ("output_tokens", 1), ("session_id", -1), ("turn", 0)):  # fmt: skip
        cols[name], nulls[name] = _column(table, name, fill)
    cols["first"], cols["count"], cols["values"] = _trace_hashes(table)
    cols["engine_block"] = engine_block
    _first_error(table, cols, nulls)
    space = KeySpace() if space is None else space
    trace_block = table_block_tokens(table)
    ptr, flat = _engine_hash_array(cols, trace_block, engine_block, reply_hashes, space)
    flat.setflags(write=False)
    view = memoryview(flat)  # indexing gives Python ints, slicing shares the buffer
    fields = [cols[k].tolist() for k in ("request_id", "arrival_s", "session_id", "turn",
                                         "input_tokens", "output_tokens")]  # fmt: skip
    out = [
        Request(
            int(rid), float(t), int(sess), int(turn), int(n_in), int(n_out), view[a:b], space=space
        )
        for rid, t, sess, turn, n_in, n_out, a, b in zip(
            *fields, ptr[:-1].tolist(), ptr[1:].tolist(), strict=True
        )
    ]
    out.sort(key=lambda r: (r.arrival_s, r.rid))
    return out


def _check_row(i: int, row: dict[str, Any]) -> None:
    for name in ("request_id", "arrival_s", "input_tokens", "output_tokens"):
        if row[name] is None:
            raise RequestError(f"request row {i}: {name} is missing")
    if row["input_tokens"] < 1:
        raise RequestError(f"request row {i}: input_tokens must be >= 1")
    if row["output_tokens"] < 1:
        raise RequestError(f"request row {i}: output_tokens must be >= 1")
    if row["arrival_s"] < 0:
        raise RequestError(f"request row {i}: arrival_s must be >= 0")
    if row["session_id"] is None:
        row["session_id"] = -1
    if row["turn"] is None:
        row["turn"] = 0

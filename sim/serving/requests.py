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

Only full blocks of input tokens are hashed; the KV of generated tokens is
never reused across requests (the trace does not say which later prompt
contains them), a slight under-count of reuse in multi-turn chats.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from traces.requests import SCHEMA

REQUEST_SCHEMA = SCHEMA  # one request-table contract (traces/requests.py)

_MASK = (1 << 64) - 1
_SESSION_SALT = 0x5E55_10A5
_UNIQUE_SALT = 0x0DD_BA11


class RequestError(ValueError):
    """A request table is malformed; the message names the row and column."""


def mix(a: int, b: int) -> int:
    """A 63-bit hash of two integers (splitmix64 finaliser of ``a * K + b``)."""
    z = (a * 0x9E3779B97F4A7C15 + b + 0x632BE59BD9B4E019) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) >> 1


@dataclass(eq=False)
class Request:
    """One request and what the engine observed of it (times in seconds)."""

    rid: int
    arrival_s: float
    session: int
    turn: int
    input_tokens: int
    output_tokens: int
    hashes: tuple[int, ...]  # engine-block hashes of the full input blocks
    # set by the engine
    release_s: float = float("nan")  # the client sent it (>= arrival_s)
    admit_s: float = float("nan")
    first_token_s: float = float("nan")
    finish_s: float = float("nan")
    rejected: bool = False
    hits: dict[str, int] = field(default_factory=dict)  # tier -> GPU blocks hit
    computed_tokens: int = 0  # prompt tokens prefilled (not hits)
    preemptions: int = 0  # times vLLM-style preemption sent it back to the queue


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


def load_requests(table: pa.Table, engine_block: int) -> list[Request]:
    """The table's requests in arrival order, with engine-block hashes."""
    missing = [f.name for f in REQUEST_SCHEMA if f.name not in table.schema.names]
    if missing:
        raise RequestError(f"request table lacks column(s) {missing}")
    trace_block = table_block_tokens(table)
    cols = {f.name: table.column(f.name).to_pylist() for f in REQUEST_SCHEMA}
    out = []
    for i in range(table.num_rows):
        row = {k: v[i] for k, v in cols.items()}
        _check_row(i, row)
        hashes = row["block_hashes"] or []
        n_in = int(row["input_tokens"])
        if hashes and trace_block > 0:
            hs = engine_hashes(hashes, trace_block, engine_block, n_in)
        elif hashes:
            raise RequestError("request table has block_hashes but no block_tokens metadata")
        else:
            hs = session_hashes(
                int(row["session_id"]), int(row["request_id"]), n_in // engine_block
            )
        out.append(
            Request(
                rid=int(row["request_id"]),
                arrival_s=float(row["arrival_s"]),
                session=int(row["session_id"]),
                turn=int(row["turn"]),
                input_tokens=n_in,
                output_tokens=int(row["output_tokens"]),
                hashes=hs,
            )
        )
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

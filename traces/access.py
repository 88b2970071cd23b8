"""Access traces: which KV entries sparse attention selects, per decode step.

An access trace records, for every observation ``s`` (a decode step or a
profiled query), every layer ``l`` and every KV-head group ``h``, the sorted
list of entry ids that attention used.  Entry ids are token positions: the
prefix is ``0..N-1`` (``N = meta.context_tokens``) and decode step ``t``
appends entry ``N + t``, so at step ``t`` the visible entries are
``0..N+t``.  Rows are sparse index lists (CSR-style ``offsets``/``indices``),
never a dense context x context matrix, so a 1M-token context stays feasible.

Row ``(s, l, h)`` is row ``(s * layers + l) * kv_heads + h``: rows are
ordered by step first, which makes :meth:`AccessTrace.split` a slice.

On disk a trace is one Parquet file with one row per selection: columns
``step: int32, layer: int16, head: int16, indices: list<int32>`` and an
optional ``scores: list<float16 | float32>``; :class:`AccessMeta` is JSON in
the schema metadata under the key ``b"kvtier.access"``.  ``meta.source``
records the provenance (``generator:<preset>`` for synthetic traces, which
carry no licence or attribution obligations; ``capture:<model>:<dataset>``
for traces captured from a real model run).

This module is the public face of access traces; everything is importable
from here (``from traces.access import X``).  The parts:
:mod:`traces.access_trace` (metadata, rows, validation),
:mod:`traces.access_io` (the Parquet form) and :mod:`traces.access_stats`
(summary statistics).
"""

from __future__ import annotations

from traces.access_io import FORMAT_VERSION, META_KEY, read_access_trace, write_access_trace
from traces.access_stats import trace_stats
from traces.access_trace import (
    AccessMeta,
    AccessTrace,
    AccessTraceError,
    forced_ids,
    selection_budget,
)

__all__ = [
    "FORMAT_VERSION",
    "META_KEY",
    "AccessMeta",
    "AccessTrace",
    "AccessTraceError",
    "forced_ids",
    "read_access_trace",
    "selection_budget",
    "trace_stats",
    "write_access_trace",
]

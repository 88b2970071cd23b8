"""Access traces: which KV entries sparse attention selects, per decode step.

This module is the public face of access traces; everything is importable
from here (``from traces.access import X``).  The parts, each documenting
its own share of the format:

* :mod:`traces.access_trace`: the metadata, the rows (entry ids per step,
  layer and KV-head group, CSR-style) and their validation;
* :mod:`traces.access_io`: the Parquet form on disk and its provenance field;
* :mod:`traces.access_stats`: summary statistics.
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

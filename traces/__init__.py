"""kvtier traces: request and access traces (readers, generators, formats)."""

from traces.access import (
    AccessMeta,
    AccessTrace,
    AccessTraceError,
    read_access_trace,
    trace_stats,
    write_access_trace,
)
from traces.generator import PRESETS, AccessGenerator, GeneratorParams, generate

__all__ = [
    "PRESETS",
    "AccessGenerator",
    "AccessMeta",
    "AccessTrace",
    "AccessTraceError",
    "GeneratorParams",
    "generate",
    "read_access_trace",
    "trace_stats",
    "write_access_trace",
]

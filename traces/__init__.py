"""kvtier traces: request and access traces (readers, generators, formats).

The names below are imported from their modules on first use (PEP 562), so
that importing one module of the package (``traces.requests`` for the
serving engine) does not import the access-trace generator and its scipy.
"""

import importlib
from typing import Any

_HOME = {
    "AccessMeta": "traces.access",
    "AccessTrace": "traces.access",
    "AccessTraceError": "traces.access",
    "read_access_trace": "traces.access",
    "trace_stats": "traces.access",
    "write_access_trace": "traces.access",
    "PRESETS": "traces.generator",
    "AccessGenerator": "traces.generator",
    "GeneratorParams": "traces.generator",
    "generate": "traces.generator",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'traces' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)

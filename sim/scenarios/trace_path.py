"""Where a scenario's trace file is: found when the scenario loads.

A serving workload's ``trace`` is ``conversation``, ``long_doc`` (built in:
:func:`sim.scenarios.serving.trace_tables`), ``sharegpt_long`` or ``leval_long`` (seed
002's master workloads, :mod:`sim.scenarios.swift_traces`) or a request-trace file; a sparse
decoding workload's (``swarm``, ``kvdrive``, ...) is a generator preset or a
captured access trace (a ``.parquet`` file from ``kvtier trace capture``).  A
relative path is looked for first in the directory ``kvtier`` runs in (the documented
behaviour, docs/traces.md), then beside the scenario file, so a scenario and its
trace can move together; the path found is the one the run reads.  When neither
holds the file, the error names the scenario file, the line, the key and every
place tried; a captured access trace found in neither place is left as named, and
is refused, naming the file, when the run reads it (a scenario may name a capture
made after it, as ``kvdrive-2d-real.yaml`` does).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# generated, not read: sim.scenarios.serving.trace_tables (conversation, long_doc) and
# sim.scenarios.serving_instances (sharegpt_long and leval_long, seed 002's master workloads)
# (and the drawn traces of sim.registry.REQUEST_TRACES: sim.scenarios.mooncake_traces)
BUILTIN_TRACES = ("conversation", "long_doc", "sharegpt_long", "leval_long")


def places(trace: str, scenario: Path) -> list[Path]:
    """The paths tried for ``trace`` named in ``scenario``, in order."""
    given = Path(trace)
    if given.is_absolute():
        return [given]
    return [given, scenario.parent / given]


def resolve_trace(params: Any, scenario: Path, where: Any, key: str) -> Any:
    """``params`` with its ``trace`` file found (see the module docstring); params
    without a ``trace`` file (built-in traces, other kinds) are returned as they are.
    ``where`` (the scenario's line map) raises the error at ``key``."""
    trace = getattr(params, "trace", None)
    if not isinstance(trace, str):
        return params
    if params.kind == "serving":
        from sim.registry import REQUEST_TRACES  # noqa: PLC0415 (its fill imports the engine)

        if trace in BUILTIN_TRACES or trace in REQUEST_TRACES:
            return params
        names = ", ".join([*BUILTIN_TRACES, *REQUEST_TRACES.names()])
        what = f"neither a built-in trace ({names}) nor a trace file"
    elif trace.endswith(".parquet"):  # a captured access trace (sim.scenarios.swarm_traces)
        what = ""
    else:  # a generator preset: checked where the workload is built
        return params
    tried = places(trace, scenario)
    for path in tried:
        if path.is_file():
            return params if path == tried[0] else dataclasses.replace(params, trace=str(path))
    if not what:  # a capture may be made after the scenario is written: read (and
        return params  # refused, naming the file) when its lanes are built
    shown = " or ".join(f"'{p}'" for p in tried)
    raise where.error(
        f"{key}.trace",
        f"'{trace}' is {what} (no file at {shown})",
    )

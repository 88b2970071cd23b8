"""Chrome / Perfetto trace export of an op timeline.

Writes the Trace Event Format (JSON) that ui.perfetto.dev and
chrome://tracing open: one track per device (the SSD an op reads or writes,
the GPU a compute or copy lands on), one complete ("X") event per op with
microsecond timestamps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa


def trace_events(ops: pa.Table, name: str = "kvtier") -> list[dict]:
    cols = ops.select(
        ["op_id", "step", "layer", "kind", "src", "dst", "bytes", "start_s", "end_s"]
    ).to_pydict()
    tracks: dict[str, int] = {}
    events: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": name}}]
    for i in range(len(cols["op_id"])):
        kind = cols["kind"][i]
        track = cols["src"][i] if kind in ("read",) else cols["dst"][i]
        if kind == "copy":
            track = f"{cols['src'][i]}->{cols['dst'][i]}"
        tid = tracks.setdefault(track, len(tracks) + 1)
        start, end = cols["start_s"][i], cols["end_s"][i]
        events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": tid,
                "name": f"{kind} L{cols['layer'][i]}",
                "cat": kind,
                "ts": start * 1e6,
                "dur": (end - start) * 1e6,
                "args": {
                    "op_id": cols["op_id"][i],
                    "step": cols["step"][i],
                    "bytes": cols["bytes"][i],
                },
            }
        )
    for track, tid in tracks.items():
        events.append(
            {"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": track}}
        )
    return events


def write_trace(ops: pa.Table, path: str | Path, name: str = "kvtier") -> None:
    Path(path).write_text(
        json.dumps({"traceEvents": trace_events(ops, name), "displayTimeUnit": "ms"})
    )

"""Access traces on disk: one Parquet file per trace.

On disk a trace is one Parquet file with one row per selection: columns
``step: int32, layer: int16, head: int16, indices: list<int32>`` and an
optional ``scores: list<float16 | float32>``; :class:`AccessMeta` is JSON in
the schema metadata under the key ``b"kvtier.access"``.  ``meta.source``
records the provenance (``generator:<preset>`` for synthetic traces, which
carry no licence or attribution obligations; ``capture:<model>:<dataset>``
for traces captured from a real model run).

:func:`read_access_trace` checks everything it reads and names the file and
the field or row of the first problem (:class:`AccessTraceError`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traces.access_trace import AccessMeta, AccessTrace, AccessTraceError, check_meta, check_trace

META_KEY = b"kvtier.access"
FORMAT_VERSION = 1


def write_access_trace(trace: AccessTrace, path: str | Path) -> None:
    """Write ``trace`` as one Parquet file (see the module docstring for the schema)."""
    m = trace.meta
    r = np.arange(m.rows)
    step, rest = np.divmod(r, m.layers * m.kv_heads)
    layer, head = np.divmod(rest, m.kv_heads)
    large = len(trace.indices) >= 2**31
    list_type = pa.LargeListArray if large else pa.ListArray
    offsets = pa.array(trace.offsets.astype(np.int64 if large else np.int32))
    columns = {
        "step": pa.array(step.astype(np.int32)),
        "layer": pa.array(layer.astype(np.int16)),
        "head": pa.array(head.astype(np.int16)),
        "indices": list_type.from_arrays(offsets, pa.array(trace.indices)),
    }
    if trace.scores is not None:
        columns["scores"] = list_type.from_arrays(offsets, pa.array(trace.scores))
    doc = {"format_version": FORMAT_VERSION, **dataclasses.asdict(m)}
    doc["params"] = [list(kv) for kv in m.params]
    table = pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(doc)})
    pq.write_table(table, str(path))


def read_access_trace(path: str | Path) -> AccessTrace:
    """Read and validate a trace written by :func:`write_access_trace`."""
    where = str(path)
    if not Path(path).is_file():
        raise AccessTraceError(f"{where}: no such file")
    try:
        table = pq.read_table(where)
    except (OSError, pa.ArrowException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AccessTraceError(f"{where}: not a readable Parquet file ({first})") from None
    meta = _meta_from_schema(table.schema, where)
    names = set(table.column_names)
    for col in ("step", "layer", "head", "indices"):
        if col not in names:
            raise AccessTraceError(f"{where}: missing column {col!r}")
    extra = names - {"step", "layer", "head", "indices", "scores"}
    if extra:
        raise AccessTraceError(f"{where}: unknown column(s) {sorted(extra)}")
    if table.num_rows != meta.rows:
        raise AccessTraceError(
            f"{where}: {table.num_rows} rows, expected steps*layers*kv_heads = {meta.rows}"
        )
    key = _row_keys(table, meta, where)
    if not np.array_equal(key, np.arange(meta.rows)):
        table = table.take(pa.array(np.argsort(key, kind="stable")))
    offsets, indices = _list_column(table, "indices", where, ("int32", "int64"))
    scores = None
    if "scores" in names:
        s_off, scores = _list_column(table, "scores", where, ("halffloat", "float"))
        if not np.array_equal(s_off, offsets):
            raise AccessTraceError(f"{where}: column 'scores' row lengths differ from 'indices'")
    if len(indices) and (indices.min() < 0 or indices.max() >= 2**31):
        raise AccessTraceError(f"{where}: column 'indices' has ids outside int32")
    trace = AccessTrace(meta, offsets, indices, scores)
    check_trace(trace, where)
    return trace


def _row_keys(table: pa.Table, m: AccessMeta, where: str) -> np.ndarray:
    cols = {}
    for name, limit in (("step", m.steps), ("layer", m.layers), ("head", m.kv_heads)):
        col = table.column(name)
        if not pa.types.is_integer(col.type) or col.null_count:
            raise AccessTraceError(f"{where}: column {name!r} must be non-null integers")
        v = col.to_numpy().astype(np.int64)
        if len(v) and (v.min() < 0 or v.max() >= limit):
            raise AccessTraceError(f"{where}: column {name!r} has values outside 0..{limit - 1}")
        cols[name] = v
    key = (cols["step"] * m.layers + cols["layer"]) * m.kv_heads + cols["head"]
    if len(key) and np.bincount(key, minlength=m.rows).max() > 1:
        raise AccessTraceError(f"{where}: a (step, layer, head) appears more than once")
    return key


def _list_column(
    table: pa.Table, name: str, where: str, value_types: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    col = table.column(name).combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise AccessTraceError(f"{where}: column {name!r} must be a list, got {col.type}")
    if str(col.type.value_type) not in value_types:
        raise AccessTraceError(
            f"{where}: column {name!r} holds {col.type.value_type}, expected one of {value_types}"
        )
    if col.null_count or col.values.null_count:
        raise AccessTraceError(f"{where}: column {name!r} has nulls")
    offsets = col.offsets.to_numpy().astype(np.int64)
    values = col.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


def _meta_from_schema(schema: pa.Schema, where: str) -> AccessMeta:
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise AccessTraceError(f"{where}: no {META_KEY.decode()} metadata in the Parquet schema")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise AccessTraceError(
            f"{where}: {META_KEY.decode()} metadata is not JSON ({exc})"
        ) from None
    if not isinstance(doc, dict):
        raise AccessTraceError(f"{where}: {META_KEY.decode()} metadata is not a JSON object")
    version = doc.pop("format_version", None)
    if version != FORMAT_VERSION:
        raise AccessTraceError(f"{where}: meta.format_version = {version!r}, expected 1")
    fields = {f.name for f in dataclasses.fields(AccessMeta)}
    unknown, missing = set(doc) - fields, fields - set(doc) - {"params"}
    if unknown:
        raise AccessTraceError(f"{where}: unknown meta key(s) {sorted(unknown)}")
    if missing:
        raise AccessTraceError(f"{where}: missing meta key(s) {sorted(missing)}")
    try:
        doc["params"] = tuple((str(k), v) for k, v in doc.get("params", []))
    except (TypeError, ValueError):
        raise AccessTraceError(f"{where}: meta.params must be [name, value] pairs") from None
    for name in ("model", "source"):
        if not isinstance(doc[name], str):
            raise AccessTraceError(f"{where}: meta.{name} must be a string")
    if not isinstance(doc["sparsity"], int | float) or isinstance(doc["sparsity"], bool):
        raise AccessTraceError(f"{where}: meta.sparsity must be a number")
    doc["sparsity"] = float(doc["sparsity"])
    meta = AccessMeta(**doc)
    check_meta(meta, where)
    if not isinstance(meta.seed, int):
        raise AccessTraceError(f"{where}: meta.seed must be an integer")
    return meta

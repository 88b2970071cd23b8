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
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

META_KEY = b"kvtier.access"
FORMAT_VERSION = 1
_CHECK_CHUNK = 1 << 24  # indices validated per block (bounded memory)


class AccessTraceError(ValueError):
    """A malformed access trace; the message is one line naming the file/field/row."""


@dataclass(frozen=True)
class AccessMeta:
    """What an access trace covers and where it came from."""

    model: str
    context_tokens: int  # prefix length N: entries 0..N-1; decode step t appends entry N+t
    layers: int  # distinct layers in the trace
    kv_heads: int  # head groups per layer (1 = one entry covers all KV heads of a layer)
    steps: int  # observations (decode steps / profiled queries) per layer
    sparsity: float  # top-k fraction of the context (0.1 = 10%)
    local_window: int  # most recent tokens always selected
    sink_tokens: int  # first tokens always selected
    source: str  # e.g. "generator:default" or "capture:SmolLM2-135M:pydoc"
    seed: int
    params: tuple[tuple[str, object], ...] = ()  # generator parameters, for provenance

    @property
    def rows(self) -> int:
        """Number of selections: ``steps * layers * kv_heads``."""
        return self.steps * self.layers * self.kv_heads

    @property
    def entries(self) -> int:
        """Entry ids the whole trace can use: ``context_tokens + steps``."""
        return self.context_tokens + self.steps


def selection_budget(context_tokens: int, step: int, sparsity: float) -> int:
    """Entries attention uses at ``step``: ``round(sparsity * (N + step))``."""
    return int(round(sparsity * (context_tokens + step)))


def forced_ids(visible: int, sink_tokens: int, local_window: int) -> np.ndarray:
    """Sorted ids always selected among ``0..visible-1``: the sinks and the local window."""
    sinks = np.arange(min(sink_tokens, visible))
    window = np.arange(max(0, visible - local_window), visible)
    return np.union1d(sinks, window).astype(np.int32)


@dataclass(eq=False)
class AccessTrace:
    """Selections of one run: CSR rows of sorted entry ids, one row per (step, layer, head)."""

    meta: AccessMeta
    offsets: np.ndarray  # int64, length rows + 1
    indices: np.ndarray  # int32 entry ids, sorted ascending within each row
    scores: np.ndarray | None = None  # float16 per index (attention score), optional

    def __post_init__(self) -> None:
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        self.indices = np.asarray(self.indices, dtype=np.int32)
        if self.scores is not None:
            self.scores = np.asarray(self.scores, dtype=np.float16)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AccessTrace):
            return NotImplemented
        if (self.scores is None) != (other.scores is None):
            return False
        return (
            self.meta == other.meta
            and np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.indices, other.indices)
            and (self.scores is None or np.array_equal(self.scores, other.scores))
        )

    __hash__ = None  # type: ignore[assignment]

    def row(self, step: int, layer: int = 0, head: int = 0) -> int:
        m = self.meta
        if not (0 <= step < m.steps and 0 <= layer < m.layers and 0 <= head < m.kv_heads):
            raise IndexError(
                f"(step, layer, head) = ({step}, {layer}, {head}) outside "
                f"({m.steps}, {m.layers}, {m.kv_heads})"
            )
        return (step * m.layers + layer) * m.kv_heads + head

    def selection(self, step: int, layer: int = 0, head: int = 0) -> np.ndarray:
        """Sorted entry ids selected at ``step`` for ``layer``/``head`` (a read-only view)."""
        r = self.row(step, layer, head)
        view = self.indices[self.offsets[r] : self.offsets[r + 1]]
        view.flags.writeable = False
        return view

    def activations(
        self, layer: int = 0, head: int = 0, steps: slice | None = None, scored_only: bool = False
    ) -> sp.csr_matrix:
        """Boolean steps x entries matrix; columns are all ``context_tokens + steps`` ids.

        ``scored_only`` drops the sinks and the local window of every step:
        they are selected whatever the query (and live in DRAM), so in a
        co-activation profile they would be co-activated with everything.
        """
        X = self._activations(layer, head, steps)
        if not scored_only:
            return X
        m = self.meta
        step_ids = np.arange(m.steps)[steps if steps is not None else slice(None)]
        coo = X.tocoo()
        window_start = m.context_tokens + step_ids[coo.row] + 1 - m.local_window
        keep = (coo.col >= m.sink_tokens) & (coo.col < window_start)
        return sp.csr_matrix(
            (coo.data[keep], (coo.row[keep], coo.col[keep])), shape=X.shape, dtype=bool
        )

    def _activations(self, layer: int, head: int, steps: slice | None) -> sp.csr_matrix:
        m = self.meta
        if not (0 <= layer < m.layers and 0 <= head < m.kv_heads):
            raise IndexError(
                f"(layer, head) = ({layer}, {head}) outside ({m.layers}, {m.kv_heads})"
            )
        step_ids = np.arange(m.steps)[steps if steps is not None else slice(None)]
        rows = (step_ids * m.layers + layer) * m.kv_heads + head
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        gather = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        data = np.ones(int(indptr[-1]), dtype=bool)
        return sp.csr_matrix((data, self.indices[gather], indptr), shape=(len(rows), m.entries))

    def split(self, n_first: int) -> tuple[AccessTrace, AccessTrace]:
        """The first ``n_first`` steps (e.g. profiling) and the rest.

        The second trace keeps entry ids: its ``context_tokens`` is
        ``N + n_first``, so its step ``s`` is the original step ``n_first + s``.
        """
        m = self.meta
        if not 0 <= n_first <= m.steps:
            raise ValueError(f"split({n_first}): need 0 <= n_first <= steps = {m.steps}")
        cut_row = n_first * m.layers * m.kv_heads
        cut = int(self.offsets[cut_row])
        first_meta = dataclasses.replace(m, steps=n_first)
        rest_meta = dataclasses.replace(
            m, steps=m.steps - n_first, context_tokens=m.context_tokens + n_first
        )
        sc = self.scores
        first = AccessTrace(
            first_meta,
            self.offsets[: cut_row + 1].copy(),
            self.indices[:cut].copy(),
            None if sc is None else sc[:cut].copy(),
        )
        rest = AccessTrace(
            rest_meta,
            self.offsets[cut_row:] - cut,
            self.indices[cut:].copy(),
            None if sc is None else sc[cut:].copy(),
        )
        return first, rest

    def validate(self) -> None:
        """Raise :class:`AccessTraceError` unless the trace is well formed."""
        _validate(self, f"access trace ({self.meta.source})")


def _validate_meta(m: AccessMeta, where: str) -> None:
    ints = ("context_tokens", "layers", "kv_heads", "steps", "local_window", "sink_tokens")
    for name in ints:
        value = getattr(m, name)
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
            raise AccessTraceError(f"{where}: meta.{name} = {value!r} is not an integer >= 0")
    for name in ("layers", "kv_heads"):
        if getattr(m, name) < 1:
            raise AccessTraceError(f"{where}: meta.{name} must be >= 1")
    if not 0.0 < float(m.sparsity) <= 1.0:
        raise AccessTraceError(f"{where}: meta.sparsity = {m.sparsity!r} not in (0, 1]")


def _validate(trace: AccessTrace, where: str) -> None:
    m = trace.meta
    _validate_meta(m, where)
    off, idx = trace.offsets, trace.indices
    if off.ndim != 1 or len(off) != m.rows + 1:
        raise AccessTraceError(
            f"{where}: offsets has length {len(off)}, expected steps*layers*kv_heads+1 = "
            f"{m.rows + 1}"
        )
    if off[0] != 0 or off[-1] != len(idx):
        raise AccessTraceError(
            f"{where}: offsets must run from 0 to len(indices) = {len(idx)}, "
            f"got {off[0]}..{off[-1]}"
        )
    lengths = np.diff(off)
    if (lengths < 0).any():
        raise AccessTraceError(f"{where}: offsets decrease at {_row_name(m, _first(lengths < 0))}")
    if trace.scores is not None and len(trace.scores) != len(idx):
        raise AccessTraceError(
            f"{where}: scores has length {len(trace.scores)}, indices {len(idx)}"
        )
    per_step = m.layers * m.kv_heads
    step_block = max(1, _CHECK_CHUNK * max(1, m.steps) // max(1, len(idx)))
    for s0 in range(0, m.steps, step_block):
        s1 = min(m.steps, s0 + step_block)
        _validate_rows(trace, s0 * per_step, s1 * per_step, where)


def _validate_rows(trace: AccessTrace, r0: int, r1: int, where: str) -> None:
    m = trace.meta
    off = trace.offsets
    lo, hi = int(off[r0]), int(off[r1])
    idx = trace.indices[lo:hi].astype(np.int64)
    lengths = np.diff(off[r0 : r1 + 1])
    row_of = np.repeat(np.arange(r0, r1), lengths)
    step_of = row_of // (m.layers * m.kv_heads)
    visible = m.context_tokens + step_of + 1
    bad = (idx < 0) | (idx >= visible)
    if bad.any():
        i = _first(bad)
        raise AccessTraceError(
            f"{where}: {_row_name(m, row_of[i])}: id {idx[i]} outside the visible "
            f"entries 0..{visible[i] - 1}"
        )
    if len(idx) > 1:
        same_row = row_of[1:] == row_of[:-1]
        step_down = (np.diff(idx) <= 0) & same_row
        if step_down.any():
            i = _first(step_down)
            kind = "duplicate id" if idx[i] == idx[i + 1] else "ids not sorted ascending"
            raise AccessTraceError(f"{where}: {_row_name(m, row_of[i])}: {kind} at {idx[i + 1]}")
    # rows are sorted and unique, so counting the forced ids present proves they all are
    rows = np.arange(r0, r1)
    vis_row = m.context_tokens + rows // (m.layers * m.kv_heads) + 1
    n_sink = np.minimum(m.sink_tokens, vis_row)
    win_lo = np.maximum(0, vis_row - m.local_window)
    expected = n_sink + (vis_row - win_lo) - np.maximum(0, n_sink - win_lo)
    forced = (idx < n_sink[row_of - r0]) | (idx >= win_lo[row_of - r0])
    present = np.bincount(row_of[forced] - r0, minlength=len(rows))
    missing = present != expected
    if missing.any():
        r = r0 + _first(missing)
        raise AccessTraceError(
            f"{where}: {_row_name(m, r)}: sink tokens (first {m.sink_tokens}) or local "
            f"window (last {m.local_window}) not all selected"
        )


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _row_name(m: AccessMeta, row: int) -> str:
    step, rest = divmod(int(row), m.layers * m.kv_heads)
    layer, head = divmod(rest, m.kv_heads)
    return f"row {int(row)} (step {step}, layer {layer}, head {head})"


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
    _validate(trace, where)
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
    _validate_meta(meta, where)
    if not isinstance(meta.seed, int):
        raise AccessTraceError(f"{where}: meta.seed must be an integer")
    return meta


def trace_stats(trace: AccessTrace, sample: int = 2000, seed: int = 0) -> dict[str, float]:
    """Summary numbers of a trace.

    * ``selected_mean/min/max``: entries per selection (row);
    * ``overlap_jaccard``: mean Jaccard index of consecutive steps' selections
      (same layer and head);
    * ``unique_entries`` / ``unique_fraction``: entries touched at least once
      per (layer, head), mean over them, and as a fraction of all entries;
    * ``coact_*``: pairwise co-activation of layer 0, head 0 on a sample of up
      to ``sample`` entries that are active in some but not all steps (sinks and
      entries always in the window are left out): ``coact_mean`` is the mean of
      P(i and j active) over sampled pairs and ``coact_indep`` the mean of
      P(i) P(j) (the two agree whatever the structure: the selection size is
      fixed); ``coact_chi2`` is the mean of ``steps * phi_ij**2`` (phi: the
      correlation of the two activation series), about 1 when entries
      co-activate by chance and far above 1 when they come in groups;
      ``coact_cond`` is the mean P(j active | i active) and ``coact_best`` the
      mean over i of the best P(j | i) -- what a clustering could exploit.
    """
    m = trace.meta
    sizes = np.diff(trace.offsets)
    out: dict[str, float] = {
        "rows": float(m.rows),
        "selected_mean": float(sizes.mean()) if len(sizes) else 0.0,
        "selected_min": float(sizes.min()) if len(sizes) else 0.0,
        "selected_max": float(sizes.max()) if len(sizes) else 0.0,
    }
    jac, uniq = [], []
    for layer in range(m.layers):
        for head in range(m.kv_heads):
            x = trace.activations(layer, head)
            uniq.append(np.count_nonzero(np.bincount(x.indices, minlength=1)))
            if m.steps > 1:
                inter = np.asarray(x[:-1].multiply(x[1:]).sum(axis=1)).ravel()
                n = np.diff(x.indptr)
                union = n[:-1] + n[1:] - inter
                jac.append(np.where(union > 0, inter / np.maximum(union, 1), 1.0))
    out["overlap_jaccard"] = float(np.concatenate(jac).mean()) if jac else float("nan")
    out["unique_entries"] = float(np.mean(uniq)) if uniq else 0.0
    out["unique_fraction"] = out["unique_entries"] / max(1, m.entries)
    out.update(_coactivation(trace, sample, seed))
    return out


def _coactivation(trace: AccessTrace, sample: int, seed: int) -> dict[str, float]:
    m = trace.meta
    nan = float("nan")
    keys = ("coact_pairs", "coact_mean", "coact_indep", "coact_chi2", "coact_cond", "coact_best")
    if m.steps < 2:
        return dict.fromkeys(keys, nan)
    x = trace.activations(0, 0).tocsc()
    counts = np.diff(x.indptr)
    candidates = np.flatnonzero((counts > 0) & (counts < m.steps))
    if len(candidates) < 2:
        return dict.fromkeys(keys, nan)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(candidates, size=min(sample, len(candidates)), replace=False))
    a = x[:, pick].astype(np.float32)
    both = (a.T @ a).toarray()
    p = counts[pick] / m.steps
    iu = np.triu_indices(len(pick), k=1)
    joint = both[iu] / m.steps
    indep = (p[:, None] * p[None, :])[iu]
    var = p * (1 - p)
    phi2 = (joint - indep) ** 2 / (var[:, None] * var[None, :])[iu]
    cond = both / counts[pick][:, None]
    np.fill_diagonal(cond, np.nan)
    return {
        "coact_pairs": float(len(joint)),
        "coact_mean": float(joint.mean()),
        "coact_indep": float(indep.mean()),
        "coact_chi2": float(m.steps * phi2.mean()),
        "coact_cond": float(np.nanmean(cond)),
        "coact_best": float(np.nanmax(cond, axis=1).mean()),
    }

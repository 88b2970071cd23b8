"""The in-memory access trace: its metadata, its rows and their validation.

An access trace records, for every observation ``s`` (a decode step or a
profiled query), every layer ``l`` and every KV-head group ``h``, the sorted
list of entry ids that attention used.  Entry ids are token positions: the
prefix is ``0..N-1`` (``N = meta.context_tokens``) and decode step ``t``
appends entry ``N + t``, so at step ``t`` the visible entries are
``0..N+t``.  Rows are sparse index lists (CSR-style ``offsets``/``indices``),
never a dense context x context matrix, so a 1M-token context stays feasible.

Row ``(s, l, h)`` is row ``(s * layers + l) * kv_heads + h``: rows are
ordered by step first, which makes :meth:`AccessTrace.split` a slice.

:func:`check_trace` (also :meth:`AccessTrace.validate`) proves a trace well
formed: ids inside the visible entries, sorted and unique per row, the sinks
and the local window all present; it runs in blocks of steps (bounded memory).
The on-disk form is :mod:`traces.access_io`; :mod:`traces.access` is the
public face of all three parts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # scipy is imported where a matrix is made: reading requests needs none
    import scipy.sparse as sp

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
        import scipy.sparse as sp  # noqa: PLC0415

        m = self.meta
        step_ids = np.arange(m.steps)[steps if steps is not None else slice(None)]
        coo = X.tocoo()
        window_start = m.context_tokens + step_ids[coo.row] + 1 - m.local_window
        keep = (coo.col >= m.sink_tokens) & (coo.col < window_start)
        return sp.csr_matrix(
            (coo.data[keep], (coo.row[keep], coo.col[keep])), shape=X.shape, dtype=bool
        )

    def _activations(self, layer: int, head: int, steps: slice | None) -> sp.csr_matrix:
        import scipy.sparse as sp  # noqa: PLC0415

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
        check_trace(self, f"access trace ({self.meta.source})")


def check_meta(m: AccessMeta, where: str) -> None:
    """Raise :class:`AccessTraceError` unless ``m``'s counts and sparsity are in range."""
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


def check_trace(trace: AccessTrace, where: str) -> None:
    """Raise :class:`AccessTraceError` (naming ``where`` and the row) unless ``trace``
    is well formed."""
    m = trace.meta
    check_meta(m, where)
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

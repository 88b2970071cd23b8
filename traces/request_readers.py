"""Readers for the public request-trace formats, into a :class:`RequestTrace`.

Formats (``fmt`` names, as ``--format`` takes them):

``mooncake``
    JSON Lines, one request per line:
    ``{"timestamp": <ms>, "input_length": int, "output_length": int,
    "hash_ids": [int, ...]}`` (Mooncake, FAST'25; other keys are ignored).
    ``timestamp`` is milliseconds since the trace start.  ``hash_ids`` holds
    one id per 512-token block, the last block usually partial
    (``len == ceil(input_length / 512)``), ids chained so that an id stands
    for its whole prefix.  They become ``block_hashes`` as they are, minus
    the partial last block's id (the internal table hashes full blocks only);
    a line with neither ``ceil`` nor ``floor`` ids is an error, usually a
    block size other than 512 (``block_tokens=``).
``azure``
    CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Azure LLM inference
    traces 2023/2024), timestamps like ``2023-11-16 18:17:03.9799600`` (7
    fractional digits) or with a UTC offset (2024).  Absolute times become
    seconds after the earliest request.  No hashes: ``block_hashes`` empty.
``vidur``
    CSV ``arrived_at,num_prefill_tokens,num_decode_tokens`` (Vidur's and
    Splitwise's processed traces), ``arrived_at`` in seconds, kept as is;
    other columns are ignored.  No hashes.
``parquet``
    A table written by :meth:`RequestTrace.write_parquet`.

``auto`` picks by extension (``.jsonl``/``.json`` -> mooncake, ``.parquet``),
and for ``.csv`` by the header; a trailing ``.gz`` is allowed.

Errors are one line naming ``file:line`` (:class:`TraceError`).  CSVs are
parsed and checked vectorised (pandas), then the first bad row is reported
with its line number (row ``i`` is line ``i + 2``: blank lines are kept as
rows so the numbering holds; blank lines at the end are ignored).  Decisions:

* lengths must be integers; ``input`` > 0, ``output`` >= 0, and an output of
  0 is clipped to 1 and counted (see :mod:`traces.requests`);
* arrivals out of order are sorted (stable) and a :class:`TraceWarning`
  names the first such line: disorder is recoverable, unlike a bad value.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from traces.errors import TraceError
from traces.requests import RequestTrace, build_table, read_parquet

FORMATS = ("mooncake", "azure", "vidur", "parquet")
MOONCAKE_BLOCK_TOKENS = 512
NO_HASH_BLOCK_TOKENS = 512  # nominal, for formats without hashes (Mooncake's, for uniformity)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
VIDUR_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")

AZURE_LICENCE = "CC-BY-4.0"
AZURE_2023 = (
    "Azure LLM inference trace 2023 (https://github.com/Azure/AzurePublicDataset): "
    "P. Patel et al., 'Splitwise: Efficient generative LLM inference using phase "
    "splitting', ISCA 2024"
)
AZURE_2024 = (
    "Azure LLM inference trace 2024 (https://github.com/Azure/AzurePublicDataset): "
    "J. Stojkovic et al., 'DynamoLLM: Designing LLM Inference Clusters for Performance "
    "and Energy Efficiency', HPCA 2025"
)


class TraceWarning(UserWarning):
    """A trace was usable but changed on reading (e.g. sorted)."""


def read_trace(path: str | Path, fmt: str = "auto", block_tokens: int | None = None):
    """Read any supported format (``fmt`` in :data:`FORMATS` or ``auto``).

    ``block_tokens`` applies to Mooncake files only (default 512).
    """
    if not Path(path).is_file():
        raise TraceError(f"{path}: no such file")
    try:
        return _read_any(path, fmt, block_tokens)
    except UnicodeDecodeError as exc:  # binary, Latin-1 or UTF-16 bytes
        raise TraceError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a truncated or fake .gz
        raise TraceError(f"{path}: broken gzip data ({exc})") from None


def _read_any(path: str | Path, fmt: str, block_tokens: int | None):
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "mooncake":
        return read_mooncake(path, block_tokens or MOONCAKE_BLOCK_TOKENS)
    if fmt == "azure":
        return read_azure(path)
    if fmt == "vidur":
        return read_vidur(path)
    if fmt == "parquet":
        return read_parquet(path)
    raise TraceError(f"unknown trace format {fmt!r} (one of auto, {', '.join(FORMATS)})")


def _base_name(path: str | Path) -> str:
    name = Path(path).name.lower()
    return name[:-3] if name.endswith(".gz") else name


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its extension, or for CSV from its header."""
    name = _base_name(path)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".json")):
        return "mooncake"
    with _open_text(path) as f:
        first = f.readline()
    header = {h.strip() for h in first.split(",")}
    if set(AZURE_COLUMNS) <= header:
        return "azure"
    if set(VIDUR_COLUMNS) <= header:
        return "vidur"
    if first.lstrip().startswith("{"):
        return "mooncake"
    raise TraceError(
        f"{path}:1: cannot tell the trace format from the header {first.strip()[:60]!r}; "
        f"pass --format ({', '.join(FORMATS)})"
    )


def _open_text(path: str | Path):
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        return opener(path, "rt", encoding="utf-8-sig")  # a BOM is not part of the header
    except OSError as exc:
        raise TraceError(f"{path}: cannot open ({exc.strerror or exc})") from None


def _provenance(path: str | Path) -> tuple[str, str]:
    """Licence and attribution of the public traces we recognise by file name."""
    name = Path(path).name
    if name.startswith("AzureLLMInferenceTrace_"):
        return AZURE_LICENCE, AZURE_2024 if "1week" in name else AZURE_2023
    return "", ""


def _finish(
    path: str | Path,
    fmt: str,
    arrival_s: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
    lines: np.ndarray,
    block_tokens: int,
    hash_offsets: np.ndarray | None = None,
    hash_values: np.ndarray | None = None,
) -> RequestTrace:
    """Sort by arrival (stable), clip outputs, attach provenance, validate."""
    if len(arrival_s) == 0:
        raise TraceError(f"{path}: no requests")
    reordered = 0
    if np.any(np.diff(arrival_s) < 0):
        late = arrival_s < np.maximum.accumulate(arrival_s)
        reordered = int(late.sum())
        first = int(lines[np.argmax(late)])
        warnings.warn(
            f"{path}:{first}: arrival earlier than a previous line; sorted "
            f"{reordered} out-of-order request(s) by arrival",
            TraceWarning,
            stacklevel=3,
        )
        order = np.argsort(arrival_s, kind="stable")
        arrival_s, inp, out = arrival_s[order], inp[order], out[order]
        if hash_offsets is not None:
            hash_offsets, hash_values = _take_csr(hash_offsets, hash_values, order)
    clipped = int((out == 0).sum())
    licence, attribution = _provenance(path)
    trace = RequestTrace(
        table=build_table(
            arrival_s,
            inp,
            np.maximum(out, 1),
            hash_offsets=hash_offsets,
            hash_values=hash_values,
        ),
        block_tokens=block_tokens,
        source=f"{fmt}:{Path(path).name}",
        licence=licence,
        attribution=attribution,
        clipped_outputs=clipped,
        reordered=reordered,
    )
    trace.validate()
    return trace


def _take_csr(
    offsets: np.ndarray, values: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.diff(offsets)[order]
    new_offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    starts = np.repeat(offsets[:-1][order] - new_offsets[:-1], lengths)
    return new_offsets, values[np.arange(len(values)) + starts]


# --- Mooncake JSONL -------------------------------------------------------------


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> RequestTrace:
    """Read a Mooncake JSONL trace (see the module docstring)."""
    where = str(path)
    arrival, inp, out, lines, lengths, values = [], [], [], [], [], []
    with _open_text(path) as f:
        try:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                ts, il, ol, ids = _mooncake_record(raw, f"{where}:{lineno}", block_tokens)
                arrival.append(ts / 1000.0)
                inp.append(il)
                out.append(ol)
                lines.append(lineno)
                lengths.append(len(ids))
                values.extend(ids)
        except UnicodeDecodeError as exc:
            raise TraceError(f"{where}: not UTF-8 text ({exc.reason})") from None
    offsets = np.r_[0, np.cumsum(lengths, dtype=np.int64)].astype(np.int64)
    return _finish(
        path,
        "mooncake",
        np.asarray(arrival, np.float64),
        np.asarray(inp, np.int64),
        np.asarray(out, np.int64),
        np.asarray(lines, np.int64),
        block_tokens,
        offsets,
        np.asarray(values, np.int64),
    )


def _mooncake_record(raw: str, at: str, block_tokens: int) -> tuple[float, int, int, list[int]]:
    try:
        rec = json.loads(raw.rstrip())
    except json.JSONDecodeError as exc:
        raise TraceError(f"{at}: bad JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(rec, dict):
        raise TraceError(f"{at}: expected a JSON object, got {type(rec).__name__}")
    for key in _MOONCAKE_KEYS:
        if key not in rec:
            raise TraceError(f"{at}: missing key {key!r}")
    ts, il, ol, ids = (rec[k] for k in _MOONCAKE_KEYS)
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise TraceError(f"{at}: timestamp {ts!r} is not a number of ms >= 0")
    if not _is_int(il) or il <= 0:
        raise TraceError(f"{at}: input_length {il!r} is not an integer > 0")
    if not _is_int(ol) or ol < 0:
        raise TraceError(f"{at}: output_length {ol!r} is not an integer >= 0")
    if not isinstance(ids, list) or not all(_is_int(h) for h in ids):
        raise TraceError(f"{at}: hash_ids is not a list of integers")
    full, rest = divmod(il, block_tokens)
    if len(ids) not in (full, full + (rest > 0)):
        raise TraceError(
            f"{at}: {len(ids)} hash_ids for input_length {il}, expected "
            f"{full + (rest > 0)} (one per {block_tokens}-token block)"
        )
    if any(h < -(2**63) or h >= 2**63 for h in ids):
        raise TraceError(f"{at}: hash_ids outside int64")
    return ts, il, ol, ids[:full]


# --- CSV (Azure, Vidur) ---------------------------------------------------------

_LINE_RE = re.compile(r"line (\d+)")


def _read_csv(path: str | Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """All cells as strings; rows keep their line numbers (row i = line i + 2)."""
    where = str(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False, engine="c")
    except pd.errors.EmptyDataError:
        raise TraceError(f"{where}:1: empty file, expected a header {','.join(columns)}") from None
    except pd.errors.ParserError as exc:
        text = str(exc).strip().splitlines()[-1]
        m = _LINE_RE.search(text)
        at = f"{where}:{m.group(1)}" if m else where
        detail = text.split("C error: ")[-1]
        raise TraceError(f"{at}: {detail}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{where}: not UTF-8 text ({exc.reason})") from None
    df.columns = [str(c).strip() for c in df.columns]
    for col in columns:
        if col not in df.columns:
            raise TraceError(f"{where}:1: missing column {col!r} (header: {','.join(df.columns)})")
    df = df.loc[:, list(columns)].fillna("")
    df = df.apply(lambda s: s.str.strip())
    empty = (df == "").all(axis=1).to_numpy()
    keep = len(df) - (np.argmin(empty[::-1]) if not empty.all() else len(df))
    if keep == 0:
        raise TraceError(f"{where}: no requests")
    return df.iloc[:keep]


def _first_bad(bad: np.ndarray, df: pd.DataFrame, col: str, where: str, what: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        value = df[col].iloc[i]
        shown = "an empty field" if value == "" else repr(value)
        raise TraceError(f"{where}:{i + 2}: {col} {shown} is not {what}")


def _int_column(df: pd.DataFrame, col: str, where: str, lo: int) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(v) | (v != np.floor(v)) | (v < lo) | (np.abs(v) >= 2**62)
    _first_bad(bad, df, col, where, f"an integer >= {lo}")
    return v.astype(np.int64)


def read_azure(path: str | Path) -> RequestTrace:
    """Read an Azure LLM inference CSV (see the module docstring)."""
    where = str(path)
    df = _read_csv(path, AZURE_COLUMNS)
    ts = pd.to_datetime(df["TIMESTAMP"], format="ISO8601", utc=True, errors="coerce")
    _first_bad(
        ts.isna().to_numpy(), df, "TIMESTAMP", where, "a timestamp like 2023-11-16 18:17:03.98"
    )
    inp = _int_column(df, "ContextTokens", where, 1)
    out = _int_column(df, "GeneratedTokens", where, 0)
    arrival = ((ts - ts.min()) / pd.Timedelta(seconds=1)).to_numpy(np.float64)
    lines = np.arange(len(df), dtype=np.int64) + 2
    return _finish(path, "azure", arrival, inp, out, lines, NO_HASH_BLOCK_TOKENS)


def read_vidur(path: str | Path) -> RequestTrace:
    """Read a Vidur/Splitwise CSV (see the module docstring)."""
    where = str(path)
    df = _read_csv(path, VIDUR_COLUMNS)
    t = pd.to_numeric(df["arrived_at"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    _first_bad(~np.isfinite(t) | (t < 0), df, "arrived_at", where, "a number of seconds >= 0")
    inp = _int_column(df, "num_prefill_tokens", where, 1)
    out = _int_column(df, "num_decode_tokens", where, 0)
    lines = np.arange(len(df), dtype=np.int64) + 2
    return _finish(path, "vidur", t, inp, out, lines, NO_HASH_BLOCK_TOKENS)

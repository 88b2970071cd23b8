"""Serving metrics, computed from records only (never from engine state).

Per request (``requests.parquet``): release (the client sent it), admission,
first token and finish times; queueing time = admission - release; TTFT =
first token - release; TPOT = (finish - first token) / (output - 1); hit
blocks per tier; prompt tokens computed; and **blocked I/O time**: seed
004's "duration during which only I/O for KV retrieval proceeds, with no
overlapping GPU computation" (§II-B1), i.e. the time covered by the
request's load ops (tag ``load``, ``step`` = request id) and by no compute
op.  Over time (``timeline.parquet``): waiting, loading (parked) and
running requests and GPU blocks in use, one row per change.

The run summary: TTFT mean/P50/P90/P99, TPOT, queueing, throughput, hit
rate per tier (share of prompt tokens served from it), blocked I/O, bytes
loaded and stored, device utilisation (GPU compute, busiest SSD).  The run's
blocked I/O is each instance's: the time its loads are in flight and its own
GPUs compute nothing, summed over the instances of a run that joins several
(:func:`sim.fleet.routed.fleet_records`; a load on one GPU is not covered by
another's computation).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kvtier.contracts.arrays import arrow_array, to_numpy, write_parquet
from kvtier.contracts.records import Records
from sim.serving.planstore import PlanStore
from sim.serving.requests import Request

if TYPE_CHECKING:  # pandas is imported by the summary: a run needs none
    import pandas as pd

TIERS = ("gpu", "cpu", "ssd", "pool")

REQUEST_RECORD_SCHEMA = pa.schema(
    [
        ("request_id", pa.int64()),
        ("session_id", pa.int64()),
        ("turn", pa.int32()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("arrival_s", pa.float64()),
        ("release_s", pa.float64()),
        ("admit_s", pa.float64()),
        ("first_token_s", pa.float64()),
        ("finish_s", pa.float64()),
        ("queue_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("tpot_s", pa.float64()),
        ("computed_tokens", pa.int64()),
        *[(f"hit_blocks_{t}", pa.int64()) for t in TIERS],
        ("blocked_io_s", pa.float64()),
        ("rejected", pa.bool_()),
    ]
)

TIMELINE_SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("waiting", pa.int64()),
        ("loading", pa.int64()),
        ("running", pa.int64()),
        ("gpu_blocks_used", pa.int64()),
    ]
)


@dataclass
class ServingRecords(Records):
    """Records of a serving run: ops and devices plus the plan it issued,
    one row per request and the queue/batch timeline."""

    plan_store: PlanStore | None = None  # the issued plan, compactly (None: not kept)
    requests: pa.Table | None = None
    timeline: pa.Table | None = None
    gpus: tuple[str, ...] = ("gpu0",)  # the GPUs loads land on
    # ops of each instance, in op order, of a run that joins several (fleet_records);
    # () = one instance, every op
    parts: tuple[int, ...] = ()

    @property
    def plan(self) -> pa.Table | None:
        """The plan the run issued, as one table (it holds every extent: a large
        run's is written chunk by chunk, :meth:`plan_chunks`)."""
        return self.plan_store.table() if self.plan_store is not None else None

    def plan_chunks(self) -> Iterator[pa.Table]:
        """The plan as consecutive tables of bounded size (for ``write_plan``)."""
        if self.plan_store is None:
            raise ValueError("this serving run did not keep its plan")
        return self.plan_store.chunks()

    def write(self, out_dir: str | Path) -> None:
        super().write(out_dir)
        out = Path(out_dir)
        if self.requests is not None:
            write_parquet(self.requests, out / "requests.parquet")
        if self.timeline is not None:
            write_parquet(self.timeline, out / "timeline.parquet")


class RequestLog:
    """What the engine observed of each request, one column per quantity
    preallocated for every request (row ``i`` = the engine's ``i``-th
    request; times in seconds, NaN until they happen)."""

    def __init__(self, n: int):
        self.release_s = np.full(n, np.nan)  # the client sent it (>= arrival)
        self.admit_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.computed_tokens = np.zeros(n, dtype=np.int64)  # prompt tokens prefilled
        self.rejected = np.zeros(n, dtype=bool)
        self.hits = np.zeros((len(TIERS), n), dtype=np.int64)  # GPU blocks hit, per tier

    def set_hits(self, i: int, hits: dict[str, int]) -> None:
        """Row ``i``'s hits (tier -> GPU blocks; tiers not in TIERS are not columns)."""
        for t, tier in enumerate(TIERS):
            self.hits[t, i] = hits.get(tier, 0)


class Timeline:
    """Waiting, loading (parked), running requests and GPU blocks in use over
    time: one row per change, in typed columns."""

    def __init__(self) -> None:
        self.t_s = array("d")
        self.cols = [array("q") for _ in TIMELINE_SCHEMA.names[1:]]

    def sample(self, now: float, *row: int) -> None:
        """A row at ``now`` if the state changed since the last one."""
        if self.t_s and all(c[-1] == v for c, v in zip(self.cols, row, strict=True)):
            return
        self.t_s.append(now)
        for c, v in zip(self.cols, row, strict=True):
            c.append(v)

    def table(self) -> pa.Table:
        cols = [np.frombuffer(self.t_s, np.float64)]
        cols += [np.frombuffer(c, np.int64) for c in self.cols]
        return pa.Table.from_arrays(
            [arrow_array(c, f.type) for c, f in zip(cols, TIMELINE_SCHEMA, strict=True)],
            schema=TIMELINE_SCHEMA,
        )


def request_records(reqs: list[Request], log: RequestLog, ops: pa.Table | None = None) -> pa.Table:
    """One row per request, by request id (``reqs[i]``'s outcome is ``log``'s row ``i``)."""
    blocked = blocked_io(ops) if ops is not None else {}
    rid = np.array([r.rid for r in reqs], dtype=np.int64)
    order = np.argsort(rid, kind="stable")
    out_tokens = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    first, finish = log.first_token_s, log.finish_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (finish - first) / np.maximum(out_tokens - 1, 1), np.nan)
    cols = {
        "request_id": rid,
        "session_id": np.array([r.session for r in reqs], dtype=np.int64),
        "turn": np.array([r.turn for r in reqs], dtype=np.int32),
        "input_tokens": np.array([r.input_tokens for r in reqs], dtype=np.int64),
        "output_tokens": out_tokens,
        "arrival_s": np.array([r.arrival_s for r in reqs], dtype=np.float64),
        "release_s": log.release_s,
        "admit_s": log.admit_s,
        "first_token_s": first,
        "finish_s": finish,
        "queue_s": log.admit_s - log.release_s,
        "ttft_s": first - log.release_s,
        "tpot_s": tpot,
        "computed_tokens": log.computed_tokens,
        **{f"hit_blocks_{t}": log.hits[k] for k, t in enumerate(TIERS)},
        "blocked_io_s": np.array([blocked.get(int(r), 0.0) for r in rid]),
        "rejected": log.rejected,
    }
    return pa.Table.from_arrays(
        [arrow_array(cols[f.name][order], f.type) for f in REQUEST_RECORD_SCHEMA],
        schema=REQUEST_RECORD_SCHEMA,
    )


# ---- blocked I/O ------------------------------------------------------------------
def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same time as [starts, ends)."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


class _Cover:
    """The union of intervals [starts, ends), made once (:func:`_union`), and the
    time it covers before any instant."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.cs, self.ce = _union(starts, ends)
        self.cum = np.concatenate([[0.0], np.cumsum(self.ce - self.cs)])

    def before(self, t: np.ndarray) -> np.ndarray:
        """Time covered before each ``t``."""
        cs, ce = self.cs, self.ce
        if len(cs) == 0:
            return np.zeros_like(t)
        i = np.searchsorted(cs, t, side="right") - 1
        inside = np.clip(t - cs[np.maximum(i, 0)], 0.0, (ce - cs)[np.maximum(i, 0)])
        return np.where(i >= 0, self.cum[np.maximum(i, 0)] + inside, 0.0)

    def uncovered(self, ls: np.ndarray, le: np.ndarray) -> float:
        """Time in the union of [ls, le) not covered: never below 0 (where the
        cover holds all of it, the two sums' round-off can leave a few ulps of
        the instants, ~1e-12 s at an hour, on either side of 0)."""
        us, ue = _union(ls, le)
        total = float(np.sum(ue - us))
        return max(0.0, total - float(np.sum(self.before(ue) - self.before(us))))


def uncovered(ls: np.ndarray, le: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> float:
    """Time in the union of [ls, le) not covered by the union of [cs, ce)."""
    return _Cover(cs, ce).uncovered(ls, le)


def blocked_io(ops: pa.Table) -> dict[int, float]:
    """Per request: its load time not overlapped by any GPU computation (the
    computations' union made once for all of them)."""

    def col(name: str) -> np.ndarray:
        return to_numpy(ops.column(name))

    kind, tag, step = col("kind"), col("tag"), col("step")
    start, end = col("start_s"), col("end_s")
    comp = kind == "compute"
    loads = np.flatnonzero(tag == "load")
    loads = loads[np.argsort(step[loads], kind="stable")]  # by request, each in op order
    rids, first = np.unique(step[loads], return_index=True)
    out: dict[int, float] = {}
    if len(loads) == 0:
        return out
    cover = _Cover(start[comp], end[comp])
    for rid, g in zip(rids.tolist(), np.split(loads, first[1:]), strict=True):
        out[rid] = cover.uncovered(start[g], end[g])
    return out


def blocked_io_by_instance(ops: pd.DataFrame, parts: tuple[int, ...]) -> float:
    """Blocked I/O of a run: per instance (``parts``: its ops, in op order; ()
    one), the time its loads are in flight and its computations cover none of,
    summed over the instances."""
    is_load, is_comp = (ops["tag"] == "load").to_numpy(), (ops["kind"] == "compute").to_numpy()
    start, end = ops["start_s"].to_numpy(), ops["end_s"].to_numpy()
    bounds = np.cumsum([0, *parts]) if parts else np.array([0, len(ops)])
    total = 0.0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        ld, cp = is_load[a:b], is_comp[a:b]
        if ld.any():
            s, e = start[a:b], end[a:b]
            total += uncovered(s[ld], e[ld], s[cp], e[cp])
    return total


# ---- summary --------------------------------------------------------------------
def _pct(x: pd.Series, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def serving_summary(rec: ServingRecords, block_tokens: int) -> dict[str, Any]:
    """One row of numbers for a run (see the module docstring)."""
    import pandas as pd  # noqa: PLC0415

    req = rec.requests.to_pandas() if rec.requests is not None else pd.DataFrame()
    done = req[~req["rejected"]]
    ops = rec.ops.select(["kind", "src", "dst", "tag", "bytes", "start_s", "end_s"]).to_pandas()
    dev = rec.devices.to_pandas()
    span = float(done["finish_s"].max() - done["release_s"].min()) if len(done) else 0.0
    prompt = float(done["input_tokens"].sum())
    loads = ops[ops["tag"] == "load"]
    all_blocked = blocked_io_by_instance(ops, rec.parts)
    ssd = dev[dev["type"] == "ssd"]
    gpu = dev[dev["type"] == "gpu"]
    tl = rec.timeline.to_pandas() if rec.timeline is not None else pd.DataFrame()
    out = {
        "requests": int(len(req)),
        "rejected": int(req["rejected"].sum()),
        "ttft_mean_s": float(done["ttft_s"].mean()),
        "ttft_p50_s": _pct(done["ttft_s"], 50),
        "ttft_p90_s": _pct(done["ttft_s"], 90),
        "ttft_p99_s": _pct(done["ttft_s"], 99),
        "tpot_mean_s": float(done["tpot_s"].mean()),
        "tpot_p50_s": _pct(done["tpot_s"].dropna(), 50),
        "tpot_p99_s": _pct(done["tpot_s"].dropna(), 99),
        "queue_mean_s": float(done["queue_s"].mean()),
        "throughput_tok_s": float(done["output_tokens"].sum()) / span if span > 0 else 0.0,
        "requests_per_s": len(done) / span if span > 0 else 0.0,
        "duration_s": span,
        "blocked_io_s": all_blocked,
        "blocked_io_mean_s": float(done["blocked_io_s"].mean()),
        # KV that reached the GPU (an SSD read into a bounce buffer is not counted twice)
        "load_gb": float(loads.loc[loads["dst"].isin(rec.gpus), "bytes"].sum()) / 1e9,
        "store_gb": float(ops.loc[ops["tag"].isin(["store", "demote"]), "bytes"].sum()) / 1e9,
        "prefill_tokens_computed": int(done["computed_tokens"].sum()),
        "gpu_util": float(gpu["util_mean"].max()) if len(gpu) else 0.0,
        "ssd_util": float(ssd["util_mean"].max()) if len(ssd) else 0.0,
        "ssd_read_gb": float(ssd["bytes_read"].sum()) / 1e9,
        "ssd_write_gb": float(ssd["bytes_written"].sum()) / 1e9,
        "max_waiting": int(tl["waiting"].max()) if len(tl) else 0,
    }
    for t in TIERS:
        hit = float(done[f"hit_blocks_{t}"].sum()) * block_tokens
        out[f"hit_rate_{t}"] = hit / prompt if prompt else 0.0
    return out

"""The search: the grid of points, the Pareto fronts, and a pruned walk over SSD counts.

A :class:`Space` is a grid: designs x SSD models x SSD counts x DRAM
modules x GiB per module.  Points that differ only in the SSD count form a
*chain*, ordered by count (cost grows with it).  :func:`search` walks each
chain by bisection, lowest open interval first, in rounds (every chain's
next point runs together with the other chains' on the executor), and skips
points it can show are dominated:

* **plateau**: two evaluated counts of a chain with equal objectives (to
  :data:`DIGITS` significant digits): under "more SSDs never slow a
  read-bound design down" every count between them is equal too, and a
  cheaper equal point dominates them;
* **unfit**: a chain whose GPUs cannot hold the model (a rank's weights over
  the engine's share of HBM, or a TP degree the heads do not divide) is
  skipped whole by arithmetic, never simulated;
* **saturation**: count ``n_{k+1}`` improved no objective over ``n_k`` and
  its bottleneck is not an SSD (a shared link, the CPU, the GPU): the added
  SSD met a saturated resource more SSDs do not relieve, so the counts
  above are skipped ("stop adding").

``prune=False`` evaluates the whole grid (the reference the pruned search is
tested against).  Every evaluation goes through the :class:`ResultStore`, so
a point already there is never simulated again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.capacity.evaluate import OBJECTIVES, Point, Question, evaluate, point_key, unfit
from sim.capacity.executors import Executor, LocalExecutor
from sim.capacity.store import ResultStore
from sim.capacity.variants import Hardware

# objectives compared at 3 significant digits (0.05-0.5%): below what the simulator is
# validated to (`kvtier real validate`: per-step errors of a few %), so the planner does
# not rank scheduling noise (a pool TPOT of 0.019018 vs 0.018986 s with 1 vs 3 SSDs)
DIGITS = 3
SENSE = {"ttft_p99_s": 1, "tpot_p99_s": 1, "throughput_tok_s": -1}  # +1 minimise, -1 maximise


@dataclass(frozen=True)
class Space:
    designs: tuple[str, ...]
    ssd_models: tuple[str, ...]
    ssd_counts: tuple[int, ...]
    dram_modules: tuple[int, ...]
    dram_gib: tuple[float, ...]
    gpu_counts: tuple[int, ...] = (0,)  # GPUs (tensor parallel); 0 = the base's, serving on one

    def chains(self) -> list[list[Point]]:
        """Points grouped by everything but the SSD count, counts ascending."""
        counts = sorted(set(self.ssd_counts))
        out = []
        for d, m, k, g, n_gpu in itertools.product(
            self.designs, self.ssd_models, self.dram_modules, self.dram_gib, self.gpu_counts
        ):
            out.append([Point(d, Hardware(m, n, k, g, n_gpu)) for n in counts])
        return out

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chains())


@dataclass
class SearchResult:
    rows: pd.DataFrame  # one row per grid point: evaluated, or skipped with the reason
    simulated: int  # simulations this call ran (points found in the store excluded)
    evaluated: int  # points with a result (from this call or the store)
    grid: int
    skipped: dict[str, str] = field(default_factory=dict)  # key -> why


def rounded(row: dict[str, Any]) -> tuple[float, ...]:
    """The objectives at :data:`DIGITS` digits; one not modelled (NaN) reads as inf,
    so it neither improves nor breaks a plateau."""
    return tuple(float(f"{row[k]:.{DIGITS}g}") if row[k] == row[k] else np.inf for k in OBJECTIVES)


def better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``a`` beats ``b`` on at least one objective (rounded)."""
    return any(
        s * x < s * y for s, x, y in zip(SENSE.values(), rounded(a), rounded(b), strict=True)
    )


def _ok(row: dict[str, Any] | None) -> bool:
    return row is not None and row.get("status") == "ok"


def _plan_chain(chain: list[str], rows: dict[str, dict]) -> tuple[list[int], dict[int, str]]:
    """(indices to evaluate next, index -> why skipped) for one chain of keys."""
    known = [i for i, k in enumerate(chain) if k in rows]
    skip: dict[int, str] = {}
    for a, b in itertools.pairwise(known):  # saturation: stop adding
        ra, rb = rows[chain[a]], rows[chain[b]]
        stuck = b == a + 1 and _ok(ra) and _ok(rb) and not better(rb, ra)
        if stuck and not all(n.startswith("ssd") for n in rb["bottleneck"].split(" & ")):
            why = f"saturated: {rb['bottleneck']} binds, one more SSD did not help"
            skip.update({i: why for i in range(b + 1, len(chain)) if chain[i] not in rows})
            break
    todo: list[int] = []
    for a, b in itertools.pairwise(known):  # plateau or bisect
        if b - a < 2:
            continue
        ra, rb = rows[chain[a]], rows[chain[b]]
        if _ok(ra) and _ok(rb) and rounded(ra) == rounded(rb):
            skip.update({i: f"plateau: equals {a}..{b}" for i in range(a + 1, b) if i not in skip})
        elif (a + b) // 2 not in skip and not todo:  # lowest open interval first
            todo.append((a + b) // 2)
    if not known:
        todo = sorted({0, len(chain) - 1})
    elif known[-1] != len(chain) - 1 and len(chain) - 1 not in skip:
        todo.append(len(chain) - 1)
    return todo, skip


def search(
    q: Question,
    space: Space,
    executor: Executor | None = None,
    store: ResultStore | None = None,
    prune: bool = True,
    fn: Callable[[Question, Point], dict[str, Any]] = evaluate,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Evaluate ``space`` for ``q`` (pruned unless ``prune`` is False)."""
    executor = executor or LocalExecutor(1)
    store = store if store is not None else ResultStore()
    chains = space.chains()
    keys = [[point_key(q, p) for p in c] for c in chains]
    points = {k: p for c, ks in zip(chains, keys, strict=True) for p, k in zip(c, ks, strict=True)}
    rows = {k: store.get(k) for k in points if k in store}
    simulated, skipped = 0, {}
    unfits = {id(ks): unfit(q, c[0].hw) for c, ks in zip(chains, keys, strict=True)}
    while True:
        todo: list[str] = []
        skipped = {}
        for ks in keys:
            if unfits[id(ks)]:  # the GPUs cannot hold the model: no count of SSDs helps
                skipped.update({k: f"unfit: {unfits[id(ks)]}" for k in ks})
                continue
            idx, skip = _plan_chain(ks, rows) if prune else ([], {})
            if not prune:
                idx = [i for i, k in enumerate(ks) if k not in rows]
            todo += [ks[i] for i in idx if ks[i] not in rows]
            skipped.update({ks[i]: why for i, why in skip.items()})
        todo = list(dict.fromkeys(todo))
        if not todo:
            break
        for i, row in executor.run(fn, [(q, points[k]) for k in todo]):
            store.put(row)
            rows[todo[i]] = row
            simulated += 1
            if progress:
                progress(simulated)
    table = _table(chains, keys, rows, skipped)
    return SearchResult(table, simulated, len(rows), space.size, skipped)


def _table(chains, keys, rows, skipped) -> pd.DataFrame:
    out = []
    for c, ks in zip(chains, keys, strict=True):
        for p, k in zip(c, ks, strict=True):
            row = rows.get(k) or {"key": k, **p.flat(), "status": f"skipped: {skipped.get(k)}"}
            out.append({**row, "evaluated": k in rows})
    return pd.DataFrame(out)


def pareto(df: pd.DataFrame, cost: str, metric: str) -> pd.DataFrame:
    """Rows of ``df`` (status ok) not dominated in (``cost`` low, ``metric``
    best by :data:`SENSE`), metric rounded to :data:`DIGITS`; sorted by cost."""
    ok = df[(df["status"] == "ok") & df[metric].notna()].copy() if metric in df else df[:0]
    if ok.empty:
        return ok
    s = SENSE[metric]
    m = np.array([s * float(f"{v:.{DIGITS}g}") for v in ok[metric]])
    c = ok[cost].to_numpy(dtype=float)
    order = np.lexsort((m, c))  # cost ascending, then metric best first
    keep, best = [], np.inf
    for i in order:
        if m[i] < best:
            keep.append(i)
            best = m[i]
    return ok.iloc[keep]


def front_keys(df: pd.DataFrame, cost: str, metrics: Sequence[str] = OBJECTIVES) -> dict[str, set]:
    return {m: set(pareto(df, cost, m)["key"]) for m in metrics}

"""The search: the grid of points, the Pareto fronts, and a pruned walk over SSD counts.

A :class:`Space` is a grid: base profiles x designs x SSD models x SSD
counts x DRAM modules x GiB per module (x GPU counts or replicas).  Each base
profile is a machine kind (its GPU model, links, platform); every point of a
base is simulated under the question with that ``base``, and the walks below
never cross bases: a chain and a GPU group are each within one base.  Points
that differ only in the SSD count form a *chain*, ordered by count (cost grows
with it).  :func:`search` walks each chain by bisection, lowest open interval
first, in rounds (every chain's next point, of every base, runs together with
the other chains' on the executor), and skips points it can show are dominated:

* **plateau**: two evaluated counts of a chain with equal objectives (to
  :data:`DIGITS` significant digits): under "more SSDs never slow a
  read-bound design down" every count between them is equal too, and a
  cheaper equal point dominates them;
* **unfit**: a chain whose GPUs cannot hold the model (more GPUs than its
  base has, a rank's weights over the engine's share of HBM, a TP degree the
  heads do not divide or without NVLink, a trace request over the GPU KV
  cache) is skipped whole by arithmetic, never simulated;
* **saturation**: count ``n_{k+1}`` improved no objective over ``n_k`` and
  its whole-run bottleneck is not an SSD or an SSD's own link (a shared link,
  the CPU, the GPU): the added SSD met a saturated resource more SSDs do not
  relieve, so the counts above are skipped ("stop adding").  The row says so
  in ``bottleneck_run_ssd_only`` (:class:`sim.capacity.binding.Binding`).

GPU counts (tensor parallel, ``gpus`` > 0) are walked the same way, one level
up: chains that differ only in the GPU count are started in ascending count,
each once the previous one has its two ends (fewest and most SSDs).  When
``g_{k+1}`` improved no objective over ``g_k`` at either end and both its
ends are bound by a resource more GPUs do not relieve (an NVLink port, which
the all-reduce loads more with every rank, or one every rank shares: a DRAM
bus, an SSD, the CPU), the larger counts' chains are skipped ("stop adding
GPUs").  GPU compute, HBM, a GPU's own PCIe link and a switch uplink are
relieved: each rank brings its own or moves 1/N of the bytes through its
share (``bottleneck_run_gpu_relieved``, :data:`sim.capacity.binding.GPU_RELIEVED`).
A rule "stop once a point meets the SLO" is *not* used: more GPUs
cost more but may lower latency, so such a point can be on the cost-vs-TTFT
front, which must stay the exhaustive grid's.

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

from sim.capacity.evaluate import (
    OBJECTIVES,
    Point,
    Question,
    evaluate,
    kv_tokens,
    longest_request,
    point_key,
    replace,
    unfit,
)
from sim.capacity.store import FACTS, ResultStore
from sim.capacity.variants import Hardware, gpu_model
from sim.config import ConfigError
from sim.parallel import Executor, LocalExecutor

# objectives compared at 3 significant digits (0.05-0.5%): below what the simulator is
# validated to (`kvtier real validate`: per-step errors of a few %), so the planner does
# not rank scheduling noise (a pool TPOT of 0.019018 vs 0.018986 s with 1 vs 3 SSDs)
DIGITS = 3
SSD_ONLY, GPU_RELIEVED = FACTS  # the whole-run bottleneck's facts a result row carries
SENSE = {"ttft_p99_s": 1, "tpot_p99_s": 1, "throughput_tok_s": -1}  # +1 minimise, -1 maximise


@dataclass(frozen=True)
class Space:
    designs: tuple[str, ...]
    ssd_models: tuple[str, ...]
    ssd_counts: tuple[int, ...]
    dram_modules: tuple[int, ...]
    dram_gib: tuple[float, ...]
    gpu_counts: tuple[int, ...] = (0,)  # GPUs (tensor parallel); 0 = the base's, serving on one
    # one-GPU instances behind `router` (a machine of that many GPUs); 0 = no router.
    # Replicas take the GPU walk's place (``gpus`` = replicas): the CLI refuses both
    replicas: tuple[int, ...] = (0,)
    router: str = "round_robin"
    # base profiles (names or paths), each a machine kind; () = the question's ``base``
    bases: tuple[str, ...] = ()

    def chains(self) -> list[list[Point]]:
        """Points of one base grouped by everything but the SSD count, counts ascending."""
        counts = sorted(set(self.ssd_counts))
        out = []
        for d, m, k, g, n_gpu, r in itertools.product(
            self.designs, self.ssd_models, self.dram_modules, self.dram_gib, self.gpu_counts,
            self.replicas,
        ):  # fmt: skip
            gpus, router = (r, self.router) if r else (n_gpu, "")
            out.append([Point(d, Hardware(m, n, k, g, gpus), r, router) for n in counts])
        return out

    def based_chains(self, q: Question) -> list[tuple[Question, list[Point]]]:
        """(the question on one base, a chain of :meth:`chains`) for every base, in order."""
        return [(replace(q, base=b), c) for b in self.bases or (q.base,) for c in self.chains()]

    @property
    def size(self) -> int:
        return max(len(self.bases), 1) * sum(len(c) for c in self.chains())


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
        if stuck and not rb[SSD_ONLY]:
            why = f"saturated: {rb['bottleneck_run']} binds, one more SSD did not help"
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


def _gpu_stuck(a: list[str], b: list[str], rows: dict[str, dict]) -> str:
    """Why chain ``b`` (one more GPU step than ``a``) ends the GPU walk, or ""."""
    for i in (0, -1):
        ra, rb = rows[a[i]], rows[b[i]]
        if not (_ok(ra) and _ok(rb)) or better(rb, ra) or rb[GPU_RELIEVED]:
            return ""
    return f"saturated: {rows[b[-1]]['bottleneck_run']} binds, more GPUs did not help"


def _gpu_groups(chains: list[tuple[Question, list[Point]]]) -> list[list[int]]:
    """Indices of chains equal but for a GPU count > 0 (one base), grouped, counts ascending."""
    groups: dict[tuple, list[int]] = {}
    for i, (q, c) in enumerate(chains):
        hw = c[0].hw
        if hw.gpus:
            key = (q.base, c[0].design, hw.ssd_model, hw.dram_modules, hw.dram_gib)
            groups.setdefault(key, []).append(i)
    return [sorted(g, key=lambda i: chains[i][1][0].hw.gpus) for g in groups.values()]


def _gpu_walk(groups, keys, rows, unfits) -> tuple[set[int], dict[str, str]]:
    """(chains not to start yet, key -> why skipped) of the GPU walk (module docstring)."""
    wait: set[int] = set()
    skipped: dict[str, str] = {}
    for group in groups:
        prev, stop = None, ""
        for n, ci in enumerate(group):
            ks = keys[ci]
            if stop:
                skipped.update({k: stop for k in ks})
                continue
            if unfits[ci]:
                continue
            if ks[0] not in rows or ks[-1] not in rows:  # its first round is under way
                wait.update(group[n + 1 :])
                break
            if prev is not None:
                stop = _gpu_stuck(prev, ks, rows)
            prev = ks
    return wait, skipped


def search(
    q: Question,
    space: Space,
    executor: Executor | None = None,
    store: ResultStore | None = None,
    prune: bool = True,
    fn: Callable[[Question, Point], dict[str, Any]] = evaluate,
    progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Evaluate ``space`` for ``q`` (pruned unless ``prune`` is False), on each of
    ``space.bases`` (the question's ``base`` where none): every round runs the next
    points of every base's chains together."""
    executor = executor or LocalExecutor(1)
    store = store if store is not None else ResultStore()
    chains = space.based_chains(q)
    keys = [[point_key(qb, p) for p in c] for qb, c in chains]
    points = {
        k: (qb, p) for (qb, c), ks in zip(chains, keys, strict=True)
        for p, k in zip(c, ks, strict=True)
    }  # fmt: skip
    rows = {k: store.get(k) for k in points if k in store}
    simulated, skipped = 0, {}
    unfits = [unfit(qb, c[0].hw, c[0].replicas) for qb, c in chains]
    groups = _gpu_groups(chains) if prune else []
    while True:
        todo: list[str] = []
        wait, skipped = _gpu_walk(groups, keys, rows, unfits)
        for ci, ks in enumerate(keys):
            if unfits[ci]:  # the GPUs cannot hold the model: no count of SSDs helps
                skipped.update({k: f"unfit: {unfits[ci]}" for k in ks})
                continue
            if ci in wait or ks[0] in skipped:  # GPU walk: not yet, or stopped
                continue
            idx, skip = _plan_chain(ks, rows) if prune else ([], {})
            if not prune:
                idx = [i for i, k in enumerate(ks) if k not in rows]
            todo += [ks[i] for i in idx if ks[i] not in rows]
            skipped.update({ks[i]: why for i, why in skip.items()})
        todo = list(dict.fromkeys(todo))
        if not todo:
            break
        for i, row in executor.run(fn, [points[k] for k in todo]):
            store.put(row)
            rows[todo[i]] = row
            simulated += 1
            if progress:
                progress(simulated)
    table = _table(chains, keys, rows, skipped)
    return SearchResult(table, simulated, len(rows), space.size, skipped)


def check_fit(q: Question, space: Space) -> None:
    """At least one chain of ``space`` can run (:func:`sim.capacity.evaluate.unfit`), else a
    one-line :class:`ConfigError` before any simulation: a trace request no candidate's GPU
    KV cache holds names the request and the largest cache; otherwise each base's reasons."""
    chains = space.based_chains(q)
    why = [unfit(qb, c[0].hw, c[0].replicas) for qb, c in chains]
    if not all(why):
        return
    held = [(kv_tokens(qb, c[0].hw, c[0].replicas), qb, c[0]) for (qb, c), w in
            zip(chains, why, strict=True) if w.startswith("request ")]  # fmt: skip
    if held:
        cap, qb, p = max(held, key=lambda h: h[0])
        rid, tokens = longest_request(q)
        n = p.replicas or p.hw.gpus or 1
        raise ConfigError(
            f"--trace {q.trace}: request {rid} holds {tokens:,} tokens of KV (prompt + output), "
            f"more than any candidate's GPU KV cache (the largest: {cap:,} tokens, "
            f"{gpu_model(qb.base)} on {qb.base}, {n} GPU(s)): no candidate can serve it"
        )
    reasons = dict.fromkeys(f"{qb.base}: {w}" for (qb, _), w in zip(chains, why, strict=True))
    raise ConfigError(f"kvtier plan: no candidate of the grid can run: {'; '.join(reasons)}")


def _table(chains, keys, rows, skipped) -> pd.DataFrame:
    """One row per grid point, each naming its base profile and that base's GPU model."""
    out = []
    for (qb, c), ks in zip(chains, keys, strict=True):
        kind = {"base": str(qb.base), "gpu_model": gpu_model(qb.base)}
        for p, k in zip(c, ks, strict=True):
            row = rows.get(k) or {"key": k, **p.flat(), "status": f"skipped: {skipped.get(k)}"}
            out.append({**row, **kind, "evaluated": k in rows})
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

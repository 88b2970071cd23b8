"""The largest load each candidate serves within the SLOs: a bisection over the arrival rate.

Vidur's capacity search (microsoft/vidur,
``vidur/config_optimizer/config_explorer/capacity_search.py``, ``CapacitySearch.search``)
bisects one configuration's QPS between 0 and twice a start QPS, each probe a whole
simulation, for at most ``max_iterations`` probes or until the bracket is narrower
than a granularity, and keeps the largest QPS found under the SLO.  kvtier does the
same over the trace's *arrival-rate scale* (``ServingParams.arrival_scale``: every
arrival time divided by it, the requests themselves unchanged), between ``low`` and
``high``, until the bracket is at most ``tol`` wide or ``probes`` probes ran.  Vidur
also widens its upper end when a probe's scheduling delay is far under its SLO; that
heuristic is not taken here: the bracket is the user's.

Like Vidur's, the search assumes that meeting the SLOs is monotone in the load (a
faster arrival never lowers a P99 latency).  Both ends are probed first:

* ``low`` misses: no load in the bracket is served (``max_load_scale`` NaN,
  ``max_load_bound`` ``none``);
* ``high`` meets: the candidate serves at least ``high`` (``max_load_bound`` ``high``);
* else bisection keeps ``ok`` (largest scale seen meeting) < ``fail`` (smallest seen
  missing); ``max_load_bound`` is ``tol`` when ``fail - ok <= tol``, else ``probes``.

Each round every open candidate's next probe runs together on the executor
(:mod:`sim.parallel`): a real simulation through :func:`sim.capacity.evaluate.evaluate`,
stored in the :class:`ResultStore` under its own key (the scale is part of it), so a
rerun resumes.  The arrival rate a scale means is ``scale x rate_1``, ``rate_1`` the
trace's own mean rate (requests - 1 over the span of its arrivals: the inverse of the
mean gap between arrivals).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sim.capacity.evaluate import Point, Question, evaluate, point_key, replace, with_slos
from sim.capacity.store import ResultStore
from sim.capacity.variants import Hardware
from sim.config import ConfigError
from sim.parallel import Executor, LocalExecutor


@dataclass(frozen=True)
class LoadSearch:
    """The bracket and stopping rules of the search (``--load-*`` flags)."""

    low: float = 0.25
    high: float = 4.0
    tol: float = 0.05
    probes: int = 8  # simulations per candidate at most, both ends included

    def __post_init__(self) -> None:
        if not self.low > 0:
            raise ConfigError(f"--load-low: must be > 0, got {self.low}")
        if not self.low < self.high:
            raise ConfigError(f"--load-low {self.low}: must be below --load-high {self.high}")
        if not self.tol > 0:
            raise ConfigError(f"--load-tol: must be > 0, got {self.tol}")
        if self.probes < 2:
            raise ConfigError(f"--load-probes: must be >= 2 (both ends), got {self.probes}")


@dataclass
class Bracket:
    """One candidate's bisection state: the largest scale seen meeting the SLOs (``ok``),
    the smallest seen missing them (``fail``), the probes run."""

    rules: LoadSearch
    ok: float = math.nan
    fail: float = math.nan
    probes: int = 0
    seen: dict[float, bool] = field(default_factory=dict)

    def next(self) -> list[float]:
        """The scales to probe next (both ends first, then the midpoint); [] when done."""
        r = self.rules
        if not self.seen:
            return [r.low, r.high]
        if self.bound:
            return []
        return [(self.ok + self.fail) / 2]

    def record(self, scale: float, meets: bool) -> None:
        self.seen[scale] = meets
        self.probes += 1
        if meets and not self.ok >= scale:  # NaN compares False: the first meeting probe
            self.ok = scale
        if not meets and not self.fail <= scale:
            self.fail = scale

    @property
    def bound(self) -> str:
        """Why the search ended ("" while it goes on; see the module docstring)."""
        r = self.rules
        if r.low not in self.seen or r.high not in self.seen:
            return ""
        if not self.seen[r.low]:
            return "none"
        if self.seen[r.high]:
            return "high"
        if self.fail - self.ok <= r.tol:
            return "tol"
        return "probes" if self.probes >= r.probes else ""


def bisect(meets: Callable[[float], bool], rules: LoadSearch) -> Bracket:
    """The search on one candidate, probing ``meets`` in this process (the rounds of
    :func:`search_loads` without an executor)."""
    b = Bracket(rules)
    while scales := b.next():
        for s in scales:
            b.record(s, meets(s))
    return b


def trace_rate(q: Question) -> float:
    """Requests per second of ``q``'s trace at scale 1 (see the module docstring)."""
    import numpy as np

    from sim.config import ServingParams
    from sim.scenarios.serving import trace_tables

    w = ServingParams(model=q.model, trace=q.trace, requests=q.requests,
                      block_tokens=q.block_tokens)  # fmt: skip
    t = np.sort(trace_tables(w, q.seed)[0].column("arrival_s").to_numpy())
    span = float(t[-1] - t[0]) if len(t) else 0.0
    if len(t) < 2 or span <= 0:
        raise ConfigError(f"--max-load: the trace {q.trace!r} has no arrival rate to scale "
                          f"({len(t)} requests over {span:g} s)")  # fmt: skip
    return (len(t) - 1) / span


def check_question(q: Question) -> None:
    """A load search needs a request trace with a rate and at least one latency SLO."""
    if q.trace in ("long_doc", "sparse_decode"):
        raise ConfigError(f"--max-load: --trace {q.trace} has no arrival rate to scale "
                          "(conversation or a request trace file)")  # fmt: skip
    if not q.slos():
        raise ConfigError("--max-load: needs an SLO to meet (--ttft-p99, --tpot-p99)")


def point_of(row: dict[str, Any]) -> Point:
    hw = Hardware(str(row["ssd_model"]), int(row["ssds"]), int(row["dram_modules"]),
                  float(row["dram_gib"]), int(row.get("gpus", 0) or 0))  # fmt: skip
    replicas = row.get("replicas", 0)
    if replicas != replicas or not replicas:  # NaN in a table mixing both kinds
        return Point(str(row["design"]), hw)
    return Point(str(row["design"]), hw, int(replicas), str(row["router"]))


def question_of(q: Question, row: dict[str, Any]) -> Question:
    """``q`` on the row's base profile (a plan over several bases names it in ``base``)."""
    base = row.get("base")
    return replace(q, base=str(base)) if isinstance(base, str) and base else q


def search_loads(
    q: Question,
    rows: pd.DataFrame,
    rules: LoadSearch,
    executor: Executor | None = None,
    store: ResultStore | None = None,
    fn: Callable[[Question, Point], dict[str, Any]] = evaluate,
) -> pd.DataFrame:
    """``max_load_*`` columns, one row per ``key`` of the ``ok`` rows of ``rows``."""
    executor = executor or LocalExecutor(1)
    store = store if store is not None else ResultStore()
    ok = [r for r in rows.to_dict("records") if r.get("status") == "ok"]
    cands = {r["key"]: point_of(r) for r in ok}
    bases = {r["key"]: question_of(q, r) for r in ok}  # each candidate on its base
    brackets = {k: Bracket(rules) for k in cands}
    probes: dict[tuple[str, float], dict[str, Any]] = {}
    while True:
        todo = [(k, s) for k, b in brackets.items() for s in b.next()]
        if not todo:
            break
        calls, where = [], []
        for k, s in todo:
            qs = replace(bases[k], arrival_scale=s)
            row = store.get(point_key(qs, cands[k]))
            if row is None:
                calls.append((qs, cands[k]))
                where.append((k, s))
            else:
                probes[(k, s)] = row
        for i, row in executor.run(fn, calls):
            store.put(row)
            probes[where[i]] = row
        for k, s in todo:
            brackets[k].record(s, bool(with_slos(q, probes[(k, s)])["meets_slo"]))
    rate = trace_rate(q)
    out = []
    for k, b in brackets.items():
        best = probes.get((k, b.ok), {})
        out.append({
            "key": k, "max_load_scale": b.ok, "max_load_req_s": b.ok * rate,
            "max_load_tok_s": float(best.get("throughput_tok_s", math.nan)),
            "max_load_fail_scale": b.fail, "max_load_bound": b.bound,
            "max_load_probes": b.probes,
        })  # fmt: skip
    return pd.DataFrame(out, columns=COLUMNS)


COLUMNS = ("key", "max_load_scale", "max_load_req_s", "max_load_tok_s", "max_load_fail_scale",
           "max_load_bound", "max_load_probes")  # fmt: skip


def add_unit_costs(df: pd.DataFrame) -> pd.DataFrame:
    """``usd_per_req_s`` and ``usd_per_tok_s``: the machine's price (``cost_usd``, a
    purchase price: the price table holds no hourly prices) over the requests/s and
    output tokens/s it serves at its largest load within the SLOs; with ``usd_per_hour``
    (:func:`sim.capacity.prices.add_hourly`) also ``usd_per_mtok``: the amortised price
    of a million output tokens served at that load."""
    out = df.copy()
    out["usd_per_req_s"] = out["cost_usd"] / out["max_load_req_s"]
    out["usd_per_tok_s"] = out["cost_usd"] / out["max_load_tok_s"]
    if "usd_per_hour" in out:
        out["usd_per_mtok"] = out["usd_per_hour"] / (out["max_load_tok_s"] * 3600) * 1e6
    return out

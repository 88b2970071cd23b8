"""What would flip a verdict: each assumption at its range ends, one at a time.

An *assumption* is a number kvtier sets without a measurement, with the range
it could plausibly take (:class:`Knob`): a hardware profile's
(``assumptions:`` in its YAML, :class:`hwprofiles.schema.Assumption`), a
workload parameter of the scenario's kind that the scenario leaves at its
default or sets to the assumed value (:class:`sim.registry.WorkloadAssumption`,
the host thread counts of :mod:`sim.scenarios.host_threads`:
``workload.select_threads``; Swarm's ``workload.dram_budget``,
:mod:`sim.scenarios.swarm_budget`), or a design
parameter of the scenario's kind that a variant leaves at its assumed value
(:meth:`sim.registry.Registry.assume`, e.g. LMCache's per-object
``object_us``).  :func:`sensitivity` runs the scenario once as it is and then
with each assumption at its low and its high end, every other number as it
is, each run an independent simulation on a :class:`sim.parallel.Executor`
(the local process pool, or Ray), design point by design point: a point is
simulated again at a range end only where the end changes a number its run as
given read (:mod:`sim.reads`), and once per distinct configuration (the results
are those of rerunning the whole scenario, bit for bit; ``tests/sim/test_reads.py``).

The comparison turns on one summary column, the *headline*
(:func:`headline_of`: the scenario's ``headline:``, else its kind's,
:class:`sim.registry.Kind`: tokens/s for the decode kinds, mean TTFT for
serving); a column of a rate (``*_per_s``, ``*gbps``, hit rates, recall) is
better higher, any other (a time) better lower.  A *design* is a variant, its
points (``design | 8K | ...``, :func:`sim.factors.expand_matrix`) folded into
one figure: the geometric mean of its headline over its points (every point
weighs the same, whatever its scale).  Per assumption, :func:`tornado` gives
each design's figure at low, base and high, the ratio of the base run's top
design to its second (>= 1 at base, < 1 where the second wins), whether the
ranking of the designs *flips* (a pair of designs ordered one way in the base
run is ordered the other way at either end; figures within :data:`TIE_REL` of each
other are *tied*, neither ahead, and a pair that goes from ordered to tied or back
has not flipped; a design with *no figure* at an end, out of memory or no positive
headline, is not ranked there, so its place cannot flip, and the report names it
with the reason) and whether
the ratio *moves* by more than :data:`MOVE`; the rows are sorted by
effect, the largest change of the log ratio.  An assumption that flips or
moves is *fragile*.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hwprofiles import HardwareProfile
from hwprofiles.assume import with_value
from sim.config import ConfigError, ScenarioConfig, Variant
from sim.parallel import Executor
from sim.registry import WORKLOADS, WorkloadAssumption

# a headline ratio that moves by more than this share at a range end is fragile (kvtier
# the threshold: the share beyond which a seed figure is reported as "off")
MOVE = 0.25
# two figures within this share of the larger are tied: the resolution of a figure.  It
# is the 6 significant digits the report's CSV and the recorded passes quote (a share of
# 1e-6), far above a simulated time's float noise (~1e-12 relative: the same events
# summed in another order) and far below the closest lead a pass has measured between
# designs that do different work (swarm-maintenance's dram_budget 0.15: 4e-5, 40x it).
TIE_REL = 1e-6
BASE = "(as given)"  # the assumption column of the run with every number as given
ENDS = ("low", "base", "high")
DESIGN_KEY = "design_params"
WORKLOAD_KEY = "workload"  # a kind's workload parameter (Kind.assumptions): workload.P
_HIGHER = ("_per_s", "gbps", "hit_rate", "recall", "speedup")


@dataclass(frozen=True)
class Knob:
    """One assumption: ``name`` (a profile key path, or ``design_params.P``), its
    value as given and its plausible range."""

    name: str
    value: float
    low: float
    high: float
    why: str


def knobs(cfg: ScenarioConfig, profile: HardwareProfile, only: Sequence[str] = ()) -> list[Knob]:
    """The assumptions a sensitivity run of ``cfg`` on ``profile`` varies: the
    profile's, then the design parameters some variant leaves at their assumed
    value; only those named in ``only`` if given.  None is a ConfigError."""
    from hwprofiles.assume import field_value

    out = [
        Knob(a.field, field_value(profile, a.field), a.low, a.high, a.why)
        for a in profile.assumptions
    ]
    entry = WORKLOADS.entry(cfg.workload.kind)
    for w in entry.kind.assumptions if entry.kind is not None else ():
        if _workload_assumed(cfg, w):
            low, high = w.range_on(profile)
            value = float(w.at if w.at is not None else w.value(cfg.workload, profile))
            out.append(Knob(f"{WORKLOAD_KEY}.{w.param}", value, low, high, w.why))
    designs = entry.designs
    for a in designs.assumptions() if designs is not None else ():
        if _assumed_variants(cfg, a.param, a.value):
            out.append(Knob(f"{DESIGN_KEY}.{a.param}", a.value, a.low, a.high, a.why))
    if only:
        names = [k.name for k in out]
        for name in only:
            if name not in names:
                known = ", ".join(names) or "none"
                raise ConfigError(f"--assumptions: no assumption '{name}' here (known: {known})")
        out = [k for k in out if k.name in only]
    if not out:
        raise ConfigError(
            f"--sensitivity: {profile.name} names no assumptions (its assumptions: block) and "
            f"no design parameter of {cfg.name} is one: nothing to vary"
        )
    return out


def _workload_assumed(cfg: ScenarioConfig, w: WorkloadAssumption) -> bool:
    """The scenario leaves workload field ``w.param`` at its Params default, or sets
    it to the assumed value ``w.at`` where one is given (a scenario that sets another
    value has made its own choice), and some variant does not override it; or, where
    ``w.at`` is given, some variant sets exactly ``w.at`` (KVDrive's ``pinned_mb``,
    which the scenarios give per variant)."""
    if _variants_at(cfg, w):
        return True
    assumed = w.at if w.at is not None else getattr(type(cfg.workload)(), w.param)
    if getattr(cfg.workload, w.param) != assumed:
        return False
    return any(w.param not in dict(v.overrides) for v in cfg.variants)


def _variants_at(cfg: ScenarioConfig, w: WorkloadAssumption) -> set[str]:
    """The variants that set workload field ``w.param`` to the assumed ``w.at``."""
    if w.at is None:
        return set()
    return {v.name for v in cfg.variants if dict(v.overrides).get(w.param, None) == w.at}


def _workload_assumption(cfg: ScenarioConfig, param: str) -> WorkloadAssumption | None:
    kind = WORKLOADS.entry(cfg.workload.kind).kind
    return next((w for w in kind.assumptions if w.param == param), None) if kind else None


def _assumed_variants(cfg: ScenarioConfig, param: str, value: float) -> list[str]:
    """The variants whose design leaves ``param`` at ``value``."""
    designs = WORKLOADS.entry(cfg.workload.kind).designs
    out = []
    for v in cfg.variants:
        p = cfg.variant_params(v)
        if getattr(designs.params(p.design, p.design_params), param) == value:
            out.append(v.name)
    return out


def apply(
    cfg: ScenarioConfig, profile: HardwareProfile, knob: Knob, value: float
) -> tuple[ScenarioConfig, HardwareProfile]:
    """The scenario and profile with ``knob`` at ``value``: the profile's number,
    the scenario's workload parameter (every variant that does not override it), or
    the design parameter of every variant that leaves it at its assumed value."""
    if knob.name.startswith(f"{WORKLOAD_KEY}."):
        field = knob.name.removeprefix(f"{WORKLOAD_KEY}.")
        typed = int(value) if isinstance(getattr(cfg.workload, field), int) else value
        w = _workload_assumption(cfg, field)
        workload = cfg.workload
        if w is None or w.at is None or getattr(workload, field) == w.at:
            workload = dataclasses.replace(workload, **{field: typed})
        at = _variants_at(cfg, w) if w is not None else set()
        variants = tuple(
            Variant(v.name, tuple((k, typed if k == field else x) for k, x in v.overrides))
            if v.name in at
            else v
            for v in cfg.variants
        )
        return dataclasses.replace(cfg, workload=workload, variants=variants), profile
    if not knob.name.startswith(f"{DESIGN_KEY}."):
        return cfg, with_value(profile, knob.name, value)
    param = knob.name.removeprefix(f"{DESIGN_KEY}.")
    assumed = set(_assumed_variants(cfg, param, knob.value))
    variants = []
    for v in cfg.variants:
        if v.name in assumed:
            dp = {**cfg.variant_params(v).design_params, param: value}
            kept = tuple(o for o in v.overrides if o[0] != DESIGN_KEY)
            v = Variant(v.name, (*kept, (DESIGN_KEY, dp)))
        variants.append(v)
    return dataclasses.replace(cfg, variants=tuple(variants)), profile


def headline_of(cfg: ScenarioConfig) -> tuple[str, bool]:
    """The scenario's headline column and whether higher is better."""
    column = cfg.headline or WORKLOADS.entry(cfg.workload.kind).kind.headline
    return column, column.endswith(_HIGHER)


@dataclass(frozen=True)
class Sensitivity:
    """The runs (every summary row, with ``assumption``, ``at`` and ``value``
    columns) and the tornado table (:func:`tornado`) of one scenario; ``unread``:
    the assumptions no design read in its run as given (so none was rerun), and
    ``simulated``: the design points simulated, of ``points`` in all (the as-given
    run's, and each range end's)."""

    headline: str
    higher: bool
    runs: pd.DataFrame
    table: pd.DataFrame
    unread: tuple[str, ...] = ()
    simulated: int = 0
    points: int = 0


UNREAD = "not read by any design"  # the verdict of an assumption no design read


def _unit(
    cfg: ScenarioConfig, variant: Variant, profile: HardwareProfile, track: bool
) -> tuple[pd.DataFrame, set[str], set[str]]:
    """One design point (an expanded variant of ``cfg``) simulated on ``profile``: its
    summary row (none where the profile cannot run it) with the ``hw`` column, and,
    with ``track``, the key paths of the profile and of the workload it read
    (:mod:`sim.reads`)."""
    from sim.reads import tracked
    from sim.registry import Unsupported
    from sim.runner import plan_variant, run_variant

    hw_reads: set[str] = set()
    wl_reads: set[str] = set()
    params = cfg.variant_params(variant)
    prof = profile
    if track:
        params, prof = tracked(params, wl_reads), tracked(profile, hw_reads)
    try:
        planned = plan_variant(cfg, variant, params, prof)
    except Unsupported:
        return pd.DataFrame(), hw_reads, wl_reads
    result = run_variant(cfg, planned, prof)
    df = pd.DataFrame([{"variant": variant.name, **result.summary}])
    df.insert(0, "hw", profile.name)
    return df, hw_reads, wl_reads


def _key(cfg: ScenarioConfig, variant: Variant, profile: HardwareProfile) -> str:
    """What decides a design point's result: its name, the seed, its workload
    parameters and the profile (a hash of their reprs)."""
    import hashlib

    text = repr((variant.name, cfg.seed, cfg.variant_params(variant), profile))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _End:
    """A design point at one range end: its scenario and variant there, the profile
    there, and the key paths of the profile and its workload the end changes."""

    cfg: ScenarioConfig
    variant: Variant | None  # None: the end reshapes the scenario (always simulated)
    profile: HardwareProfile
    hw_diff: frozenset[str]
    wl_diff: frozenset[str]


def _point_pass(
    cfg: ScenarioConfig, variant: Variant, profile: HardwareProfile, ends: Sequence[_End]
) -> tuple[pd.DataFrame, list[pd.DataFrame | None], int]:
    """One design point as given and at every range end, in one process (so the
    offline builds its runs share, a trace or an index, are made once: the caches
    are exact, :mod:`sim.policies.kvdrive.memo`): its summary as given, at each end
    its summary or None where the end changes no number the run as given read (the
    summary as given holds), and how many runs it simulated."""
    from sim.reads import was_read

    base, hw_reads, wl_reads = _unit(cfg, variant, profile, True)
    seen = {_key(cfg, variant, profile): base}
    out: list[pd.DataFrame | None] = []
    for e in ends:
        if e.variant is not None and not (
            any(was_read(x, hw_reads) for x in e.hw_diff)
            or any(was_read(x, wl_reads) for x in e.wl_diff)
        ):
            out.append(None)
            continue
        if e.variant is None:
            out.append(_whole(e.cfg, variant.name, e.profile))
            continue
        key = _key(e.cfg, e.variant, e.profile)
        if key not in seen:
            seen[key] = _unit(e.cfg, e.variant, e.profile, False)[0]
        out.append(seen[key])
    return base, out, len(seen)


def _whole(cfg: ScenarioConfig, name: str, profile: HardwareProfile) -> pd.DataFrame:
    """Design point ``name`` of ``cfg`` (whose expansion differs from the scenario
    as given), simulated; no row where the end has no such point."""
    from sim.factors import expand_matrix

    got = [v for v in expand_matrix(cfg) if v.name == name]
    return _unit(cfg, got[0], profile, False)[0] if got else pd.DataFrame()


def sensitivity(
    cfg: ScenarioConfig,
    profile: HardwareProfile,
    executor: Executor,
    only: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> Sensitivity:
    """Run ``cfg`` on ``profile`` as given and with each assumption (:func:`knobs`)
    at each end of its range, on ``executor``; the runs and their tornado table.

    Exactly, at the cost of the design points an assumption can reach.  Each design
    point (an expanded variant) is one call of the executor (:func:`_point_pass`):
    it runs as given, recording the key paths of the profile and of the workload it
    reads (:mod:`sim.reads`); at a range end whose changed paths
    (:func:`sim.reads.changed`) it did not read it keeps its result as given (a
    run never moves with a number it does not read); the rest are simulated once
    per distinct effective configuration (:func:`_key`: an end that gives the point
    its parameters and profile as given, or two ends that give it the same, share
    one simulation).  An assumption that no point read is reported as such
    (:data:`UNREAD`)."""
    from sim.factors import expand_matrix
    from sim.reads import changed

    ks = knobs(cfg, profile, only)
    units = expand_matrix(cfg)
    names = [u.name for u in units]
    ends = [(k, e, *apply(cfg, profile, k, getattr(k, e))) for k in ks for e in ("low", "high")]
    calls: list[tuple] = []
    per_end = []
    for _, _, c2, p2 in ends:
        there = {u.name: u for u in expand_matrix(c2)}
        per_end.append((c2, p2, frozenset(changed(profile, p2)), list(there) == names, there))
    for u in units:
        mine = []
        for c2, p2, hw_diff, same, there in per_end:
            if not same:
                mine.append(_End(c2, None, p2, hw_diff, frozenset()))
                continue
            u2 = there[u.name]
            wl = frozenset(changed(cfg.variant_params(u), c2.variant_params(u2)))
            mine.append(_End(dataclasses.replace(c2, variants=(u2,)), u2, p2, hw_diff, wl))
        calls.append((dataclasses.replace(cfg, variants=(u,)), u, profile, mine))
    got: dict[int, tuple[pd.DataFrame, list[pd.DataFrame | None], int]] = {}
    for n, (i, res) in enumerate(executor.run(_point_pass, calls), start=1):
        got[i] = res
        if progress:
            progress(n, len(calls))
    frames = [_tagged([got[i][0] for i in range(len(units))], BASE, "base", math.nan)]
    read_by: dict[str, set[str]] = {k.name: set() for k in ks}
    for j, (k, e, _, _) in enumerate(ends):
        rows = []
        for i, u in enumerate(units):
            df = got[i][1][j]
            if df is not None:
                read_by[k.name].add(u.name.split(" | ", 1)[0])
            rows.append(got[i][0] if df is None else df)
        frames.append(_tagged(rows, k.name, e, getattr(k, e)))
    runs = pd.concat(frames, ignore_index=True)
    column, higher = headline_of(cfg)
    if column not in runs.columns:
        where = f"{cfg.source_file}: headline" if cfg.headline else "headline"
        cols = ", ".join(c for c in runs.columns if c not in ("assumption", "at", "value"))
        raise ConfigError(f"{where}: no summary column '{column}' (one of: {cols})")
    unread = tuple(k.name for k in ks if not read_by[k.name])
    table = tornado(runs, ks, column, higher, workload_groups(cfg), unread)
    simulated = sum(r[2] for r in got.values())
    points = len(units) * (1 + len(ends))
    return Sensitivity(column, higher, runs, table, unread, simulated, points)


def _tagged(frames: list[pd.DataFrame], assumption: str, at: str, value: float) -> pd.DataFrame:
    """One run's summary rows (its design points' in order) with the columns that say
    which assumption was at which end."""
    df = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    for i, (c, v) in enumerate((("assumption", assumption), ("at", at), ("value", value))):
        df.insert(i, c, v)
    return df


def design_figures(rows: pd.DataFrame, column: str) -> dict[str, float]:
    """Design (the variant's name before its first `` | ``) -> the geometric mean of
    ``column`` over its rows (its points); NaN where no row has a positive figure."""
    design = rows["variant"].str.split(" | ", n=1, regex=False).str[0]
    out: dict[str, float] = {}
    for name in dict.fromkeys(design):
        x = rows.loc[design == name, column].to_numpy(dtype=float)
        x = x[np.isfinite(x) & (x > 0)]
        out[name] = float(np.exp(np.log(x).mean())) if len(x) else math.nan
    return out


def no_figures(rows: pd.DataFrame, column: str) -> dict[str, str]:
    """Design -> why it has no figure (:func:`design_figures` NaN): "out of host memory"
    where a point of it ran out of memory (an ``oom`` column, ``oom_where`` naming
    where), else "no <column>" (rejected or NaN); designs with a figure are absent."""
    figs = design_figures(rows, column)
    design = rows["variant"].str.split(" | ", n=1, regex=False).str[0]
    out: dict[str, str] = {}
    for name, x in figs.items():
        if not math.isnan(x):
            continue
        mine = rows[design == name]
        oom = mine[mine["oom"].fillna(False).astype(bool)] if "oom" in mine else mine.iloc[:0]
        if len(oom):
            where = oom["oom_where"].iloc[0] if "oom_where" in oom else ""
            out[name] = f"out of {where} memory" if where else "out of memory"
        else:
            out[name] = f"no {column}"
    return out


def ahead(figures: dict[str, float], a: str, b: str, higher: bool) -> str | None:
    """How ``a`` stands against ``b``: ``">"`` (ahead), ``"<"``, ``"="`` (within
    :data:`TIE_REL` of each other: tied), or None where either has no figure."""
    x, y = figures.get(a, math.nan), figures.get(b, math.nan)
    if not (math.isfinite(x) and math.isfinite(y)):
        return None
    if abs(x - y) <= TIE_REL * max(abs(x), abs(y)):
        return "="
    return ">" if (x > y) == higher else "<"


def ranking(figures: dict[str, float], higher: bool) -> tuple[str, ...]:
    """Designs best first, those with no figure (NaN) last; tied designs
    (:func:`ahead`) keep the order of their names, which says nothing: only
    :func:`changes` reads two rankings, pair by pair."""
    order: list[str] = []
    for d in sorted(figures):
        if math.isnan(figures[d]):
            continue
        i = next((i for i, o in enumerate(order) if ahead(figures, d, o, higher) == ">"), None)
        order.insert(len(order) if i is None else i, d)
    return tuple(order) + tuple(sorted(d for d in figures if math.isnan(figures[d])))


def changes(
    group: Sequence[str], base: dict[str, float], now: dict[str, float], higher: bool
) -> tuple[str, str]:
    """How the designs of ``group`` (best first as given) stand at an end against the
    run as given: the best-ranked pair that *flips* (``"B ahead of A"``: A ahead as
    given, B ahead now; "" when none does), and the pairs that went from ordered to
    *tied* or back (``"A = B (tied; A ahead as given)"``, ``"B ahead of A (tied as
    given)"``).  A pair where either design has no figure, as given or now, is
    neither."""
    flip, ties = "", []
    order = ranking({d: base.get(d, math.nan) for d in group}, higher)
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            was, is_ = ahead(base, a, b, higher), ahead(now, a, b, higher)
            if was is None or is_ is None or was == is_:
                continue
            if was == "=":
                first, then = (a, b) if is_ == ">" else (b, a)
                ties.append(f"{first} ahead of {then} (tied as given)")
            elif is_ == "=":
                ties.append(f"{a} = {b} (tied; {a} ahead as given)")
            elif not flip:
                flip = f"{b} ahead of {a}"
    return flip, "; ".join(ties)


def workload_groups(cfg: ScenarioConfig) -> list[tuple[str, ...]]:
    """The scenario's designs grouped by the workloads they ran: first the group of
    the scenario's first design (its headline comparison: ``kvdrive``'s eight
    points, not the ablations run at one of them), then the rest largest first (then
    in the scenario's order): a design's workloads are its points' workload
    fields, every field but its kind's design choices (:attr:`sim.registry.Kind.design_keys`)
    and host-thread assumptions; two designs rank against each other only when they
    ran the same set (a multi-turn variant is not ranked against single-turn ones)."""
    from sim.factors import expand_matrix

    kind = WORKLOADS.entry(cfg.workload.kind).kind
    skip = {"name", "kind", "matrix", "points"}
    if kind is not None:
        skip |= {*kind.design_keys, *(a.param for a in kind.assumptions)}
    ran: dict[str, set[str]] = {}
    for v in expand_matrix(cfg):
        p = cfg.variant_params(v)
        key = repr(
            [(f.name, getattr(p, f.name)) for f in dataclasses.fields(p) if f.name not in skip]
        )
        ran.setdefault(v.name.split(" | ", 1)[0], set()).add(key)
    groups: dict[frozenset[str], list[str]] = {}
    for design, keys in ran.items():
        groups.setdefault(frozenset(keys), []).append(design)
    first = next(iter(ran), None)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: (first not in g, -len(g)))


def tornado(
    runs: pd.DataFrame,
    ks: Sequence[Knob],
    column: str,
    higher: bool,
    groups: Sequence[Sequence[str]] | None = None,
    unread: Sequence[str] = (),
) -> pd.DataFrame:
    """One row per assumption, sorted by effect (see the module docstring): the top
    two designs of the first group of ``groups`` (:func:`workload_groups`; default:
    one group of every design) and their ratio; a flip in any group of two or more."""
    base_all = design_figures(runs[runs["assumption"] == BASE], column)
    groups = [tuple(g) for g in groups] if groups is not None else [tuple(base_all)]
    ranked = [g for g in groups if len(g) >= 2]
    if not ranked:
        raise ConfigError(
            "--sensitivity: no two designs of the scenario ran the same workload; nothing to rank"
        )

    base_ranks = [ranking({d: base_all.get(d, math.nan) for d in g}, higher) for g in ranked]
    top, second = base_ranks[0][0], base_ranks[0][1]
    order = tuple(d for g in base_ranks for d in g) + tuple(
        d for g in groups if len(g) < 2 for d in g
    )
    base = base_all

    def ratio(f: dict[str, float]) -> float:
        a, b = f.get(top, math.nan), f.get(second, math.nan)
        return a / b if higher else b / a

    rows = []
    for k in ks:
        mine = runs[runs["assumption"] == k.name]
        at = {e: design_figures(mine[mine["at"] == e], column) for e in ("low", "high")}
        at["base"] = base
        r = {e: ratio(at[e]) for e in ENDS}
        swaps, ties, lost = {}, {}, {}
        for e in ("low", "high"):
            seen = [changes(g, base, at[e], higher) for g in base_ranks]
            swaps[e] = "; ".join(f for f, _ in seen if f)
            ties[e] = "; ".join(t for _, t in seen if t)
            gone = no_figures(mine[mine["at"] == e], column)
            lost[e] = ", ".join(
                f"{d} ({why})" for d, why in gone.items() if not math.isnan(base.get(d, math.nan))
            )
        flipped = [e for e in ("low", "high") if swaps[e]]
        change = [abs(math.log(r[e] / r["base"])) for e in ("low", "high")]
        moves = any(abs(r[e] / r["base"] - 1) > MOVE for e in ("low", "high"))
        row = {
            "assumption": k.name, "low": k.low, "value": k.value, "high": k.high,
            "top": top, "second": second,
            "ratio_low": r["low"], "ratio_base": r["base"], "ratio_high": r["high"],
            "flips": bool(flipped), "flips_at": "+".join(flipped),
            "swap": "; ".join(f"{e}: {swaps[e]}" for e in flipped),
            "tied_at": "+".join(e for e in ("low", "high") if ties[e]),
            "tied": "; ".join(f"{e}: {ties[e]}" for e in ("low", "high") if ties[e]),
            "no_figure_at": "+".join(e for e in ("low", "high") if lost[e]),
            "no_figure": "; ".join(f"{e}: {lost[e]}" for e in ("low", "high") if lost[e]),
            "moves": moves,
            "verdict": UNREAD if k.name in unread
            else "flips" if flipped else "moves" if moves else "holds",
            "effect": max(change), "why": k.why,
        }  # fmt: skip
        for d in order:
            for e in ENDS:
                row[f"{d} @{e}"] = at[e].get(d, math.nan)
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.sort_values(["effect", "assumption"], ascending=[False, True], ignore_index=True)


def fragile(table: pd.DataFrame) -> pd.DataFrame:
    """The assumptions that flip the ranking or move the headline ratio > :data:`MOVE`."""
    return table[table["flips"] | table["moves"]]

"""Factors: workload fields with several values, and the scenarios at their points.

One mechanism for both ways a scenario varies a workload field:

* ``kvtier sweep --factor ssds=1,2,4 --factor context_tokens=4096,8192``
  runs the whole scenario at every point of the cartesian product
  (:mod:`sim.sweep`);
* a workload's ``matrix`` (serving scenarios) runs every variant at every
  point, each point a variant named ``variant | value | value``
  (:func:`expand_matrix`);
* a workload's ``points`` (kvdrive scenarios): a *list* of points, each a
  mapping of workload fields (seed 003's (context, batch) pairs are not a
  product); every variant runs at each, named ``variant | value | value``,
  unless the variant gives its own ``points`` (``[]``: once, at the
  workload's own values) (:func:`expand_points`, :func:`check_points`).

Both go through :func:`points`: a factor's values are typed from the
workload dataclass (:func:`sim.config.factor_values`), a point's values
replace the workload's and every variant's own, and the frozen Params
check the result.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from sim.config import ConfigError, ScenarioConfig, Variant, factor_values
from sim.registry import ParamError

Point = dict[str, Any]


def grid(factors: Mapping[str, Sequence[Any]]) -> list[Point]:
    """The cartesian product, the first factor varying slowest."""
    keys = list(factors)
    return [dict(zip(keys, c, strict=True)) for c in itertools.product(*factors.values())]


def at_point(cfg: ScenarioConfig, point: Point) -> ScenarioConfig:
    """``cfg`` with the point's values set on the workload and on every
    variant (a variant's own value of a factor is replaced)."""
    try:
        workload = dataclasses.replace(cfg.workload, **point)
    except ParamError as exc:
        where = f"factor {exc.field}" if exc.field in point else f"{cfg.source_file}: {exc.field}"
        raise ConfigError(f"{where}: {exc.message} (at {point})") from None
    variants = tuple(
        Variant(v.name, tuple((k, x) for k, x in v.overrides if k not in point))
        for v in cfg.variants
    )
    return dataclasses.replace(cfg, workload=workload, variants=variants)


def points(
    cfg: ScenarioConfig, factors: Mapping[str, Sequence[Any]], passthrough: Sequence[str] = ()
) -> list[tuple[Point, ScenarioConfig]]:
    """Every point of ``factors`` (workload field -> values) with the scenario
    there, in :func:`grid` order; values are typed and checked against the
    workload dataclass, except the ``passthrough`` factors (not workload
    fields: the caller applies them)."""
    cls = type(cfg.workload)
    pinned = {k for pt in getattr(cfg.workload, "points", ()) for k in pt}
    for name in factors:  # a point's value would silently replace the factor's
        if name in pinned:
            raise ConfigError(f"factor {name}: the scenario's points set it; edit its points")
    typed = {}
    for name, values in factors.items():
        if name in passthrough:
            typed[name] = list(values)
            continue
        try:
            typed[name] = factor_values(cls, name, list(values), name)
        except ParamError as exc:
            raise ConfigError(f"factor {exc.field}: {exc.message}") from None
    out = []
    for p in grid(typed):
        out.append((p, at_point(cfg, {k: v for k, v in p.items() if k not in passthrough})))
    return out


def expand_matrix(cfg: ScenarioConfig) -> tuple[Variant, ...]:
    """Every variant at every point of its ``matrix`` (a workload field, if the
    kind has one), named ``variant | value | ...``; variants without one as they are."""
    out: list[Variant] = []
    for v in cfg.variants:
        matrix = getattr(cfg.variant_params(v), "matrix", None)
        if not matrix:
            out.append(v)
            continue
        for point, at in points(dataclasses.replace(cfg, variants=(v,)), matrix):
            (own,) = at.variants
            fixed = (*own.overrides, *point.items(), ("matrix", {}))
            out.append(Variant(" | ".join([v.name, *map(_fmt, point.values())]), fixed))
    return expand_points(cfg, out)


def expand_points(cfg: ScenarioConfig, variants: Sequence[Variant]) -> tuple[Variant, ...]:
    """Every variant at each of its ``points`` (the workload's, or its own),
    named ``variant | value | ...``, with ``points`` cleared; variants without
    points (or a kind without the field) as they are."""
    out: list[Variant] = []
    for v in variants:
        pts = getattr(cfg.variant_params(v), "points", ())
        if not pts:
            out.append(v)
            continue
        for raw in pts:
            point = _typed_point(type(cfg.workload), raw)
            (own,) = at_point(dataclasses.replace(cfg, variants=(v,)), point).variants
            kept = tuple(o for o in own.overrides if o[0] != "points")
            fixed = (*kept, *point.items(), ("points", ()))
            out.append(Variant(" | ".join([v.name, *map(_fmt, point.values())]), fixed))
    return tuple(out)


def _typed_point(cls: type, point: Mapping[str, Any], key: str = "point") -> Point:
    """A point's values typed from workload dataclass ``cls`` (:func:`factor_values`)."""
    return {n: factor_values(cls, n, [v], f"{key}.{n}")[0] for n, v in point.items()}


def check_points(p: Any) -> None:
    """``p.points`` (a workload's or a variant's): each a non-empty mapping of
    workload fields, typed as a factor's values, that makes a valid workload
    with ``p``'s other fields, no point twice; a :class:`ParamError` naming
    ``points[i].field`` otherwise."""
    seen: set[tuple] = set()
    for i, point in enumerate(p.points):
        key = f"points[{i}]"
        if not point:
            raise ParamError(key, "must be a non-empty mapping of workload fields")
        for name in ("points", "matrix"):
            if name in point:
                raise ParamError(f"{key}.{name}", f"a point cannot set {name}")
        typed = _typed_point(type(p), point, key)
        try:
            dataclasses.replace(p, points=(), **typed)
        except ParamError as exc:
            raise ParamError(f"{key}.{exc.field}", exc.message) from None
        ident = tuple(sorted(typed.items()))
        if ident in seen:
            raise ParamError(key, f"duplicate point {dict(typed)}")
        seen.add(ident)


def _fmt(x: Any) -> str:
    if isinstance(x, int) and not isinstance(x, bool) and x >= 1024 and x % 1024 == 0:
        return f"{x // 1024}K"
    return str(x)

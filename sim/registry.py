"""One registry for KV designs, serving designs and workload kinds.

Everything a scenario names -- a sparse-attention KV design (``design:
swarm``), a serving design (``design: paged-ssd``), a workload kind
(``kind: serving``), a capacity plan's sparse-decode design (``--designs
sparse-ssd``) -- is registered the same way, in one line in its own
file::

    KV_DESIGNS.register("infllm", Params, InfLLM)

a name, its frozen ``Params`` dataclass and the factory that turns a
``Params`` into the thing (a design object; for serving designs the params
*are* the design, so there is no factory; for workload kinds the factory
plans or drives one variant, see :mod:`sim.workloads`).  ``preset`` gives
field values a name starts from (an ablation, a serving configuration);
``design_params`` in a scenario override them.

Lookups validate: an unknown name lists the known ones, an unknown parameter
lists the fields, a value of the wrong type names the field, and a
``Params.__post_init__`` that raises :class:`ParamError` names its field.
Errors are :class:`RegistryError` with the key path (``design_params.radius``)
apart from the message, so the scenario loader turns them into
``FILE:LINE: key: problem``.

Which modules register is not left to import side effects: :mod:`sim.catalog`
names, per registry, the modules that fill it, and a registry imports them on
its first lookup (:meth:`Registry.fill_with`), so every lookup sees every
registration, and a command pays for importing only the families it looks
up (the serving engine never imports the sparse-decode designs, nor they
the serving ones).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class RegistryError(ValueError):
    """A name or parameter a registry rejects; ``key`` is the parameter path."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class Unsupported(ValueError):
    """The profile lacks what a workload variant needs (SSDs, GPUDirect, a peer GPU, the
    GPUs or KV heads a tensor-parallel degree divides): the variant is skipped with
    this reason, not an error in the scenario."""


class ParamError(ValueError):
    """Raised by a ``Params.__post_init__`` for one bad field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class Entry:
    """One registered name: its ``Params`` class, factory and preset values."""

    name: str
    params: type
    factory: Callable[..., Any] | None = None
    preset: Mapping[str, Any] = field(default_factory=dict)
    designs: Registry | None = None  # workload kinds: the registry their ``design`` names
    kind: Kind | None = None  # workload kinds: how a run is shown and checked


@dataclass(frozen=True)
class WorkloadAssumption:
    """A workload parameter whose value is an assumption: ``param`` (a field of the
    kind's Params; at its default the run uses ``value(params, profile)``) could
    plausibly lie anywhere in [``low``, ``high``] (``high`` a number, or a function
    of the profile: its cores, the most threads a host op can use), for the
    reason ``why``.  ``at``: the value a scenario sets to take the assumption, where
    that is not the Params default (Swarm's ``dram_budget``: 0 selects the other
    accounting, 0.2 is the assumed budget); None: the default."""

    param: str
    low: float
    high: float | Callable[[Any], float]
    why: str
    value: Callable[[Any, Any], float]
    at: float | None = None

    def range_on(self, profile: Any) -> tuple[float, float]:
        """(low, high) on ``profile``."""
        return self.low, float(self.high(profile) if callable(self.high) else self.high)


@dataclass(frozen=True)
class Kind:
    """What a workload kind does besides planning a variant, so that a new kind is
    one ``register`` line and no ``if kind ==`` elsewhere.

    ``report`` names the tables ``kvtier sim`` prints for it (the CLI holds one
    printer per report name: printing is the CLI's, and the registry cannot import
    it); ``closed_loop``: its variants are driven runs (``serving``), shown as one
    bar over the runs and one per run's simulated time, not a bar per variant's
    planning and simulation; ``headline``: the summary column its comparison turns
    on; ``limits``: what its variants need of a profile
    (:class:`sim.limits.Limits`), checked before anything is simulated; ``caps``:
    the largest value of each workload field at the reduced size the sim-vs-real
    replay of its designs runs (:func:`kvtier.compare.designs.scaled_designs`),
    empty where the kind is not replayed so."""

    report: str
    limits: Any
    closed_loop: bool = False
    caps: Mapping[str, int] = field(default_factory=dict)
    # the summary column a comparison of its designs turns on (``kvtier sim
    # --sensitivity``, :mod:`sim.sensitivity`); a scenario may name another (``headline:``)
    headline: str = "tokens_per_s"
    # its workload parameters that hold an assumption (host thread counts,
    # :mod:`sim.scenarios.host_threads`), which a sensitivity run varies
    assumptions: tuple[WorkloadAssumption, ...] = ()
    # its workload fields that are a design's choices (how it serves: I/O path, tiers,
    # instances, pipeline), not what the workload asks; variants that differ in any
    # other field ran different workloads, and a comparison ranks only designs that
    # ran the same ones (sim.sensitivity.workload_groups)
    design_keys: tuple[str, ...] = ("design", "design_params")


@dataclass(frozen=True)
class DesignAssumption:
    """A design parameter whose value is an assumption: ``param`` (a field of the
    designs' Params) at ``value`` could plausibly lie anywhere in [``low``,
    ``high``], for the reason ``why``.  The value is the one constant the presets
    use (a variant that sets the field to another value has made its own choice)."""

    param: str
    value: float
    low: float
    high: float
    why: str


class Registry:
    """Names -> :class:`Entry`; ``what`` names the family in messages
    ("KV design"), ``key`` the scenario key that names an entry ("design")."""

    def __init__(self, what: str, key: str):
        self.what = what
        self.key = key
        self._entries: dict[str, Entry] = {}
        self._fill: Callable[[], None] | None = None  # imports the modules that register
        self._assumptions: dict[str, DesignAssumption] = {}

    def assume(self, a: DesignAssumption) -> None:
        """Record that Params field ``a.param`` holds an assumption at ``a.value``
        wherever a preset or scenario leaves it there; one entry per field."""
        if a.param in self._assumptions:
            raise ValueError(f"{self.what} parameter '{a.param}' has an assumption already")
        if not a.low <= a.value <= a.high:
            raise ValueError(f"{a.param}: {a.value} outside its range [{a.low}, {a.high}]")
        self._assumptions[a.param] = a

    def assumptions(self) -> tuple[DesignAssumption, ...]:
        """The parameters recorded by :meth:`assume`, every registering module imported."""
        self._table()
        return tuple(self._assumptions.values())

    def fill_with(self, fill: Callable[[], None]) -> None:
        """Call ``fill`` (it imports every module that registers here) before
        the first lookup (:mod:`sim.catalog`)."""
        self._fill = fill

    def _table(self) -> dict[str, Entry]:
        """The entries, every registering module imported first."""
        fill, self._fill = self._fill, None
        if fill is not None:
            fill()
        return self._entries

    def register(
        self,
        name: str,
        params: type,
        factory: Callable[..., Any] | None = None,
        *,
        preset: Mapping[str, Any] | None = None,
        designs: Registry | None = None,
        kind: Kind | None = None,
    ) -> Entry:
        """Add ``name``; registering a name twice is an error."""
        if name in self._entries:
            raise ValueError(f"{self.what} '{name}' registered twice")
        if not dataclasses.is_dataclass(params) or not params.__dataclass_params__.frozen:
            raise TypeError(f"{self.what} '{name}': params must be a frozen dataclass")
        if kind is not None:
            hints = typing.get_type_hints(params)
            for k in kind.caps:
                if hints.get(k) is not int:
                    raise TypeError(f"{self.what} '{name}': cap {k!r} is no int field of params")
        entry = Entry(name, params, factory, dict(preset or {}), designs, kind)
        if entry.preset:
            self.params(entry, {})  # the preset itself must be valid
        self._entries[name] = entry
        return entry

    def names(self) -> list[str]:
        return sorted(self._table())

    def __contains__(self, name: object) -> bool:
        return name in self._table()

    def entry(self, name: str) -> Entry:
        """The entry called ``name``, or a :class:`RegistryError` listing the known."""
        table = self._table()
        if name not in table:
            known = ", ".join(self.names())
            raise RegistryError(self.key, f"unknown {self.what} {name!r} (known: {known})")
        return table[name]

    def params(
        self, name: str | Entry, overrides: Mapping[str, Any], key: str = "design_params"
    ) -> Any:
        """``name``'s Params: its preset, then ``overrides``, checked by field
        name and type (ints are accepted for floats)."""
        entry = name if isinstance(name, Entry) else self.entry(name)
        if not isinstance(overrides, Mapping):
            raise RegistryError(key, f"must be a mapping, got {overrides!r}")
        hints = typing.get_type_hints(entry.params)
        fields = [f.name for f in dataclasses.fields(entry.params) if f.init]
        values = dict(entry.preset)
        for k, v in overrides.items():
            if k not in fields:
                raise RegistryError(
                    f"{key}.{k}", f"unknown parameter of {entry.name} (one of: {', '.join(fields)})"
                )
            values[k] = checked(hints[k], v, f"{key}.{k}")
        try:
            return entry.params(**values)
        except ParamError as exc:
            raise RegistryError(f"{key}.{exc.field}", exc.message) from None
        except (TypeError, ValueError) as exc:
            raise RegistryError(key, str(exc)) from None

    def create(self, name: str, overrides: Mapping[str, Any] | None = None) -> Any:
        """The factory's product for ``name`` (the Params when there is no factory)."""
        entry = self.entry(name)
        p = self.params(entry, overrides or {})
        return entry.factory(p) if entry.factory is not None else p


def checked(tp: Any, value: Any, key: str) -> Any:
    """``value`` as type ``tp`` (bool, int, float, str, dict, list, ``X | None``)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return checked(inner[0], value, key)
        raise TypeError(f"{key}: unsupported type {tp}")  # pragma: no cover
    base = typing.get_origin(tp) or tp
    ok = isinstance(value, base) and not (base in (int, float) and isinstance(value, bool))
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise RegistryError(key, f"must be {getattr(base, '__name__', base)}, got {value!r}")
    return value


KV_DESIGNS = Registry("KV design", "design")
SERVING_DESIGNS = Registry("serving design", "design")
WORKLOADS = Registry("workload kind", "kind")
# the designs a capacity plan compares on sparse decoding: where the KV lives
SPARSE_DECODE_DESIGNS = Registry("sparse-decode design", "design")
# request routers over a serving scenario's instances (sim.fleet.router)
ROUTERS = Registry("router", "router")
# request traces drawn, not read, named by a serving workload's trace
# (sim.scenarios.mooncake_traces): each factory(requests, seed) -> a request table
REQUEST_TRACES = Registry("request trace", "trace")

"""A profile's assumptions: the number a key path names, the profile with it changed,
and the loader's checks of its ``assumptions:`` block.

A key path names one number of the profile the way error messages do:
``efficiency.tensor``, ``cpu.core_mem_gbps``, ``ssds[0].read_latency_us``,
``topology.links[3].gbps``.  :func:`with_value` rebuilds the frozen dataclasses
along the path, so the changed profile is checked by the same dataclasses.  On an
expanded fleet a node profile's path names that entry on every node, and
``storage.``-prefixed paths the storage server file's numbers on every storage node
(:func:`hwprofiles.fleet.replicas`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from hwprofiles.schema import HardwareProfile

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")
# fields that are not numbers of the machine
_NOT_ASSUMPTIONS = ("assumptions", "source_file", "name", "description")


class PathError(KeyError):
    """A key path names no number of the profile; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _steps(path: str) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for part in path.split("."):
        m = _STEP.match(part)
        if not m:
            raise PathError(
                f"'{path}' is not a key path (e.g. efficiency.tensor, ssds[0].read_gbps)"
            )
        out.append((m[1], int(m[2]) if m[2] is not None else None))
    return out


def resolve(profile: HardwareProfile, path: str) -> tuple[Any, dataclasses.Field]:
    """The dataclass holding the number ``path`` names and that number's field."""
    node: Any = profile
    steps = _steps(_paths(profile, path)[0])
    for i, (name, index) in enumerate(steps):
        fields = {f.name: f for f in dataclasses.fields(node)}
        if name not in fields or name in _NOT_ASSUMPTIONS:
            raise PathError(f"'{path}': no field '{name}' (one of: {', '.join(fields)})")
        value = getattr(node, name)
        if index is not None:
            if not isinstance(value, tuple) or index >= len(value):
                raise PathError(f"'{path}': '{name}' has no item [{index}]")
            value = value[index]
        last = i == len(steps) - 1
        if last:
            if index is not None or isinstance(value, bool) or not isinstance(value, int | float):
                raise PathError(f"'{path}' is not a number of the profile")
            return node, fields[name]
        if not dataclasses.is_dataclass(value):
            raise PathError(f"'{path}': '{name}' has no fields")
        node = value
    raise PathError(f"'{path}' is empty")  # pragma: no cover - split gives >= 1 part


def field_value(profile: HardwareProfile, path: str) -> float:
    """The number ``path`` names."""
    node, f = resolve(profile, path)
    return getattr(node, f.name)


def with_value(profile: HardwareProfile, path: str, value: float) -> HardwareProfile:
    """``profile`` with the number at ``path`` set to ``value`` (an int field keeps
    an int); every other field, the assumptions included, as it was.  A fleet's
    network number (``fleet.nic.latency_us``, ``fleet.network.nodes_per_leaf``)
    also rebuilds the links made from it (:func:`hwprofiles.fleet.relink`)."""
    node, f = resolve(profile, path)
    typed = int(value) if isinstance(getattr(node, f.name), int) else float(value)
    changed = profile
    for each in _paths(profile, path):  # on a fleet: every node's copy of the number
        changed = _replace(changed, _steps(each), typed)
    if path.startswith("fleet."):  # a fleet's network number: its links are built from it
        from hwprofiles.fleet import relink  # noqa: PLC0415 (fleet imports the schema only)

        changed = relink(changed)
    return changed


def _paths(profile: Any, path: str) -> list[str]:
    """The key paths ``path`` names in ``profile``: itself, or on an expanded fleet
    every node's copy of a node profile's entry and every storage node's of a storage
    server's (``storage.``...; :func:`hwprofiles.fleet.replicas`)."""
    if getattr(profile, "fleet", None) is None:
        return [path]
    from hwprofiles.fleet import replicas  # noqa: PLC0415 (fleet imports the schema only)

    return replicas(profile, path)


def _replace(node: Any, steps: list[tuple[str, int | None]], value: Any) -> Any:
    (name, index), rest = steps[0], steps[1:]
    old = getattr(node, name)
    if index is None:
        new = _replace(old, rest, value) if rest else value
    else:
        item = _replace(old[index], rest, value) if rest else value
        new = (*old[:index], item, *old[index + 1 :])
    return dataclasses.replace(node, **{name: new})


def check_assumptions(
    profile: HardwareProfile, where: Any, check_number: Callable[..., float | int]
) -> None:
    """Each assumption names a number of the profile once, ``low <= value <= high``,
    and both ends pass the checks the field's own value passes (``check_number``, the
    loader's: a bandwidth > 0, an integer count; and a fraction in (0, 1]); else one
    line naming the file, line and key (``where``, the loader's line map)."""
    seen: set[str] = set()
    for i, a in enumerate(profile.assumptions):
        key = f"assumptions[{i}]"
        try:
            node, f = resolve(profile, a.field)
        except PathError as exc:
            raise where.error(f"{key}.field", exc.message) from None
        if a.field in seen:
            raise where.error(f"{key}.field", f"'{a.field}' has an assumption already")
        seen.add(a.field)
        if a.low > a.high:
            raise where.error(f"{key}.low", f"low {a.low:g} is above high {a.high:g}")
        value = getattr(node, f.name)
        kind = int if isinstance(value, int) else float
        for end in ("low", "high"):
            x = check_number(where, f"{key}.{end}", f.name, getattr(a, end), kind)
            if f.metadata.get("fraction") and not 0 < x <= 1:
                raise where.error(f"{key}.{end}", f"{a.field} must be in (0, 1], got {x:g}")
        if not a.low <= value <= a.high:
            raise where.error(
                f"{key}.field",
                f"{a.field} = {value:g} lies outside its range [{a.low:g}, {a.high:g}]",
            )

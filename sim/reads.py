"""Which numbers a run reads: the key paths of a profile's and a workload's fields
that a simulation looked at, and the key paths where two configurations differ.

A simulation is a deterministic function of the values it reads.  A number it never
reads cannot move its result: the run takes the same path up to the first read of
that number, and there is none.  :func:`tracked` copies a tree of frozen dataclasses
(a :class:`hwprofiles.HardwareProfile`, a workload's params) into one whose every
field read adds the field's key path (``efficiency.tensor``, ``ssds[0].read_gbps``,
``select_threads``) to a set; :func:`changed` lists the key paths where two trees
differ.  A sensitivity run (:mod:`sim.sensitivity`) reruns a design at an
assumption's range end only where a changed path was read in its run as given.

The record errs only towards "read", never towards "not read":

- a field whose value is a dataclass or a tuple of them is a container: reading it
  records nothing, its own fields record their reads; a container whose shape
  differs (another length, another type) is a change at the container's path, and
  counts as read when anything under it was (:func:`was_read`);
- ``dataclasses.replace`` of a tracked object makes a tracked copy (same sink and
  path) without recording the fields it copies: the copy records them where the run
  reads them, a replaced field's path included.  Its ``__post_init__`` checks run
  before the copy is tracked: a check reads a field to refuse a bad value, and a
  refused value stops the run (it cannot move its result); a field the check
  derives is a field of the copy, read (and recorded) where the run uses it;
- ``asdict``, ``repr``, ``==`` and ``hash`` read every field they copy or compare
  through the same attribute access, so they record it;
- reading an object's ``__dict__`` (``vars``, ``copy``, ``pickle``) records
  everything under the object (``path.*``).

The copy compares equal to and hashes like the original (its classes are
subclasses that keep the original's name, equality and hash), so a run on it takes
the same path as a run on the original; ``tests/sim/test_reads.py`` holds a
scenario's summary on the copy to the plain run's, bit for bit.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

ALL = "*"  # a read of an object's __dict__: everything under it
_PATH = "_reads_path"
_SINK = "_reads_sink"
_SUBS: dict[type, type] = {}
_REPLACE = dataclasses.replace.__code__
# the sink and path of the tracked object dataclasses.replace is copying, for the copy
_PENDING: list[Any] = []


def _is_node(x: Any) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def _container(x: Any) -> bool:
    """A dataclass, or a non-empty tuple of dataclasses."""
    return _is_node(x) or (type(x) is tuple and len(x) > 0 and all(_is_node(y) for y in x))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _sub(cls: type) -> type:
    """A subclass of dataclass ``cls`` whose field reads are recorded (one per class)."""
    if cls in _SUBS:
        return _SUBS[cls]
    names = frozenset(f.name for f in dataclasses.fields(cls))
    compared = tuple(f.name for f in dataclasses.fields(cls) if f.compare)

    def __getattribute__(self: Any, name: str) -> Any:  # noqa: N807
        value = object.__getattribute__(self, name)
        if name in names or name == "__dict__":
            d = object.__getattribute__(self, "__dict__")
            sink = d.get(_SINK)
            if sink is not None:
                path = d[_PATH]
                if name != "__dict__" and sys._getframe(1).f_code is _REPLACE:
                    _PENDING[:] = [sink, path]  # the copy records its own reads
                elif name == "__dict__":
                    sink.add(_join(path, ALL))
                elif not _container(value):
                    sink.add(_join(path, name))
        return value

    def __eq__(self: Any, other: Any) -> Any:  # noqa: N807
        if type(other) not in (cls, _SUBS.get(cls)):
            return NotImplemented
        mine = tuple(getattr(self, n) for n in compared)
        return mine == tuple(getattr(other, n) for n in compared)

    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        pending = list(_PENDING)
        _PENDING.clear()
        init(self, *args, **kwargs)
        if pending:  # made by dataclasses.replace of a tracked object: tracked like it
            d = object.__getattribute__(self, "__dict__")
            d[_SINK], d[_PATH] = pending

    body = {
        "__getattribute__": __getattribute__,
        "__init__": __init__,
        "__hash__": cls.__hash__,
        "__qualname__": cls.__qualname__,
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
    }
    if getattr(cls, "__eq__", None) is not object.__eq__:
        body["__eq__"] = __eq__
    sub = type(cls.__name__, (cls,), body)
    _SUBS[cls] = sub
    return sub


def tracked(obj: Any, sink: set[str], path: str = "") -> Any:
    """A copy of ``obj`` (a tree of dataclasses and tuples of them) whose every field
    read adds that field's key path under ``path`` to ``sink``."""
    if _is_node(obj):
        new = object.__new__(_sub(type(obj)))
        d = object.__getattribute__(new, "__dict__")
        for f in dataclasses.fields(obj):  # not a cached value: it is worked out again
            value = object.__getattribute__(obj, f.name)
            d[f.name] = tracked(value, sink, _join(path, f.name)) if _container(value) else value
        d[_PATH] = path
        d[_SINK] = sink
        return new
    if _container(obj):
        return tuple(tracked(x, sink, f"{path}[{i}]") for i, x in enumerate(obj))
    return obj


def changed(a: Any, b: Any, path: str = "") -> set[str]:
    """The key paths where trees ``a`` and ``b`` differ: a leaf's path, or a
    container's where its shape differs (another type or length)."""
    if _is_node(a) and _is_node(b) and type(a) is type(b):
        out: set[str] = set()
        for f in dataclasses.fields(a):
            out |= changed(getattr(a, f.name), getattr(b, f.name), _join(path, f.name))
        return out
    if _container(a) and _container(b) and type(a) is tuple and len(a) == len(b):
        out = set()
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out |= changed(x, y, f"{path}[{i}]")
        return out
    if _container(a) or _container(b):
        return {path}
    same = a == b and type(a) is type(b)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        same = True  # NaN as given and NaN changed: the same value
    return set() if same else {path}


def was_read(path: str, reads: set[str]) -> bool:
    """Whether a change at ``path`` can reach a run that read ``reads``: the path
    itself was read, or something under it (a changed container), or an object
    above it was read whole (``__dict__``)."""
    if path in reads:
        return True
    under = (path + ".", path + "[")
    if any(r.startswith(under) for r in reads):
        return True
    parts = _prefixes(path)
    return any(_join(p, ALL) in reads for p in parts)


def _prefixes(path: str) -> list[str]:
    """``a.b[2].c`` -> ["", "a", "a.b", "a.b[2]"] (the objects above the field)."""
    out = [""]
    i = 0
    while i < len(path):
        if path[i] in ".[" and i > 0:
            out.append(path[:i])
        i += 1
    return out

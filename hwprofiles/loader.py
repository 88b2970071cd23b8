"""Load hardware profiles from YAML into validated frozen dataclasses.

Every user mistake raises :class:`ProfileError` with a one-line message that
names the file, the line and the key path, e.g.::

    hwprofiles/h20-8ssd.yaml:31: ssds[0].read_gbps: must be > 0, got 0

Validation rules follow the naming convention of the schema: a field whose
name ends in a bandwidth/rate/capacity unit must be positive, a ``*_us`` cost
must be non-negative, an efficiency factor (field metadata ``fraction``) lies
in (0, 1], a figure above its unit's ceiling (:data:`CEILINGS`, e.g. ``gbps`` at
100,000) is not physical, unknown keys are errors, a link's ``kind`` is one of
:data:`~hwprofiles.schema.LINK_KINDS`, and every node that a link names must
exist.  An ``assumptions:`` entry names a number of the profile and a range
around it (:mod:`hwprofiles.assume`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from hwprofiles.assume import check_assumptions
from hwprofiles.schema import LINK_KINDS, HardwareProfile, StorageServer
from kvtier.contracts.geometry import BLOCK

PROFILE_DIR = Path(__file__).resolve().parent

# "gbps" (not "_gbps"): links and DRAM modules name their bandwidth plain ``gbps``
_POSITIVE_SUFFIXES = (
    "gbps",
    "_iops",
    "_gib",
    "_kib",
    "_tflops",
    "_gflops",
    "count",
    "cores",
    "max_queue_depth",
)
_NONNEGATIVE_SUFFIXES = ("_us",)
# Ceilings: a figure above one is not physical (a typo, 1e+300), refused with the key
# named.  Each is an assumption placed one to two orders of magnitude above the
# largest real figure it bounds (shipped profiles: hbm_gbps 4,000, write_iops 2.6 M,
# capacity_gib 3,725, bf16_tflops 989, core_gflops 134, cores 112, count 8, max_io_kib
# 1,280, max_queue_depth 128, *_us 80), so no real machine meets one:
CEILINGS: dict[str, tuple[float, str]] = {
    # NVIDIA B200 datasheet: 8 TB/s of HBM3e, the fastest memory or link of a GPU server
    "gbps": (100_000.0, "100 TB/s, 12x B200's 8 TB/s HBM3e"),
    # Samsung PM1743 (PCIe 5.0) data sheet: 2,500K random 4 KiB read IOPS
    "_iops": (100e6, "40x a PCIe 5.0 SSD's 2.5 M"),
    # Solidigm D5-P5336 data sheet: 122.88 TB = 114,441 GiB, the largest SSD shipping;
    # host memory: 2 sockets x 12 DDR5 channels x 2 DIMMs x 256 GB RDIMMs = 12 TB
    "_gib": (2.0**20, "1 PiB, 9x a 122.88 TB SSD"),
    # Linux NVMe max_hw_sectors_kb (the MDTS cap) is 128-2,048 KiB on shipping drives
    "_kib": (2.0**20, "1 GiB, 512x the 2 MiB NVMe transfer limits of shipping drives"),
    # NVIDIA B200 datasheet: 4.5 PFLOPS BF16 with sparsity = 2,250 dense TFLOPS
    "_tflops": (100_000.0, "44x B200's 2,250 dense BF16 TFLOPS"),
    # one core's FP32 peak: 2 FMA units x 16 lanes (AVX-512) x 2 FLOP x ~4 GHz = 256
    "_gflops": (10_000.0, "40x an AVX-512 core's 256 GFLOP/s"),
    # GB200 NVL72: 72 GPUs in one NVLink domain; SSDs: a 2-socket server's 160 PCIe
    # 5.0 lanes (AMD EPYC 9004) attach 40 at x4
    "count": (4096, "57x the 72 GPUs of a GB200 NVL72"),
    # AMD EPYC 9965: 192 cores a socket, 384 in two
    "cores": (4096, "10x two 192-core AMD EPYC 9965"),
    # NVMe Base Specification, CAP.MQES: a queue holds at most 65,536 entries
    "max_queue_depth": (65_536, "an NVMe queue's 65,536 entries"),
    # a software cost or device latency of a second: 12,500x the shipped 80 us
    "_us": (1e6, "1 s a single I/O or call"),
}
_DUPLEX = ("full", "half")
# top-level keys the loader ignores: a place for YAML anchors (&pcie4_x4 ...)
_FREE_KEYS = ("defs",)


class ProfileError(ValueError):
    """A hardware profile is malformed; the message is one line for the user."""


class _Where:
    """Maps key paths (``ssds[0].read_gbps``) to YAML line numbers."""

    def __init__(self, path: str, root: yaml.Node | None, error: type[ValueError] = ProfileError):
        self.path = path
        self._error = error
        self.lines: dict[str, int] = {}
        if root is not None:
            self._walk(root, "")

    def _walk(self, node: yaml.Node, prefix: str) -> None:
        self.lines.setdefault(prefix, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                if key in seen:  # PyYAML would silently keep the last value
                    line = key_node.start_mark.line + 1
                    raise self._error(f"{self.path}:{line}: {key}: duplicate key")
                seen.add(key)
                self.lines.setdefault(key, key_node.start_mark.line + 1)
                self._walk(value_node, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{prefix}[{i}]")

    def error(self, key: str, message: str) -> ValueError:
        probe = key
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0]
        line = self.lines.get(probe)
        loc = f"{self.path}:{line}" if line else self.path
        return self._error(f"{loc}: {key}: {message}" if key else f"{loc}: {message}")


def _check_number(
    where: _Where, key: str, name: str, value: Any, kind: type, positive: bool = False
) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.error(key, f"must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # .inf / .nan in YAML
        raise where.error(key, f"must be a finite number, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise where.error(key, f"must be an integer, got {value!r}")
    if (positive or name.endswith(_POSITIVE_SUFFIXES)) and not value > 0:
        raise where.error(key, f"must be > 0, got {value!r}")
    if name.endswith(_NONNEGATIVE_SUFFIXES) and not value >= 0:
        raise where.error(key, f"must be >= 0, got {value!r}")
    return int(value) if kind is int else float(value)


def build_dataclass(cls: type, data: Any, where: _Where, key: str = "") -> Any:
    """Build dataclass ``cls`` from mapping ``data`` found at key path ``key``.

    Numbers are checked by unit suffix (see module docstring) or by the field
    metadata ``{"positive": True}``; unknown and missing keys are errors.
    """
    if not isinstance(data, dict):
        raise where.error(key, f"must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "source_file"}
    unknown = sorted(set(data) - set(fields) - (set(_FREE_KEYS) if not key else set()))
    if unknown:
        bad = f"{key}.{unknown[0]}" if key else str(unknown[0])
        raise where.error(bad, f"unknown key (expected one of: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{key}.{name}" if key else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise where.error(key or "", f"missing required key '{name}'")
            continue
        positive = bool(f.metadata.get("positive", False))
        kwargs[name] = _convert(hints[name], data[name], where, sub, name, positive)
        if f.metadata.get("fraction") and not 0 < kwargs[name] <= 1:
            raise where.error(sub, f"must be in (0, 1], got {data[name]!r}")
    return cls(**kwargs)


def _convert(
    tp: Any, value: Any, where: _Where, key: str, name: str, positive: bool = False
) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, where, key)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):  # a tuple: a parsed default, re-read
            raise where.error(key, f"must be a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                _convert(args[0], v, where, f"{key}[{i}]", name, positive)
                for i, v in enumerate(value)
            )
        if len(value) != len(args):
            raise where.error(key, f"must be a list of {len(args)} items, got {len(value)}")
        return tuple(
            _convert(a, v, where, f"{key}[{i}]", name, positive)
            for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if tp is dict or origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise where.error(key, f"must be a mapping with string keys, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise where.error(key, f"must be true or false, got {value!r}")
        return value
    if tp in (int, float):
        return _check_number(where, key, name, value, tp, positive)
    if tp is str:
        if not isinstance(value, str) or not value:
            raise where.error(key, f"must be a non-empty string, got {value!r}")
        return value
    if isinstance(tp, types.UnionType):  # ``X | None``: an optional block, written as X
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:  # pragma: no cover - not used by the schema
            raise TypeError(f"unsupported union type {tp}")
        return _convert(args[0], value, where, key, name, positive)
    raise TypeError(f"unsupported field type {tp!r}")  # pragma: no cover


def _check_topology(p: HardwareProfile, where: _Where) -> None:
    names = p.node_names
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise where.error("topology", f"node name '{n}' is defined twice")
        seen.add(n)
    link_names: set[str] = set()
    attached: set[str] = set()
    for i, link in enumerate(p.topology.links):
        key = f"topology.links[{i}]"
        if link.name in link_names:
            raise where.error(f"{key}.name", f"duplicate link name '{link.name}'")
        link_names.add(link.name)
        if link.kind not in LINK_KINDS:
            raise where.error(f"{key}.kind", f"must be one of {LINK_KINDS}, got {link.kind!r}")
        if link.duplex not in _DUPLEX:
            raise where.error(f"{key}.duplex", f"must be one of {_DUPLEX}, got {link.duplex!r}")
        a, b = link.between
        for j, end in enumerate((a, b)):
            if end not in seen:
                raise where.error(
                    f"{key}.between[{j}]", f"link '{link.name}' names unknown node '{end}'"
                )
        if a == b:
            raise where.error(f"{key}.between", f"link '{link.name}' connects '{a}' to itself")
        attached.update((a, b))
    for n in p.gpu_names + p.ssd_names + p.dram_names:
        if n not in attached:
            raise where.error("topology.links", f"node '{n}' is not attached to any link")


def resolve_yaml(
    source: str | Path, directory: Path, what: str, error: type[ValueError] = ProfileError
) -> Path:
    """A YAML path given by name (a file in ``directory``) or by path."""
    path = Path(source)
    if path.is_file():  # a path that exists wins over a shipped namesake
        return path
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{source}.yaml"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml")))
            raise error(f"unknown {what} '{source}' (known: {known})")
    if not path.exists():
        raise error(f"{path}: no such file")
    return path


def load_profile(source: str | Path) -> HardwareProfile:
    """Load a profile by name (``h20-8ssd``) or by path to a YAML file."""
    path = resolve_yaml(source, PROFILE_DIR, "hardware profile")
    data, where = read_yaml(path)
    if isinstance(data, dict) and "fleet" in data:
        profile = _load_fleet(data, where, path)
    else:
        profile = build_dataclass(HardwareProfile, data, where)
        profile = dataclasses.replace(profile, source_file=str(path))
    if path.stem != profile.name and path.parent == PROFILE_DIR:
        raise where.error("name", f"'{profile.name}' differs from the file name '{path.stem}'")
    _check_topology(profile, where)
    _check_capacities(profile, where)
    _check_ceilings(profile, where)
    check_assumptions(profile, where, _check_number)
    return profile


# fleet keys the loader sets from the node and storage-server profiles
_DERIVED = {"fleet": ("gpus_per_node", "ssds_per_node"),
            "fleet.storage": ("nics_per_node", "ssds_per_node")}  # fmt: skip


def _load_fleet(data: dict, where: _Where, path: Path) -> HardwareProfile:
    """A fleet file (:mod:`hwprofiles.fleet`): its nodes, and its storage nodes
    where it has any, expanded into one profile."""
    from hwprofiles.fleet import FleetFile, expand  # noqa: PLC0415 (fleet imports the schema only)

    blocks = {"fleet": data.get("fleet")}
    blocks["fleet.storage"] = blocks["fleet"].get("storage") if isinstance(
        blocks["fleet"], dict) else None  # fmt: skip
    for block, keys in _DERIVED.items():
        for k in keys:
            if isinstance(blocks[block], dict) and k in blocks[block]:
                what = "node" if block == "fleet" else "storage-server"
                raise where.error(f"{block}.{k}", f"set from the {what} profile, not written")
    ff = build_dataclass(FleetFile, data, where)
    try:
        node = load_profile(ff.fleet.node_profile)
    except ProfileError as exc:
        raise where.error("fleet.node_profile", str(exc)) from None
    server = None
    if ff.fleet.storage is not None:
        try:
            server = load_storage_server(ff.fleet.storage.node_profile)
        except ProfileError as exc:
            raise where.error("fleet.storage.node_profile", str(exc)) from None
    return expand(ff, node, where, path, server)


STORAGE_DIR = PROFILE_DIR / "storage"


def load_storage_server(source: str | Path) -> StorageServer:
    """A storage server (:class:`~hwprofiles.schema.StorageServer`) by name (a file
    in ``hwprofiles/storage/``) or by path, checked like a profile: its names, links,
    capacities, ceilings and assumptions; it holds at least one DRAM module or SSD
    and has at least one NIC, each on one of its switches."""
    path = resolve_yaml(source, STORAGE_DIR, "storage-server profile")
    data, where = read_yaml(path)
    if isinstance(data, dict) and ("gpu" in data or "fleet" in data):
        raise where.error("gpu" if "gpu" in data else "fleet",
                          "a storage server has no GPUs and is no fleet")  # fmt: skip
    server = dataclasses.replace(build_dataclass(StorageServer, data, where),
                                 source_file=str(path))  # fmt: skip
    if path.stem != server.name and path.parent == STORAGE_DIR:
        raise where.error("name", f"'{server.name}' differs from the file name '{path.stem}'")
    if not server.dram and not server.ssds:
        raise where.error("ssds", "a storage server holds no DRAM module and no SSD: no devices")
    if not server.nics:
        raise where.error("nics", "a storage server needs at least one NIC")
    for i, sw in enumerate(server.nics):
        if sw not in server.topology.switches:
            raise where.error(f"nics[{i}]", f"NIC {i} hangs off unknown switch '{sw}' "
                              f"(one of: {', '.join(server.topology.switches)})")  # fmt: skip
    _check_topology(server, where)  # type: ignore[arg-type]  (the same names and links)
    _check_capacities(server, where)  # type: ignore[arg-type]
    _check_ceilings(server, where)
    check_assumptions(server, where, _check_number)  # type: ignore[arg-type]
    return server


def list_storage_servers() -> list[str]:
    return sorted(p.stem for p in STORAGE_DIR.glob("*.yaml"))


def _check_ceilings(node: Any, where: _Where, key: str = "") -> None:
    """Every number of the profile at most its unit's :data:`CEILINGS` entry."""
    if isinstance(node, tuple):
        for i, item in enumerate(node):
            if dataclasses.is_dataclass(item):
                _check_ceilings(item, where, f"{key}[{i}]")
        return
    for f in dataclasses.fields(node):
        value, sub = getattr(node, f.name), f"{key}.{f.name}" if key else f.name
        if dataclasses.is_dataclass(value) or isinstance(value, tuple):
            _check_ceilings(value, where, sub)
            continue
        for suffix, (ceiling, why) in CEILINGS.items():
            if isinstance(value, int | float) and f.name.endswith(suffix) and value > ceiling:
                raise where.error(sub, f"must be at most {ceiling:,.0f} ({why}), got {value!r}")


def _check_capacities(p: HardwareProfile, where: _Where) -> None:
    """Every SSD and memory must hold at least one 4 KiB block (the unit of every
    plan's I/O).  A small device is legal (the emulator makes 1 MiB ones); whether
    a scenario's KV fits on it is checked per run (:mod:`sim.limits`)."""
    for i, s in enumerate(p.ssds):
        size = s.capacity_gib * 2**30
        if size < BLOCK:
            raise where.error(
                f"ssds[{i}].capacity_gib",
                f"{s.capacity_gib:g} GiB = {size:,.0f} B is less than one block ({BLOCK:,} B)",
            )
    for i, m in enumerate(p.dram):
        if m.capacity_gib * 2**30 < BLOCK:
            raise where.error(
                f"dram[{i}].capacity_gib", f"{m.capacity_gib:g} GiB is below one block"
            )


def read_yaml(path: Path, error: type[ValueError] = ProfileError) -> tuple[Any, _Where]:
    """Parse ``path``; return the data and a line map for error messages.

    Syntax errors become ``error`` (a one-line message with file and line).
    """
    shown = _display(path)
    text = _read_text(path, shown, error)
    try:
        root = yaml.compose(text, Loader=_LOADER)
        if root is not None:
            _check_size(root, shown, error)
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{shown}{line}: invalid YAML: {problem}") from None
    except RecursionError:
        raise error(f"{shown}: invalid YAML: nested too deeply") from None
    return data, _Where(shown, root, error)


# libyaml's parser where PyYAML was built with it (the wheels are): the same safe
# loader's nodes, marks and errors, about 10x faster than the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_FILE_BYTES = 16 * 2**20  # a profile or scenario is a few KiB
MAX_EXPANDED_NODES = 100_000  # nodes after expanding aliases (a shipped file has < 2,000)
MAX_DEPTH = 100  # nesting levels (a shipped file has < 10)


def _read_text(path: Path, shown: str, error: type[ValueError]) -> str:
    """The file as UTF-8 text, or one line saying why not (binary, Latin-1, UTF-16)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise error(f"{shown}: {path.stat().st_size:,} bytes, too large for a YAML file")
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror}") from None
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise error(f"{shown}: UTF-16 text; save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(
            f"{shown}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save it as UTF-8"
        ) from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise error(f"{shown}:{line}: a NUL byte: binary data, not a YAML file")
    return text


def _check_size(root: yaml.Node, shown: str, error: type[ValueError]) -> None:
    """Refuse a document whose aliases expand to more than
    :data:`MAX_EXPANDED_NODES` nodes (an alias bomb) or refer to themselves,
    counted without expanding: a node's expanded size is 1 + its children's,
    memoised per node (iterative: no recursion limit), or that nests deeper
    than :data:`MAX_DEPTH` (building its Python objects would recurse)."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 0)]
    while stack:
        node, done, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error(
                f"{shown}:{node.start_mark.line + 1}: YAML nested more than {MAX_DEPTH} levels deep"
            )
        children = _children(node)
        if done:
            open_.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_EXPANDED_NODES:
                raise error(
                    f"{shown}:{node.start_mark.line + 1}: YAML aliases expand to more than "
                    f"{MAX_EXPANDED_NODES:,} nodes (an alias bomb?)"
                )
        elif id(node) not in size:
            if id(node) in open_:
                raise error(f"{shown}:{node.start_mark.line + 1}: a YAML alias refers to itself")
            open_.add(id(node))
            stack.append((node, True, depth))
            stack.extend((c, False, depth + 1) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


__all__ = [
    "CEILINGS",
    "PROFILE_DIR",
    "ProfileError",
    "build_dataclass",
    "list_profiles",
    "list_storage_servers",
    "load_profile",
    "load_storage_server",
    "read_yaml",
    "resolve_yaml",
]

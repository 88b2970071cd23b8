"""Write hardware profiles that kvtier derived (emulated, calibrated) as cited YAML.

The emulator and calibration produce a :class:`~hwprofiles.schema.HardwareProfile`
by editing one in Python (``dataclasses.replace``); :func:`write_profile`
renders it in the house format -- every number with a source comment, a
header saying how it was derived -- and loads the file back with
:func:`hwprofiles.loader.load_profile`, so what is written is what the
simulator will read and a schema violation fails here, not later.

Numbers carried over unchanged get the comment ``default_comment`` (for
example "as in h20-8ssd.yaml"); derived numbers get theirs from
``comments``, keyed by path (``ssds[0].read_gbps``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hwprofiles.loader import load_profile
from hwprofiles.schema import HardwareProfile, LinkSpec, SsdGroup, Topology
from real.capacity import Rates

_ORDER = ("name", "description", "gpu", "cpu", "dram", "ssds", "software", "topology")


def fmt_number(value: float | int) -> str:
    """A number as YAML that PyYAML reads back as a number (no bare exponents)."""
    if isinstance(value, bool):
        raise TypeError("bool is not a number here")
    if isinstance(value, int) or (math.isfinite(value) and float(value).is_integer()):
        return str(int(value))
    text = f"{value:.6g}"
    if "e" in text:
        text = f"{value:.9f}".rstrip("0")
    return text


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return fmt_number(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r}")


def _fields(obj: Any) -> list[tuple[str, Any]]:
    return [
        (f.name, getattr(obj, f.name))
        for f in dataclasses.fields(obj)
        if f.name != "source_file" and not (f.name == "duplex" and obj.duplex == "full")
    ]


def _flow(obj: Any) -> str:
    return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in _fields(obj)) + "}"


def dump_profile(
    profile: HardwareProfile,
    header: Sequence[str],
    comments: Mapping[str, str],
    default_comment: str,
) -> str:
    """The profile as YAML text: header comment lines, then the schema's keys in order."""
    lines = [f"# {h}" for h in header]

    def emit(text: str, key: str, numeric: bool) -> None:
        note = comments.get(key) or (default_comment if numeric else "")
        lines.append(f"{text}  # {note}" if note else text)

    for top in _ORDER:
        value = getattr(profile, top)
        if isinstance(value, str):
            emit(f"{top}: {_scalar(value)}", top, False)
        elif top == "topology":
            lines.append("topology:")
            emit(f"  switches: {_scalar(value.switches)}", "topology.switches", False)
            lines.append("  links:")
            for i, link in enumerate(value.links):
                emit(f"    - {_flow(link)}", f"topology.links[{i}]", True)
        elif isinstance(value, tuple):  # dram, ssds: lists of flat mappings
            lines.append(f"{top}:" if value else f"{top}: []")
            for i, item in enumerate(value):
                for j, (k, v) in enumerate(_fields(item)):
                    lead = "  - " if j == 0 else "    "
                    key = f"{top}[{i}].{k}"
                    emit(f"{lead}{k}: {_scalar(v)}", key, isinstance(v, int | float))
        else:
            lines.append(f"{top}:")
            for k, v in _fields(value):
                emit(f"  {k}: {_scalar(v)}", f"{top}.{k}", isinstance(v, int | float))
    return "\n".join(lines) + "\n"


def write_profile(
    profile: HardwareProfile,
    path: str | Path,
    header: Sequence[str],
    comments: Mapping[str, str],
    default_comment: str,
) -> HardwareProfile:
    """Write ``profile`` to ``path`` and return it as loaded back (validated)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_profile(profile, header, comments, default_comment))
    return load_profile(path)


def first_ssds(profile: HardwareProfile, n: int) -> HardwareProfile:
    """The profile with only its first ``n`` SSDs (``ssd0..ssd{n-1}``) and their links."""
    groups: list[SsdGroup] = []
    left = n
    for g in profile.ssds:
        if left <= 0:
            break
        take = min(left, g.count)
        groups.append(dataclasses.replace(g, count=take))
        left -= take
    kept = set(profile.ssd_names[:n])
    dropped = set(profile.ssd_names) - kept
    links = tuple(ln for ln in profile.topology.links if not dropped.intersection(ln.between))
    return dataclasses.replace(
        profile,
        ssds=tuple(groups),
        topology=dataclasses.replace(profile.topology, links=links),
    )


def replace_ssds(
    profile: HardwareProfile,
    groups: Sequence[SsdGroup],
    links: Sequence[LinkSpec],
    switches: Sequence[str] = (),
) -> HardwareProfile:
    """The profile with new SSD groups: links touching old SSDs are replaced by ``links``."""
    old = set(profile.ssd_names)
    kept = [ln for ln in profile.topology.links if not old.intersection(ln.between)]
    topology = Topology(
        switches=tuple(profile.topology.switches) + tuple(switches),
        links=tuple(kept) + tuple(links),
    )
    return dataclasses.replace(profile, ssds=tuple(groups), topology=topology)


def scaled_profile(
    source: HardwareProfile,
    n: int,
    scale: float,
    size: int,
    latency_us: tuple[float, float] | None = None,
) -> HardwareProfile:
    """``source`` with its first ``n`` SSDs scaled by ``scale``, ``size`` bytes each, and
    (read, write) ``latency_us`` where given (else the source's)."""
    sub = first_ssds(source, n)
    groups = tuple(
        dataclasses.replace(
            g,
            model=f"{g.model} (emulated x{scale:.4g})",
            capacity_gib=size / 2**30,
            read_gbps=g.read_gbps * scale,
            write_gbps=g.write_gbps * scale,
            read_iops=round(g.read_iops * scale),
            write_iops=round(g.write_iops * scale),
            read_latency_us=latency_us[0] if latency_us else g.read_latency_us,
            write_latency_us=latency_us[1] if latency_us else g.write_latency_us,
        )
        for g in sub.ssds
    )
    return dataclasses.replace(
        sub,
        name=f"{source.name}-emu{n}",
        description=f"{source.description} -- {n} emulated SSDs scaled x{scale:.4g}",
        ssds=groups,
    )


def write_scaled_profile(
    source: HardwareProfile,
    scaled: HardwareProfile,
    path: Path,
    *,
    scale: float,
    held_by: str,
    sustainable: Rates | None,
    backing: Path,
    measured_latency: bool = False,
) -> HardwareProfile:
    """Write the emulator's scaled profile with its derivation in the header and comments."""
    src = Path(source.source_file).name or f"{source.name}.yaml"
    header = [
        f"Derived by `kvtier real emulate` on {dt.date.today().isoformat()} from {src}",
        f"(its seed and citations apply: see that file): {len(scaled.ssd_names)} SSDs,",
        f"bandwidth and IOPS scaled x{scale:.6g} and held by {held_by};",
        "capacity is the emulated device size; "
        + ("latency is the emulated device's own;" if measured_latency else "latency,")
        + " queue depth, links, GPUs, DRAM and software costs are the source's.",
    ]
    if sustainable is not None:
        s = sustainable
        header += [
            f"Backing store ({backing}) sustained, all devices at once: "
            f"{s.read_bps / 1e6:.1f} MB/s read, {s.write_bps / 1e6:.1f} MB/s write,",
            f"{s.read_iops:.0f} / {s.write_iops:.0f} IOPS; QD1 4 KiB latency of one device "
            f"{s.read_latency_us:.1f} / {s.write_latency_us:.1f} us (fio, capacity/*.json)",
        ]
    comments = {}
    first = 0
    for i, g in enumerate(scaled.ssds):
        orig = source.ssd(f"ssd{first}")
        first += g.count
        for key in ("read_gbps", "write_gbps", "read_iops", "write_iops"):
            value = fmt_number(getattr(orig, key))
            comments[f"ssds[{i}].{key}"] = f"{src}: {value} x scale {scale:.6g} (emulated)"
        comments[f"ssds[{i}].capacity_gib"] = "size of the emulated device"
        if measured_latency:
            for d in ("read", "write"):
                comments[f"ssds[{i}].{d}_latency_us"] = (
                    f"measured: QD1 4 KiB {d} of an emulated device (capacity/rand{d}-qd1.json)"
                )
    return write_profile(scaled, path, header, comments, f"as in {src}")

"""Fit a hardware profile's SSD parameters to fio measurements (pure, no I/O).

Input: :class:`~real.fio.FioRun` s of a calibration sweep -- each the
summary of one fio JSON file: one device alone, or all devices at once.
Output: per device the schema's :class:`~hwprofiles.schema.SsdGroup` numbers,
each with the fio file(s) it came from, and the aggregate that reveals a
shared upstream link.

The rules follow the three regimes the simulator models (DESIGN.md, fidelity
principle 3), per direction (read, write):

* bandwidth: the plateau at large blocks -- the highest rate of any point
  with ``bs >= 128 KiB`` (all points if the sweep has none) whose queue
  holds at most 8 MiB (``QD x bs``; all large points if none does): fio
  counts a whole first queue at once when a throttled device lets it
  through, which over a short run reads above the device's rate;
* IOPS: the plateau at the smallest block (4 KiB) -- its highest I/O rate;
* latency: mean completion latency (fio ``clat``) at the smallest block, QD1;
* saturating queue depth: for every block size swept at several depths, the
  smallest depth reaching ``saturation`` (90%) of that block's best rate;
  ``max_queue_depth`` is the largest of these over blocks and directions.

A device with only plateau points (the quick sweep measures the others at
their corners) takes latency and queue depth from a fully swept device.

Aggregate: if all devices at once move less than ``threshold`` (90%) of the
sum of the devices alone, the difference is a shared bottleneck upstream of
the devices and its capacity (the aggregate rate) becomes a link.

:func:`calibrated_profile` puts the fits into a profile: like devices (rates
within 15%) share an SSD group, each device gets a link to where the base
profile attaches its SSDs -- through an ``ssdsw`` switch whose uplink has
the aggregate capacity when a shared bottleneck was found -- and every
number's comment names its fio file(s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hwprofiles.schema import HardwareProfile, LinkSpec, SsdGroup
from real.errors import RealError
from real.fio import FioRun
from real.profile_yaml import replace_ssds

LARGE_BS = 128 << 10
MAX_QUEUED = 8 << 20  # bytes in flight per job for a bandwidth point
DIRECTIONS = ("read", "write")


@dataclass(frozen=True)
class DeviceFit:
    """One device's fitted numbers (schema units) and their provenance.

    ``sources`` maps a field name to the fio JSON file(s) it was read from.
    """

    read_gbps: float
    write_gbps: float
    read_iops: float
    write_iops: float
    read_latency_us: float
    write_latency_us: float
    max_queue_depth: int
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UpstreamFit:
    """All devices at once versus the sum of each alone (GB/s)."""

    read_gbps: float
    write_gbps: float
    alone_read_gbps: float
    alone_write_gbps: float
    limited: bool
    sources: Mapping[str, str] = field(default_factory=dict)


def _direction(runs: Sequence[FioRun], d: str) -> list[FioRun]:
    return [r for r in runs if r.is_read == (d == "read") and r.stats.total_ios > 0]


def _plateau_points(runs: Sequence[FioRun]) -> list[FioRun]:
    large = [r for r in runs if r.bs >= LARGE_BS] or list(runs)
    return [r for r in large if r.bs * r.iodepth <= MAX_QUEUED] or large


def _best(runs: Sequence[FioRun], key: str) -> FioRun:
    return max(runs, key=lambda r: (getattr(r.stats, key), -r.iodepth))


def saturating_depth(runs: Sequence[FioRun], saturation: float = 0.9) -> int | None:
    """Smallest queue depth reaching ``saturation`` of the best rate, over block sizes
    swept at two or more depths (the largest such depth); None if none was swept."""
    depths = []
    for bs in sorted({r.bs for r in runs}):
        points = sorted((r for r in runs if r.bs == bs), key=lambda r: r.iodepth)
        if len({r.iodepth for r in points}) < 2:
            continue
        top = max(r.stats.bw_bps for r in points)
        depths.append(next(r.iodepth for r in points if r.stats.bw_bps >= saturation * top))
    return max(depths) if depths else None


def fit_device(
    runs: Sequence[FioRun], saturation: float = 0.9, fallback: DeviceFit | None = None
) -> DeviceFit:
    """Fit one device from the runs that measured it alone (see the module doc)."""
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    depths: list[int] = []
    depth_files: list[str] = []
    for d in DIRECTIONS:
        mine = _direction(runs, d)
        if not mine:
            raise RealError(f"no {d} points to fit in {sorted({r.source for r in runs})}")
        best = _best(_plateau_points(mine), "bw_bps")
        values[f"{d}_gbps"], sources[f"{d}_gbps"] = best.stats.bw_bps / 1e9, best.source
        small_bs = min(r.bs for r in mine)
        small = [r for r in mine if r.bs == small_bs]
        best = _best(small, "iops")
        values[f"{d}_iops"], sources[f"{d}_iops"] = best.stats.iops, best.source
        qd1 = [r for r in small if r.iodepth == 1]
        key = f"{d}_latency_us"
        if qd1:
            values[key], sources[key] = qd1[0].stats.clat_mean_us, qd1[0].source
        elif fallback is not None:
            values[key], sources[key] = getattr(fallback, key), fallback.sources.get(key, "")
        else:
            raise RealError(f"no QD1 {small_bs}-byte {d} point to fit the latency")
        depth = saturating_depth(mine, saturation)
        if depth is not None:
            depths.append(depth)
            depth_files.append(_sweep_name(mine))
    if depths:
        qd, sources["max_queue_depth"] = max(depths), ", ".join(depth_files)
    elif fallback is not None:
        qd = fallback.max_queue_depth
        sources["max_queue_depth"] = fallback.sources.get("max_queue_depth", "")
    else:
        raise RealError("no block size swept at several queue depths: cannot fit the queue depth")
    return DeviceFit(max_queue_depth=int(qd), sources=sources, **values)


def _sweep_name(runs: Sequence[FioRun]) -> str:
    """A short name for the files of a QD sweep (``ssd0-randread-*-qd*.json``)."""
    names = sorted({r.source for r in runs})
    stem = names[0].split("-")
    return f"{stem[0]}-{stem[1]}-*-qd*.json" if len(stem) >= 3 else ", ".join(names)


def compress_names(names: Sequence[str]) -> str:
    """``ssd0-x.json, ssd1-x.json`` -> ``ssd{0,1}-x.json`` (other lists joined by commas)."""
    names = sorted(set(names) - {""})
    heads, rests = zip(*(n.partition("-")[::2] for n in names), strict=True) if names else ((), ())
    if len(names) > 1 and len(set(rests)) == 1 and all(h.startswith("ssd") for h in heads):
        return f"ssd{{{','.join(h[3:] for h in heads)}}}-{rests[0]}"
    return ", ".join(names)


def fit_upstream(
    devices: Sequence[DeviceFit], together: Sequence[FioRun], threshold: float = 0.9
) -> UpstreamFit | None:
    """Compare the all-devices runs with the devices alone (None without such runs)."""
    if len(devices) < 2 or not together:
        return None
    got: dict[str, float] = {}
    sources: dict[str, str] = {}
    for d in DIRECTIONS:
        mine = _direction(together, d)
        if not mine:
            return None
        best = _best(_plateau_points(mine), "bw_bps")
        got[d], sources[f"{d}_gbps"] = best.stats.bw_bps / 1e9, best.source
    alone = {d: sum(getattr(f, f"{d}_gbps") for f in devices) for d in DIRECTIONS}
    limited = any(got[d] < threshold * alone[d] for d in DIRECTIONS)
    return UpstreamFit(
        read_gbps=got["read"],
        write_gbps=got["write"],
        alone_read_gbps=alone["read"],
        alone_write_gbps=alone["write"],
        limited=limited,
        sources=sources,
    )


def group_devices(fits: Sequence[DeviceFit], tolerance: float = 0.15) -> list[list[int]]:
    """Consecutive devices whose rates are within ``tolerance`` of the group's first."""
    keys = ("read_gbps", "write_gbps", "read_iops", "write_iops")
    groups: list[list[int]] = []
    for i, f in enumerate(fits):
        if groups:
            head = fits[groups[-1][0]]
            if all(abs(getattr(f, k) / getattr(head, k) - 1) <= tolerance for k in keys):
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


def mean_fit(fits: Sequence[DeviceFit]) -> DeviceFit:
    """One fit for a group of like devices: mean rates and latency, largest depth."""
    n = len(fits)

    def mean(k: str) -> float:
        return sum(getattr(f, k) for f in fits) / n

    sources = {k: compress_names([f.sources.get(k, "") for f in fits]) for k in fits[0].sources}
    return DeviceFit(
        read_gbps=mean("read_gbps"),
        write_gbps=mean("write_gbps"),
        read_iops=mean("read_iops"),
        write_iops=mean("write_iops"),
        read_latency_us=mean("read_latency_us"),
        write_latency_us=mean("write_latency_us"),
        max_queue_depth=max(f.max_queue_depth for f in fits),
        sources=sources,
    )


def calibrated_profile(
    fits: Sequence[DeviceFit],
    upstream: UpstreamFit | None,
    base: HardwareProfile,
    name: str,
    capacity_gib: Sequence[float],
) -> tuple[HardwareProfile, dict[str, str]]:
    """``base`` with the fitted SSDs (and their links) and this machine's core count."""
    comments: dict[str, str] = {}
    groups = []
    for g, members in enumerate(group_devices(fits)):
        fit = mean_fit([fits[i] for i in members])
        who = f"ssd{members[0]}" + (f"..ssd{members[-1]}" if len(members) > 1 else "")
        groups.append(
            SsdGroup(
                model=f"local device ({who})",
                count=len(members),
                capacity_gib=min(capacity_gib[i] for i in members),
                read_gbps=fit.read_gbps,
                write_gbps=fit.write_gbps,
                read_iops=round(fit.read_iops),
                write_iops=round(fit.write_iops),
                read_latency_us=round(fit.read_latency_us, 2),
                write_latency_us=round(fit.write_latency_us, 2),
                max_queue_depth=fit.max_queue_depth,
                max_io_kib=base.ssds[0].max_io_kib if base.ssds else 1280,
            )
        )
        mean = "mean of " if len(members) > 1 else ""
        for key, src in fit.sources.items():
            comments[f"ssds[{g}].{key}"] = f"fio, {mean}{src}" if src else "fio"
        comments[f"ssds[{g}].capacity_gib"] = "size of the calibrated file/device"
        comments[f"ssds[{g}].count"] = "devices calibrated"
        comments[f"ssds[{g}].max_io_kib"] = (
            "not measured: the base profile's (else 1280 KiB, Linux max_sectors_kb default)"
        )
    attach = _attach_point(base)
    links, switches = [], []
    hub = attach
    if upstream is not None and upstream.limited:
        hub = "ssdsw"
        switches.append(hub)
        links.append(LinkSpec("ssdsw.up", (hub, attach), upstream.read_gbps, "pcie"))
        comments[f"topology.links[{_kept_links(base)}]"] = (
            f"shared upstream: all at once read {upstream.read_gbps:.3g} GB/s vs "
            f"{upstream.alone_read_gbps:.3g} alone (fio {upstream.sources.get('read_gbps', '')}); "
            f"write {upstream.write_gbps:.3g} vs {upstream.alone_write_gbps:.3g}"
        )
    for i, f in enumerate(fits):
        links.append(
            LinkSpec(f"ssd{i}.link", (f"ssd{i}", hub), max(f.read_gbps, f.write_gbps), "pcie")
        )
        comments[f"topology.links[{_kept_links(base) + len(links) - 1}]"] = (
            f"the device's own path: its fitted bandwidth (ssd{i}), not a bottleneck of its own"
        )
    profile = replace_ssds(base, groups, links, switches)
    cores = os.cpu_count() or base.cpu.cores
    profile = dataclasses.replace(
        profile,
        name=name,
        description=f"this machine's SSDs as measured by fio ({dt.date.today().isoformat()}); "
        f"GPUs, DRAM and software from {base.name}",
        cpu=dataclasses.replace(base.cpu, model=_cpu_model() or base.cpu.model, cores=cores),
    )
    comments["cpu.cores"] = "os.cpu_count() of this machine"
    return profile, comments


def _attach_point(base: HardwareProfile) -> str:
    """Where the base profile attaches its SSDs (the far end of ssd0's link), else rc0."""
    for link in base.topology.links:
        if "ssd0" in link.between:
            return next(x for x in link.between if x != "ssd0")
    return "rc0" if "rc0" in base.topology.switches else base.topology.switches[0]


def _kept_links(base: HardwareProfile) -> int:
    ssds = set(base.ssd_names)
    return sum(1 for ln in base.topology.links if not ssds.intersection(ln.between))


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None

"""Emulated SSDs: N throttled devices on a machine with one disk.

``emulate(profile, n)`` builds ``ssd0..ssd{n-1}`` of a hardware profile from
files (on ``/dev/shm`` by default, or any directory):

1. each file becomes a loop device with direct I/O (:mod:`real.blkio`);
2. the backing store's sustainable rates are measured with fio (and the
   replayer's own 4 KiB ceiling, :mod:`real.sustain`), all devices
   at once (1 MiB reads and writes at QD16, 4 KiB random reads and writes at
   QD32), unless ``scale`` is given;
3. one scale factor shrinks the profile's devices to what the machine can
   hold: ``scale = min(1, headroom * sustainable / sum(device rate))`` over
   read and write bandwidth and IOPS.  The same factor applies to bandwidth
   and IOPS, so the block size where a device turns from IOPS- to
   bandwidth-bound (``bw / IOPS``) -- the regime of each I/O -- is the
   source's.  ``headroom`` (0.8) keeps the throttle, not the machine, the
   binding limit;
4. the scaled rates become per-device cgroup v1 blkio limits (whoever
   replays joins the group: :meth:`EmulatedSet.join`, or ``cgroup=`` of
   :func:`real.fio.run_fio`);
5. the scaled profile is written as YAML beside them (``<name>-emu<n>.yaml``)
   so the simulator models the same devices: scaled bandwidth and IOPS, the
   emulated capacity, the source's latency and queue depth (an emulated
   device's own latency is the backing store's, recorded in the header when
   measured), links and everything else unchanged.

Where the kernel cannot throttle (not root, no losetup, no blkio) the devices
are plain files and ``Target.pacing`` tells the replayer to hold the same
limits itself; a one-line warning says so.

:class:`EmulatedSet` (:mod:`real._emuset`) is a context manager; leaving
it removes everything the set made.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from pathlib import Path

from hwprofiles.loader import ProfileError, load_profile
from hwprofiles.schema import HardwareProfile
from real import blkio
from real._emuset import EmulatedSet, allocate, check_space, in_memory
from real._signals import phase
from real.capacity import METERS, Meter, make_meter
from real.cleanup import REGISTRY, file_id
from real.errors import RealError
from real.profile_yaml import scaled_profile, write_scaled_profile
from real.sustain import emulation_scale
from real.targets import Limits, Target

__all__ = ["MODES", "EmulatedSet", "emulate"]

log = logging.getLogger("kvtier.real")
MODES = ("auto", "throttle", "pacing")
_seq = itertools.count()


def emulate(
    profile: str | Path | HardwareProfile,
    n: int | None = None,
    *,
    where: str | Path = "/dev/shm",
    size: int = 1 << 30,
    scale: float | None = None,
    mode: str = "auto",
    out: str | Path | None = None,
    headroom: float = 0.8,
    fill: bool = False,
    latency: str = "source",
    cgroup_root: str | Path = blkio.CGROUP_ROOT,
    meter: str = "fio",
) -> EmulatedSet:
    """Build ``n`` emulated SSDs of ``profile`` (default: all its SSDs); see the module doc.

    ``size``: bytes per device.  ``scale``: skip the measurement and use this
    factor.  ``mode``: ``auto`` (throttle where possible, else pacing),
    ``throttle`` (refuse if impossible) or ``pacing``.  ``out``: directory for
    the scaled profile and fio evidence (default: inside the emulation's own
    directory, removed on close).  ``fill``: write every byte of the backing
    files first (needed on a disk for reads to reach it; tmpfs needs none).
    ``latency``: ``source`` keeps the profile's QD1 latencies; ``measured``
    puts the emulated devices' own (measured with the rates) in the profile.
    ``meter``: what measures the rates when ``scale`` is not given: ``fio``
    or ``replayer`` (kvtier's own, :func:`real.capacity.measure_rates_replayer`:
    no fio needed).
    """
    _check_options(meter, latency, scale, mode)
    source = profile if isinstance(profile, HardwareProfile) else _load(profile)
    n = _device_count(source, n)
    if size < (1 << 20) or size % 4096:
        raise RealError(f"--size: must be a multiple of 4096 and >= 1 MiB, got {size}")
    if scale is not None and not 0 < scale <= 1:
        raise RealError(f"--scale: must be in (0, 1], got {scale}")
    where = Path(where)
    check_space(where, n * size)
    chosen = _choose_mode(mode, cgroup_root)
    workdir = where / f"kvtier-emu-{os.getpid()}-{next(_seq)}"
    try:
        workdir.mkdir(parents=True)
    except OSError as exc:
        raise RealError(f"cannot create {workdir}: {exc.strerror}") from None
    REGISTRY.add("tree", **file_id(workdir))
    es = EmulatedSet(workdir, source, chosen)
    try:
        out_dir = Path(out) if out else workdir
        measure = make_meter(meter, out_dir / "capacity", size)
        _build(es, n, size, scale, headroom, fill, (meter, measure), cgroup_root)
        _describe(es, out_dir, size, latency == "measured")
    except BaseException:
        es.close()
        raise
    return es


def _check_options(meter: str, latency: str, scale: float | None, mode: str) -> None:
    """The named choices of :func:`emulate` are known and agree with each other."""
    if meter not in METERS:
        raise RealError(f"meter must be one of {METERS}, got {meter!r}")
    if latency not in ("source", "measured"):
        raise RealError(f"latency must be 'source' or 'measured', got {latency!r}")
    if latency == "measured" and scale is not None:
        raise RealError("latency='measured' needs the measurement: leave scale unset")
    if mode not in MODES:
        raise RealError(f"mode must be one of {MODES}, got {mode!r}")


def _device_count(source: HardwareProfile, n: int | None) -> int:
    """``n`` (default: all the profile's SSDs), checked against the profile."""
    count = len(source.ssd_names)
    n = count if n is None else n
    if not 1 <= n <= count:
        raise RealError(
            f"--n: profile {source.name} has {count} SSDs; n must be 1..{count}, got {n}"
        )
    return n


def _choose_mode(mode: str, cgroup_root: str | Path) -> str:
    """``throttle`` where the kernel can (and ``mode`` allows), else ``pacing``;
    refuses when ``mode`` is ``throttle`` and the kernel cannot."""
    reason = blkio.throttle_unavailable(cgroup_root) if mode != "pacing" else None
    if reason and mode == "throttle":
        raise RealError(f"cannot throttle emulated devices: {reason}")
    if reason:
        log.warning("kvtier: %s: emulated SSDs are plain files paced by the replayer", reason)
    return "pacing" if (mode == "pacing" or reason) else "throttle"


def _load(name: str | Path) -> HardwareProfile:
    try:
        return load_profile(name)
    except ProfileError as exc:
        raise RealError(str(exc)) from None


def _build(
    es: EmulatedSet,
    n: int,
    size: int,
    scale: float | None,
    headroom: float,
    fill: bool,
    meter: tuple[str, Meter],
    cgroup_root: str | Path,
) -> None:
    """Backing files (loop devices when throttled), the scale (measured with ``meter``
    unless given) and one target per device, limited to the scaled profile's rates."""
    backing = [es.workdir / f"ssd{i}.img" for i in range(n)]
    for path in backing:
        allocate(path, size, fill or (scale is None and not in_memory(path)))
    paths = [str(p) for p in backing]
    if es.mode == "throttle":
        for path in backing:
            es.loops.append((blkio.loop_attach(path), path))
        paths = [dev for dev, _ in es.loops]
        name = f"kvtier-{os.getpid()}-{es.workdir.name.rsplit('-', 1)[1]}"
        es.group = blkio.ThrottleGroup(cgroup_root, name)
    phase("setup")
    kind = "loop" if es.mode == "throttle" else "file"
    bare = [Target(f"ssd{i}", p, size, kind, created=True) for i, p in enumerate(paths)]
    if scale is None:
        es.sustainable = meter[1](bare)
        scale, es.replayer_iops = emulation_scale(es.source, n, es.sustainable, headroom,
                                                  es.workdir, meter[0],
                                                  {t.node: t for t in bare})  # fmt: skip
    es.scale = scale
    scaled = scaled_profile(es.source, n, scale, size)
    targets = []
    for t in bare:
        group = scaled.ssd(t.node)
        limits = Limits(
            read_bps=round(group.read_gbps * 1e9),
            write_bps=round(group.write_gbps * 1e9),
            read_iops=int(group.read_iops),
            write_iops=int(group.write_iops),
        )
        if es.group is not None:
            es.group.limit(t.path, limits)
        pacing = es.mode == "pacing"
        q = group.max_queue_depth
        targets.append(dataclasses.replace(t, limits=limits, pacing=pacing, queue_depth=q))
    es.targets = tuple(targets)


def _describe(es: EmulatedSet, out: Path, size: int, measured_latency: bool) -> None:
    """Write the scaled profile the simulator models (``out/<name>.yaml``) and the note."""
    n, scale, targets = len(es.targets), es.scale, es.targets
    scaled = scaled_profile(es.source, n, scale, size)
    es.profile_path = out / f"{scaled.name}.yaml"
    latency = (
        (es.sustainable.read_latency_us, es.sustainable.write_latency_us)
        if (measured_latency and es.sustainable)
        else None
    )
    es.profile = write_scaled_profile(
        es.source,
        scaled_profile(es.source, n, scale, size, latency),
        es.profile_path,
        scale=scale,
        held_by="kernel blkio throttling of loop devices"
        if es.mode == "throttle"
        else "replayer pacing",
        sustainable=es.sustainable,
        backing=es.workdir.parent,
        measured_latency=latency is not None,
    )
    es.note = (
        f"{n} emulated SSDs of {es.source.name} ({es.mode}) at scale {scale:.4g}: "
        f"{_mbs(targets[0].limits.read_bps)} read, {_mbs(targets[0].limits.write_bps)} write, "
        f"{targets[0].limits.read_iops} / {targets[0].limits.write_iops} IOPS per device"
        + (f" (replayer ceiling {es.replayer_iops:,.0f} IOPS)" if es.replayer_iops else "")
    )


def _mbs(bps: float) -> str:
    return f"{bps / 1e6:.1f} MB/s"

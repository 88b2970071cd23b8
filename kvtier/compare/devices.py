"""The devices a validation runs on and the profile that models them.

In order of preference:

* emulated (``emulate=PROFILE``; root, loop devices, cgroup v1 blkio): N loop
  devices over files, throttled by the kernel to the profile's per-device
  rates scaled to what this machine sustains (:mod:`real.emulate`); the
  simulator models the scaled profile it writes.  Without root or blkio it
  falls back to user-space pacing and says so.
* paced (``pace=PROFILE``): plain files in ``where``, each paced in user space
  to the profile's per-device rates times ``scale``.
* as they are (``hw=PROFILE``): the files or devices in ``where``, modelled by
  a (calibrated) profile -- e.g. ``hwprofiles/local.yaml`` from ``make calibrate``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from hwprofiles import HardwareProfile, load_profile
from real.errors import RealError
from real.profile_yaml import scaled_profile
from real.targets import Limits, Target

REGIME_DEVICE_BYTES = 320 << 20  # the regime plan's steps are capped at 256 MiB per device


@dataclass
class Devices:
    """The devices a validation runs on and the profile that models them.

    ``targets``: ready-made targets (emulated loop devices) or None, in which
    case data files are created in ``where``; ``limits``/``pacing``: what the
    replayer holds them to; ``throttled``: a context the replay runs in (the
    emulation's blkio group).
    """

    profile: HardwareProfile
    where: str
    targets: dict[str, Target] | None = None
    limits: Limits | None = None
    pacing: bool = False
    throttled: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    @property
    def kernel_throttled(self) -> bool:
        """Emulated devices held by the kernel's blkio throttle (not user-space pacing)."""
        return self.targets is not None and any(
            not t.limits.unlimited and not t.pacing for t in self.targets.values()
        )

    @contextlib.contextmanager
    def prepared(self, plan: pa.Table, seed: int, log, unpaced: bool = False) -> Iterator[dict]:
        """Targets holding ``plan``'s data; ``unpaced`` drops the limits (measurements)."""
        from real.datafile import fill_targets, prepare_targets

        if self.targets is not None:
            targets = self.targets
            if unpaced:
                targets = {k: dataclasses.replace(t, pacing=False) for k, t in targets.items()}
            fill_targets(targets, plan, seed)
            yield targets
            return
        pace = self.pacing and not unpaced
        files = prepare_targets(
            plan, self.where, seed=seed, limits=self.limits if pace else None, pacing=pace, log=log
        )
        try:
            yield files.targets
        finally:
            files.cleanup()


@contextlib.contextmanager
def devices(
    *,
    emulate: str | None,
    pace: str | None,
    hw: str | None,
    n: int,
    where: str,
    out: str | Path,
    scale: float | None,
    meter: str,
    size: int = REGIME_DEVICE_BYTES,
    log: Callable[[str], object] = print,
) -> Iterator[Devices]:
    """``n`` devices: emulated from profile ``emulate`` (each holding ``size`` bytes,
    backing files in ``where``, the scaled profile written to ``out``, rates measured
    by ``meter``), files in ``where`` paced to profile ``pace``, or those in ``where``
    modelled by profile ``hw`` (exactly one of the three).  ``scale``: the rate scale
    (None: measured for an emulation, for pacing what holds the ``n`` files to
    0.4 GB/s together, or the profile's rates if lower); ``log`` gets a line
    saying what was set up."""
    if n < 1:
        raise RealError(f"--n must be >= 1, got {n}")
    if emulate:
        from real.emulate import emulate as emulated

        with emulated(emulate, n, where=where, size=size, out=out, scale=scale, meter=meter) as es:
            log(es.note)
            yield Devices(
                es.profile,
                where,
                targets={t.node: t for t in es.targets},
                limits=es.targets[0].limits,
                pacing=es.mode == "pacing",
                throttled=es.joined,
            )
        return
    if pace:
        base = load_profile(pace)
        if len(base.ssd_names) < n:
            raise RealError(f"profile '{base.name}' has fewer than {n} SSDs")
        scale = scale or min(1.0, 0.4e9 / (n * base.ssds[0].read_gbps * 1e9))
        profile = scaled_profile(base, n, scale, 1 << 30)
        log(
            f"user-space pacing: {n} files in {where}, each held to "
            f"{profile.ssds[0].read_gbps * 1e3:.0f} MB/s and {profile.ssds[0].read_iops:,.0f} "
            f"read IOPS ({scale:.4g} x {base.ssds[0].model})"
        )
        Path(where).mkdir(parents=True, exist_ok=True)
        yield Devices(profile, where, limits=limits_of(profile), pacing=True)
        return
    yield Devices(load_profile(hw), where)


def limits_of(profile: HardwareProfile) -> Limits:
    """The rates the replayer holds a paced file to: the profile's first SSD's."""
    g = profile.ssds[0]
    return Limits(
        read_bps=int(g.read_gbps * 1e9),
        write_bps=int(g.write_gbps * 1e9),
        read_iops=int(g.read_iops),
        write_iops=int(g.write_iops),
    )

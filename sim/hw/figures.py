"""Derived figures of a profile: what the topology can actually deliver.

Each figure is a static max-min allocation (the same solver the simulator
uses) of large sequential transfers, all running at once, so shared upstream
links show up as the bottleneck they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwprofiles import HardwareProfile
from kvtier.contracts.units import GB, MiB
from sim.engine.maxmin import maxmin_rates
from sim.hw.machine import Machine

_LARGE_IO = 1 * MiB


@dataclass(frozen=True)
class PathFigure:
    label: str
    flows: int
    total_gbps: float
    bottleneck: str  # resources at capacity, or "device" when each flow hits its own cap


def _concurrent(
    m: Machine, label: str, pairs: list[tuple[str, str]], kind: str, via: str = ""
) -> PathFigure:
    """``via``: every byte is staged in that node (a bounce buffer), so it
    crosses both routes and, on a shared memory bus, the bus twice."""
    paths, caps = [], []
    for src, dst in pairs:
        hops = m.route(src, via) + m.route(via, dst) if via else m.route(src, dst)
        path = [(r, 1.0) for r in hops]
        cap = math.inf
        if kind in ("read", "write"):
            ssd = src if kind == "read" else dst
            spec = m.profile.ssd(ssd)
            access, rates = m.ssd_access(ssd, kind == "write", _LARGE_IO, spec.max_queue_depth)
            path.insert(0, access)
            cap = rates.queue_rate
        paths.append(path)
        caps.append(cap)
    rates = maxmin_rates(paths, caps, m.net.capacity)
    load: dict[int, float] = {}
    for path, rate in zip(paths, rates, strict=True):
        for r, c in path:
            load[r] = load.get(r, 0.0) + c * rate
    full = sorted({m.net.names[r] for r, ld in load.items() if ld >= 0.999 * m.net.capacity[r]})
    return PathFigure(label, len(pairs), sum(rates) / GB, ", ".join(full) or "per-flow cap")


def path_figures(profile: HardwareProfile) -> list[PathFigure]:
    m = Machine(profile)
    ssds, gpus, dram = profile.ssd_names, profile.gpu_names, profile.dram_names
    out: list[PathFigure] = []
    if ssds:
        out.append(
            _concurrent(
                m, f"all SSDs -> {dram[0]} (1 MiB reads)", [(s, dram[0]) for s in ssds], "read"
            )
        )
        out.append(
            _concurrent(
                m, f"{dram[0]} -> all SSDs (1 MiB writes)", [(dram[0], s) for s in ssds], "write"
            )
        )
        out.append(
            _concurrent(
                m,
                f"all SSDs -> {gpus[0]} via {dram[0]} (bounce)",
                [(s, gpus[0]) for s in ssds],
                "read",
                via=dram[0],
            )
        )
        if profile.software.gpudirect:
            out.append(
                _concurrent(
                    m, f"all SSDs -> {gpus[0]} (GPUDirect)", [(s, gpus[0]) for s in ssds], "read"
                )
            )
    out.append(_concurrent(m, f"{dram[0]} -> {gpus[0]}", [(dram[0], gpus[0])], "copy"))
    if len(gpus) > 1:
        out.append(_concurrent(m, f"{dram[0]} -> all GPUs", [(dram[0], g) for g in gpus], "copy"))
        out.append(_concurrent(m, f"{gpus[0]} -> {gpus[1]}", [(gpus[0], gpus[1])], "copy"))
    if len(dram) > 1:
        out.append(
            _concurrent(m, "all DRAM modules -> " + gpus[0], [(d, gpus[0]) for d in dram], "copy")
        )
    return out

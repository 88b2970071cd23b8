"""The binding resource of a run: the largest used share of a resource's capacity.

A device record's ``util_mean`` (:mod:`kvtier.records`) is the share of the
run a device *had work*; a link carrying one slow trickle the whole run is
100% busy yet nearly idle.  What binds is the resource whose *capacity* the
run used the most of, over the makespan ``T`` (the last op's end):

* a link (one row per direction; a half-duplex bus: one row for both):
  ``bytes / (capacity x T)``, capacity the achievable bytes/s the simulator
  charges flows against (:func:`sim.hw.machine.link_capacity`);
* an SSD: two shares, bandwidth ``bytes_read / (read_bps x T) + bytes_written
  / (write_bps x T)`` and IOPS ``read_ios / (read_iops x T) + write_ios /
  (write_iops x T)`` (reads and writes time-share the device, as the
  simulator models it), at the profile's achievable rates (``efficiency.ssd``);
* the host CPU: core-seconds of the ops (``cpu_s``) over ``cores x T``;
* a GPU: its compute ops' FLOPs over ``tensor peak x T`` (``gpuN.tensor``) and
  their HBM bytes over ``HBM bandwidth x T`` (``gpuN.hbm``), both achievable.

The binding resource is the one with the highest share; resources within
:data:`TIE` (relative) of it tie and are all named, joined by `` & ``.  The
busy share (``util_mean``) stays beside each row as a second column.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from hwprofiles import HardwareProfile

TIE = 0.01  # shares within 1% of the highest tie with it


def makespan(ops: pd.DataFrame) -> float:
    return float(ops["end_s"].max()) if len(ops) else 0.0


def _ssd_ios(ops: pd.DataFrame) -> dict[tuple[str, bool], float]:
    """(ssd, is_write) -> I/Os of the completed reads (src) and writes (dst)."""
    out: dict[tuple[str, bool], float] = {}
    for kind, end, write in (("read", "src", False), ("write", "dst", True)):
        sel = ops[ops["kind"] == kind]
        for dev, n in sel.groupby(end)["n_ios"].sum().items():
            out[(str(dev), write)] = float(n)
    return out


def shares(
    devices: pd.DataFrame, ops: pd.DataFrame, plan: pd.DataFrame | None, profile: HardwareProfile
) -> pd.DataFrame:
    """One row per resource: ``resource``, ``measure`` (bytes; an SSD's
    bandwidth_s and iops_s, device-seconds of work; core_s; flops; hbm_bytes),
    ``used``, ``capacity`` (per second), ``share`` and ``busy_share``."""
    from sim.hw.machine import Machine

    m = Machine(profile)
    t = makespan(ops)
    busy = dict(zip(devices["device"], devices["util_mean"], strict=True))
    rows: list[tuple[str, str, float, float]] = []
    links = devices[devices["type"] == "link"]
    moved = links["bytes_read"] + links["bytes_written"]
    for dev, nbytes in zip(links["device"], moved, strict=True):
        rows.append((dev, "bytes", float(nbytes), m.link_caps[dev.rstrip("<>")]))
    ios = _ssd_ios(ops)
    for dev in profile.ssd_names:
        r = devices[devices["device"] == dev]
        spec, eff = profile.ssd(dev), profile.efficiency.ssd
        rd, wr = (float(r[c].sum()) for c in ("bytes_read", "bytes_written"))
        bw = rd / (spec.read_gbps * 1e9 * eff) + wr / (spec.write_gbps * 1e9 * eff)
        io = ios.get((dev, False), 0.0) / (spec.read_iops * eff)
        io += ios.get((dev, True), 0.0) / (spec.write_iops * eff)
        rows += [(dev, "bandwidth_s", bw, 1.0), (dev, "iops_s", io, 1.0)]  # device-seconds
    rows.append(("cpu", "core_s", float(ops["cpu_s"].sum()), float(profile.cpu.cores)))
    if plan is not None and len(plan):
        comp = plan[(plan["kind"] == "compute") & (plan["dst"] != "cpu")]
        for gpu in profile.gpu_names:
            g = comp[comp["dst"] == gpu]
            rows.append((f"{gpu}.tensor", "flops", float(g["flops"].sum()), m.tensor_flops))
            rows.append((f"{gpu}.hbm", "hbm_bytes", float(g["hbm_bytes"].sum()), m.hbm_bps))
    df = pd.DataFrame(rows, columns=["resource", "measure", "used", "capacity"])
    df["share"] = df["used"] / (df["capacity"] * t) if t > 0 else 0.0
    device = df["resource"].str.replace(r"\.(tensor|hbm)$", ".compute", regex=True)
    df["busy_share"] = device.map(busy).fillna(0.0)
    return df


def binding(df: pd.DataFrame) -> tuple[str, float, float]:
    """(resource names tied at the top joined by `` & ``, their share, the busy
    share of the first of them) of a :func:`shares` table."""
    if not len(df) or not (df["share"] > 0).any():
        return "", 0.0, 0.0
    top = df["share"].max()
    tied = df[df["share"] >= top * (1 - TIE)].sort_values(
        ["share", "resource"], ascending=[False, True]
    )
    names = list(dict.fromkeys(tied["resource"]))
    return " & ".join(_compact(names)), float(top), float(tied["busy_share"].iloc[0])


def _compact(names: list[str]) -> list[str]:
    """More than two tied resources of one class become ``<class> x<count>``
    (``ssd0 .. ssd7`` -> ``ssdN x8``), in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(re.sub(r"\d+", "N", n), []).append(n)
    return [f"{c} x{len(g)}" if len(g) > 2 else " & ".join(g) for c, g in groups.items()]


def resource_class(name: str) -> str:
    """A resource's kind for colouring: digits -> N, ties by their first name
    (``ssd3 & ssd0`` -> ``ssdN``, ``sw1.up>`` -> ``swN.up>``)."""
    return re.sub(r"\d+", "N", name.split(" & ")[0]) if name else "none"


def of_run(records: Any, profile: HardwareProfile) -> pd.DataFrame:
    """:func:`shares` of a run's records (its ``plan``, when it carries one, gives FLOPs)."""
    plan = getattr(records, "plan", None)
    plan_df = plan.select(["kind", "dst", "flops", "hbm_bytes"]).to_pandas() if plan else None
    ops = records.ops.select(["kind", "src", "dst", "n_ios", "cpu_s", "end_s"]).to_pandas()
    return shares(records.devices.to_pandas(), ops, plan_df, profile)


__all__ = ["TIE", "binding", "makespan", "of_run", "resource_class", "shares"]

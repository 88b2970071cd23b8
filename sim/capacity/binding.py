"""The binding resource of a run: the largest used share of a resource's capacity.

A device record's ``util_mean`` (:mod:`kvtier.contracts.records`) is the share of the
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
:func:`binding` returns them as a :class:`Binding`: the tied names, each one's
class (:data:`CLASSES`: an SSD, an SSD's own link, GPU compute, GPU HBM, a GPU's
own link, a GPU's peer link, a switch uplink, a host memory link, the CPU) and
whether more SSDs or more GPUs relieve them, decided here once, so the search
reads two booleans and never parses the label.

**What binds a metric** (:func:`window_shares`).  Over the whole run, an SSD
that keeps writing the KV out long after the last prompt was computed can
have the largest used share while the GPU decided every TTFT: TTFT halves
when the GPUs double, yet the whole-run label names the SSD.  A TTFT is
decided inside its request's window, from its release to its first token, so
the label for the TTFT SLO is the same share computed over the window of the
P99 request (:func:`p99_window`): every op counts in proportion to the part
of its ``[start_s, end_s)`` inside the window, as if it did its work at an
even rate; a link's bytes are the bytes of the ops whose route crosses it
(:meth:`sim.hw.machine.Machine.route_names`), an SSD's reads and writes are
its ops', the CPU's and GPU's work their ops'.  Capacity is over the window's
length.  The whole-run share stays as a second label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

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


def _frame(rows: list, t: float, devices: pd.DataFrame) -> pd.DataFrame:
    """The shares table of ``rows`` (resource, measure, used, capacity) over ``t`` seconds."""
    busy = dict(zip(devices["device"], devices["util_mean"], strict=True))
    df = pd.DataFrame(rows, columns=["resource", "measure", "used", "capacity"])
    df["share"] = df["used"] / (df["capacity"] * t) if t > 0 else 0.0
    device = df["resource"].str.replace(r"\.(tensor|hbm)$", ".compute", regex=True)
    df["busy_share"] = device.map(busy).fillna(0.0)
    return df


def _ssd_rows(profile: HardwareProfile, dev: str, rd: float, wr: float, ios: tuple) -> list:
    """An SSD's bandwidth and IOPS rows (device-seconds of work) from bytes and I/Os."""
    spec, eff = profile.ssd(dev), profile.efficiency.ssd
    bw = rd / (spec.read_gbps * 1e9 * eff) + wr / (spec.write_gbps * 1e9 * eff)
    io = ios[0] / (spec.read_iops * eff) + ios[1] / (spec.write_iops * eff)
    return [(dev, "bandwidth_s", bw, 1.0), (dev, "iops_s", io, 1.0)]


def _gpu_rows(plan: pd.DataFrame | None, profile: HardwareProfile, m: Any) -> list:
    """Each GPU's FLOPs and HBM bytes rows from the plan's compute ops (scaled by ``w``)."""
    if plan is None or not len(plan):
        return []
    comp = plan[(plan["kind"] == "compute") & (plan["dst"] != "cpu")]
    w = comp.get("w", 1.0)
    rows = []
    for gpu in profile.gpu_names:
        sel = comp["dst"] == gpu
        flops, hbm = (float((comp[c] * w)[sel].sum()) for c in ("flops", "hbm_bytes"))
        rows.append((f"{gpu}.tensor", "flops", flops, m.tensor_flops))
        rows.append((f"{gpu}.hbm", "hbm_bytes", hbm, m.hbm_bps))
    return rows


def shares(
    devices: pd.DataFrame, ops: pd.DataFrame, plan: pd.DataFrame | None, profile: HardwareProfile
) -> pd.DataFrame:
    """One row per resource: ``resource``, ``measure`` (bytes; an SSD's
    bandwidth_s and iops_s, device-seconds of work; core_s; flops; hbm_bytes),
    ``used``, ``capacity`` (per second), ``share`` and ``busy_share``."""
    from sim.hw.machine import Machine

    m = Machine(profile)
    rows: list[tuple[str, str, float, float]] = []
    links = devices[devices["type"] == "link"]
    moved = links["bytes_read"] + links["bytes_written"]
    for dev, nbytes in zip(links["device"], moved, strict=True):
        rows.append((dev, "bytes", float(nbytes), m.link_caps[dev.rstrip("<>")]))
    ios = _ssd_ios(ops)
    for dev in profile.ssd_names:
        r = devices[devices["device"] == dev]
        rd, wr = (float(r[c].sum()) for c in ("bytes_read", "bytes_written"))
        rows += _ssd_rows(
            profile, dev, rd, wr, (ios.get((dev, False), 0.0), ios.get((dev, True), 0.0))
        )
    rows.append(("cpu", "core_s", float(ops["cpu_s"].sum()), float(profile.cpu.cores)))
    rows += _gpu_rows(plan, profile, m)
    return _frame(rows, makespan(ops), devices)


def overlap(ops: pd.DataFrame, t0: float, t1: float) -> pd.Series:
    """Per op, the share of its ``[start_s, end_s)`` inside ``[t0, t1)`` (an op of no
    duration: 1 when it falls inside, else 0)."""
    s, e = ops["start_s"], ops["end_s"]
    inside = (e.clip(upper=t1) - s.clip(lower=t0)).clip(lower=0.0)
    dur = e - s
    point = ((s >= t0) & (s < t1)).astype(float)
    return (inside / dur.where(dur > 0, 1.0)).where(dur > 0, point)


def window_shares(
    devices: pd.DataFrame, ops: pd.DataFrame, plan: pd.DataFrame | None,
    profile: HardwareProfile, window: tuple[float, float],
) -> pd.DataFrame:  # fmt: skip
    """:func:`shares` over ``window`` (t0, t1): each op's work in proportion to its
    overlap with the window, links charged along each op's route; ``plan`` rows
    align with ``ops`` rows (the records copy the plan in order)."""
    from sim.hw.machine import Machine

    m = Machine(profile)
    t0, t1 = window
    w = overlap(ops, t0, t1)
    ops = ops.assign(w=w, wb=w * ops["bytes"], wio=w * ops["n_ios"])
    moving = ops[(ops["kind"] != "compute") & (ops["wb"] > 0) & (ops["src"] != ops["dst"])]
    used: dict[str, float] = {}
    for (src, dst), nbytes in moving.groupby(["src", "dst"])["wb"].sum().items():
        for link in m.route_names(str(src), str(dst)):
            used[link] = used.get(link, 0.0) + float(nbytes)
    rows = [(k, "bytes", v, m.link_caps[k.rstrip("<>")]) for k, v in sorted(used.items())]
    for dev in profile.ssd_names:
        rd, wr = (
            ops[(ops["kind"] == "read") & (ops["src"] == dev)],
            ops[(ops["kind"] == "write") & (ops["dst"] == dev)],
        )
        rows += _ssd_rows(
            profile, dev, rd["wb"].sum(), wr["wb"].sum(), (rd["wio"].sum(), wr["wio"].sum())
        )
    rows.append(("cpu", "core_s", float((ops["cpu_s"] * w).sum()), float(profile.cpu.cores)))
    if plan is not None:
        plan = plan.assign(w=_plan_weights(plan, ops, w))
    rows += _gpu_rows(plan, profile, m)
    return _frame(rows, t1 - t0, devices)


def _plan_weights(plan: pd.DataFrame, ops: pd.DataFrame, w: pd.Series) -> Any:
    """``w`` (per op record) for each plan row: by ``op_id`` when both carry it,
    else row by row (the records copy the plan in order)."""
    if "op_id" in plan and "op_id" in ops:
        return plan["op_id"].map(pd.Series(w.to_numpy(), index=ops["op_id"])).fillna(0.0)
    if len(plan) != len(ops):
        raise ValueError(f"plan has {len(plan)} rows, records {len(ops)}: cannot align")
    return w.to_numpy()


def p99_window(requests: pd.DataFrame, metric: str = "ttft") -> tuple[float, float] | None:
    """The window of the P99 request of ``metric``: the finished request of the smallest
    ``<metric>_s`` at or above the 99th percentile (``np.percentile``, linear); for
    ``ttft`` its (release, first token), for ``tpot`` its (first token, last token), the
    decode steps its TPOT averages.  None when no request has the metric (a TPOT needs
    two output tokens)."""
    import numpy as np

    col = f"{metric}_s"
    done = requests[~requests["rejected"]] if "rejected" in requests else requests
    done = done[done[col].notna()]
    if not len(done):
        return None
    p99 = float(np.percentile(done[col], 99))
    row = done[done[col] >= p99 * (1 - 1e-12)].sort_values(col).iloc[0]
    if metric == "tpot":
        return float(row["first_token_s"]), float(row["finish_s"])
    t0 = float(row["release_s"])
    return t0, t0 + float(row["ttft_s"])


# A resource's class by its name (the names :func:`shares` gives it: the profile's link
# names with a direction arrow, ``ssdN``, ``cpu``, ``gpuN.tensor``/``.hbm``), first match.
CLASSES: tuple[tuple[str, str], ...] = (
    ("ssd", r"ssd\d+"),  # an SSD's bandwidth or IOPS
    ("ssd_link", r"ssd\d+\..+"),  # an SSD's own link (ssdN.pcie)
    ("gpu_compute", r"gpu\d+\.tensor"),
    ("gpu_hbm", r"gpu\d+\.hbm"),
    ("gpu_link", r"gpu\d+\.pcie"),  # a GPU's own x16 link
    ("gpu_peer_link", r"gpu\d+\..+"),  # NVLink, NVLink-C2C: the all-reduce's path
    ("switch_uplink", r"sw\d+\.up"),
    ("host_link", r"(dram|mc)\d+\..+"),  # a DRAM module's bus, a memory channel
    ("cpu", r"cpu"),
)
# more SSDs relieve an SSD and its own link (each added SSD brings both); more GPUs
# relieve each rank's compute, HBM and own x16 link, and a switch uplink (a rank moves
# 1/N of the bytes through its fixed share); nothing else (NVLink, which the all-reduce
# loads more with every rank, the DRAM bus, the SSDs and the CPU every rank shares)
SSD_RELIEVED = frozenset({"ssd", "ssd_link"})
GPU_RELIEVED = frozenset({"gpu_compute", "gpu_hbm", "gpu_link", "switch_uplink"})


def resource_kind(name: str) -> str:
    """The class (:data:`CLASSES`) of one resource of a shares table, ``other`` when none
    matches (``sw0.up>`` -> ``switch_uplink``, ``ssd3.pcie<`` -> ``ssd_link``)."""
    bare = name.rstrip("<>")
    return next((c for c, pat in CLASSES if re.fullmatch(pat, bare)), "other")


@dataclass(frozen=True)
class Binding:
    """The resources tied at the top of a shares table (highest share first, then by
    name), their classes, the top share and the busy share of the first of them."""

    resources: tuple[str, ...] = ()
    share: float = 0.0
    busy: float = 0.0
    classes: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(resource_kind(n) for n in self.resources))

    @property
    def label(self) -> str:
        """The names joined by `` & `` (more than two of one class: ``ssdN x8``)."""
        return " & ".join(_compact(list(self.resources)))

    @property
    def ssd_only(self) -> bool:
        """Every tied resource is one more SSDs relieve (an SSD, an SSD's own link)."""
        return bool(self.classes) and all(c in SSD_RELIEVED for c in self.classes)

    @property
    def gpu_relieved(self) -> bool:
        """At least one tied resource is one more GPUs relieve (:data:`GPU_RELIEVED`)."""
        return any(c in GPU_RELIEVED for c in self.classes)

    def columns(self, prefix: str) -> dict[str, Any]:
        """The result-row columns: ``prefix`` (the label), ``_share``, ``_ssd_only``,
        ``_gpu_relieved``."""
        return {prefix: self.label, f"{prefix}_share": self.share,
                f"{prefix}_ssd_only": self.ssd_only,
                f"{prefix}_gpu_relieved": self.gpu_relieved}  # fmt: skip


def binding(df: pd.DataFrame) -> Binding:
    """The :class:`Binding` of a :func:`shares` table: every resource within :data:`TIE`
    of the highest share (none when no share is positive)."""
    if not len(df) or not (df["share"] > 0).any():
        return Binding()
    top = df["share"].max()
    tied = df[df["share"] >= top * (1 - TIE)].sort_values(
        ["share", "resource"], ascending=[False, True]
    )
    names = tuple(dict.fromkeys(tied["resource"]))
    return Binding(names, float(top), float(tied["busy_share"].iloc[0]))


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


def of_run(
    records: Any, profile: HardwareProfile, window: bool = False, plan: pa.Table | None = None,
    metric: str = "ttft",
) -> pd.DataFrame:  # fmt: skip
    """:func:`shares` of a run's records; its ``plan`` (the one simulated, else the one a
    closed-loop run's records hold, when they hold one) gives FLOPs.  With ``window``,
    :func:`window_shares` over the P99 request's window of ``metric`` (ttft, tpot) when
    the records carry requests (else the whole run for ttft; no rows for tpot: no
    request decoded, nothing bound a TPOT)."""
    if plan is None:
        plan = getattr(records, "plan", None)
    pcols = ["op_id", "kind", "dst", "flops", "hbm_bytes"]
    plan_df = plan.select(pcols).to_pandas() if plan else None
    cols = ["op_id", "kind", "src", "dst", "bytes", "n_ios", "cpu_s", "start_s", "end_s"]
    ops = records.ops.select(cols).to_pandas()
    devices = records.devices.to_pandas()
    reqs = getattr(records, "requests", None)
    span = p99_window(reqs.to_pandas(), metric) if window and reqs is not None else None
    if span is not None and span[1] > span[0]:
        return window_shares(devices, ops, plan_df, profile, span)
    if metric == "tpot":
        return _frame([], 0.0, devices)
    return shares(devices, ops, plan_df, profile)


__all__ = [
    "CLASSES",
    "GPU_RELIEVED",
    "SSD_RELIEVED",
    "TIE",
    "Binding",
    "binding",
    "makespan",
    "of_run",
    "overlap",
    "p99_window",
    "resource_class",
    "resource_kind",
    "shares",
    "window_shares",
]

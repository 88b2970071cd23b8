"""Where Swarm's SSD reads turn from IOPS- to bandwidth-bound (seed 000 §8.4, Fig. 16-17).

For every run under a results folder (``kvtier sim`` or ``kvtier sweep`` output:
a folder with ``run.json``, ``scenario.yaml``, ``profile.yaml`` and
``variants/*/plan.parquet``), each SSD read op of the plan is rated by the SSD
model of :mod:`sim.executor` ("Queue depth", "I/O size"): alone on its device an op
of ``n`` I/Os and ``B`` bytes takes ``L + max(B / bw, n / iops, (n - qd) x L / qd)``
(bandwidth, IOPS and queue bounds; ``L`` the read latency, ``qd`` its queue depth).
The op's device time beyond ``L`` is charged to the bound that sets it, and the
report gives, per run and variant:

* ``io_kib``: bytes per I/O (``sum B / sum n``), and ``iops_knee_kib = bw / iops``,
  the I/O size below which an I/O is IOPS-bound on that SSD;
* ``iops_share``, ``bw_share``, ``queue_share``, ``latency_share``: shares of the
  summed device time (``L`` plus the binding bound, over every read op);
* ``small_io_share`` and ``iops_share_per_io``: the same rated I/O by I/O (each
  extent cut at the op's ``io_bytes``; the simulator rates an op by its mean I/O
  size instead, :mod:`sim.executor` "I/O size"): the share of I/Os smaller than the
  knee, and the share of ``sum max(s / bw, 1 / iops)`` set by IOPS;
* ``read_mb``, ``ios``: per decode step, from the plan;
* from the run's summary: ``io_ms`` (I/O time per step), ``ssd_share`` (of the
  used SSDs' aggregate bandwidth) and ``cluster_mean`` (entries per cluster).

The paper's transition (Fig. 16's "latency increases slowly ... IOPS-bound ... then
scales approximately linearly with the data retrieved") is where ``bw_share`` passes
one half; the I/O time per step beside the bytes per step (the summary's) shows the
same from the other side.  Usage::

    python -m analysis.swarm_transition RESULTS_DIR [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from hwprofiles.loader import load_profile
from sim.runner import slug


def op_bounds(plan: pd.DataFrame, profile) -> pd.DataFrame:
    """Each SSD read of ``plan`` with its device time split by bound (seconds)."""
    reads = plan[(plan["kind"] == "read") & plan["src"].str.startswith("ssd")]
    eff = profile.efficiency.ssd
    rows = []
    for src, grp in reads.groupby("src"):
        spec = profile.ssd(src)
        bw = spec.read_gbps * 1e9 * eff
        iops = spec.read_iops * eff
        lat = spec.read_latency_us * 1e-6
        depth = grp["queue_depth"].where(grp["queue_depth"] > 0, spec.max_queue_depth)
        qd = depth.clip(upper=spec.max_queue_depth).clip(lower=1)
        n = grp["n_ios"].astype(float)
        b = grp["bytes"].astype(float)
        t = pd.DataFrame(
            {
                "bw": b / bw,
                "iops": n / iops,
                "queue": (n - qd).clip(lower=0) * lat / qd,
            }
        )
        bound = t.idxmax(axis=1)
        rows.append(
            pd.DataFrame(
                {
                    "src": src,
                    "bytes": b,
                    "n_ios": n,
                    "bound": bound,
                    "t_bound": t.max(axis=1),
                    "t_latency": lat,
                    "knee_bytes": bw / iops,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def per_io(plan: pd.DataFrame, profile) -> tuple[float, float, float]:
    """I/O by I/O: (share of I/Os below the knee, IOPS-set time, all time) over
    every SSD read, each extent cut into I/Os of at most the op's ``io_bytes``."""
    reads = plan[(plan["kind"] == "read") & plan["src"].str.startswith("ssd")]
    eff = profile.efficiency.ssd
    n_small = n_all = 0
    t_iops = t_all = 0.0
    for src, grp in reads.groupby("src"):
        spec = profile.ssd(src)
        bw, iops = spec.read_gbps * 1e9 * eff, spec.read_iops * eff
        for ext, cap in zip(grp["extents"], grp["io_bytes"], strict=True):
            length = np.array([e["length"] for e in ext], dtype=float)
            if cap > 0:
                full = np.floor(length / cap)
                rest = length - full * cap
                sizes = np.concatenate([np.repeat(float(cap), int(full.sum())), rest[rest > 0]])
            else:
                sizes = length
            per = np.maximum(sizes / bw, 1.0 / iops)
            low = sizes / bw < 1.0 / iops
            n_small += int(low.sum())
            n_all += len(sizes)
            t_iops += float(per[low].sum())
            t_all += float(per.sum())
    return (n_small / n_all if n_all else 0.0), t_iops, t_all


def run_report(run: Path) -> list[dict]:
    """One row per variant of the run folder ``run``."""
    scen = yaml.safe_load((run / "scenario.yaml").read_text())
    work = scen.get("workload", {})
    profile = load_profile(run / "profile.yaml")
    info = json.loads((run / "run.json").read_text())
    steps = int(info.get("steps") or work.get("steps") or 1)
    summary = pd.read_parquet(run / "summary.parquet")
    records = summary.to_dict("records")
    by_dir = {slug(v): r for v, r in zip(summary["variant"], records, strict=True)}
    out = []
    for vdir in sorted((run / "variants").iterdir()):
        plan_file = vdir / "plan.parquet"
        if not plan_file.exists():
            continue
        cols = ["kind", "src", "bytes", "n_ios", "queue_depth", "extents", "io_bytes"]
        plan = pd.read_parquet(plan_file, columns=cols)
        ops = op_bounds(plan, profile)
        if ops.empty:
            continue
        small, iops_t, all_t = per_io(plan, profile)
        srow = by_dir.get(vdir.name, {})
        total = ops["t_bound"].sum() + ops["t_latency"].sum()
        share = ops.groupby("bound")["t_bound"].sum() / total
        out.append(
            {
                "hw": profile.name,
                "context_tokens": int(work.get("context_tokens", 0)),
                "batch": int(work.get("batch", 0)),
                "profile_trace": work.get("profile_trace", "own"),
                "variant": vdir.name,
                "read_mb": ops["bytes"].sum() / steps / 1e6,
                "ios": ops["n_ios"].sum() / steps,
                "io_kib": ops["bytes"].sum() / ops["n_ios"].sum() / 1024,
                "iops_knee_kib": float(ops["knee_bytes"].iloc[0]) / 1024,
                "iops_share": float(share.get("iops", 0.0)),
                "bw_share": float(share.get("bw", 0.0)),
                "queue_share": float(share.get("queue", 0.0)),
                "latency_share": float(ops["t_latency"].sum() / total),
                "small_io_share": small,
                "iops_share_per_io": iops_t / all_t if all_t else 0.0,
                "io_ms": float(srow.get("io_ms_per_step", np.nan)),
                "ssd_share": float(srow.get("ssd_share_of_aggregate", np.nan)),
                "cluster_mean": float(srow.get("cluster_mean", np.nan)),
            }
        )
    return out


def report(root: Path) -> pd.DataFrame:
    """Every run folder under ``root`` (those holding a ``run.json``)."""
    rows = [r for run in sorted(p.parent for p in root.rglob("run.json")) for r in run_report(run)]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    keys = ["hw", "profile_trace", "variant", "batch", "context_tokens"]
    return df.sort_values(keys, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.swarm_transition", description=__doc__)
    ap.add_argument("results", type=Path, help="a kvtier sim or sweep output folder")
    ap.add_argument("--csv", type=Path, help="also write the table here")
    a = ap.parse_args(argv)
    if not a.results.is_dir():
        print(f"swarm_transition: {a.results}: not a folder", file=sys.stderr)
        return 2
    df = report(a.results)
    if df.empty:
        print(f"swarm_transition: {a.results}: no run with SSD reads under it", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.round(3).to_string(index=False))
    if a.csv:
        df.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The busiest link of each kind in a routed run's results (docs/fleet.md tables).

    python -m analysis.fleet_links RESULTS/SCENARIO/PROFILE

For every variant under ``variants/``: per link kind (GPU PCIe, PCIe switch
uplink, SSD PCIe, DRAM bus, NVLink, NIC port, leaf uplink), the link direction
that moved the most bytes, its load (bytes over the link's achievable rate,
``gbps`` x the profile's efficiency for that kind, x the run's span) and its busy
share (``util_mean``: the share of the run it carried a flow), and the bytes all
links of the kind moved.  A routed run's devices are the machine's
(:func:`sim.fleet.routed.fleet_records`), so this is the whole fleet.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from hwprofiles.loader import load_profile

KINDS = {  # kind -> (pattern on the link's name, efficiency field)
    "GPU PCIe": (r"(^|\.)gpu\d+\.pcie$", "pcie"),
    "switch uplink": (r"(^|\.)sw\d+\.up$", "pcie"),
    "SSD PCIe": (r"(^|\.)ssd\d+\.pcie$", "pcie"),
    "DRAM bus": (r"(^|\.)dram\d+\.bus$", "membus"),
    "NVLink": (r"(^|\.)gpu\d+\.nvlink$", "nvlink"),
    "NIC port": (r"\.nic\d+\.port$", "rdma"),
    "leaf uplink": (r"^leaf\d+\.up$", "rdma"),
}


def link_table(run_dir: Path) -> pd.DataFrame:
    profile = load_profile(str(run_dir / "profile.yaml"))
    rate = {ln.name: ln.gbps * 1e9 for ln in profile.topology.links}
    eff = profile.efficiency
    rows = []
    for vdir in sorted((run_dir / "variants").iterdir()):
        dev = pd.read_parquet(vdir / "devices.parquet")
        dev = dev[dev["type"] == "link"]
        req = pd.read_parquet(vdir / "requests.parquet", columns=["finish_s"])
        span = float(req["finish_s"].max())
        for kind, (pattern, field) in KINDS.items():
            base = dev["device"].str.rstrip("<>")
            mine = dev[base.map(lambda n, p=pattern: re.search(p, n) is not None)]
            if mine.empty:
                continue
            top = mine.loc[mine["bytes_read"].idxmax()]
            cap = rate[top["device"].rstrip("<>")] * getattr(eff, field) * span
            rows.append({
                "variant": vdir.name, "kind": kind, "busiest": top["device"],
                "load_pct": 100 * top["bytes_read"] / cap if cap > 0 else 0.0,
                "busy_pct": 100 * float(top["util_mean"]),
                "kind_gb": float(mine["bytes_read"].sum()) / 1e9,
            })  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / "variants").is_dir():
        print("usage: python -m analysis.fleet_links RESULTS/SCENARIO/PROFILE", file=sys.stderr)
        return 2
    print(link_table(Path(args[0])).round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

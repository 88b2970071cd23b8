"""Seed 002's Fig. 1 reload rows at each end of the profile's link efficiencies.

``kvtier sim --scenario swiftcache --sensitivity`` reruns the serving designs; Fig. 1's
reload (LWM-Text-1M, a 5K or 50K history in host memory, 256 new tokens, served on
gpu0 over PCIe) is a separate run (:func:`sim.scenarios.swiftcache.reload_point`), so
this script times it with the profile as given and with each named assumption at its
range ends (:func:`hwprofiles.assume.with_value`), exactly as the report changes one
number at a time.  Never edits a profile.

    python -m analysis.swift_reload_ends [--hw h20-4gpu-nvlink] [--assumptions A,B]
"""

from __future__ import annotations

import argparse

from hwprofiles.assume import with_value
from hwprofiles.loader import load_profile
from sim.scenarios.swiftcache import reload_point


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="h20-4gpu-nvlink")
    ap.add_argument("--assumptions", default="efficiency.pcie,efficiency.membus")
    args = ap.parse_args(argv)
    base = load_profile(args.hw)
    names = args.assumptions.split(",")
    runs = [("as given", base)] + [
        (f"{a.field} {v:g}", with_value(base, a.field, v))
        for a in base.assumptions
        if a.field in names
        for v in (a.low, a.high)
    ]
    print("run,reload_5k_pcie_ms,reload_share_5k,reload_share_50k")
    for name, p in runs:
        r5 = reload_point(p, "LWM-Text-1M", 5_000, 256, "pcie", 16)
        r50 = reload_point(p, "LWM-Text-1M", 50_000, 256, "pcie", 16)
        print(
            f"{name},{r5['reload_s'] * 1e3:.1f},{r5['reload_share']:.3f},{r50['reload_share']:.3f}"
        )


if __name__ == "__main__":
    main()

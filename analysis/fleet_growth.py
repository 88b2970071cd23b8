"""One point of the fleet's cost growth (docs/fleet.md, "The fleet targets, measured").

    python -m analysis.fleet_growth N REQUESTS ARRIVAL_SCALE

N gpu-only instances of ``fleet-mooncake-conversation`` (Llama-3.1-8B, one H100
each, prefix router) on ``fleet-8x-dgx-h100`` (64 GPUs), the Mooncake-shaped
conversation trace's first REQUESTS requests (0: all 12,031) with every arrival
time divided by ARRIVAL_SCALE.  Prints one JSON line: the process's CPU time in
all and in the run alone (``time.process_time``), the simulated span, the P99
TTFT, the GPU hit rate and the peak RSS (``ru_maxrss``).  Run each point in a
fresh process (the peak RSS is the process's).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        n, requests, scale = int(args[0]), int(args[1]), float(args[2])
    except (IndexError, ValueError):
        print("usage: python -m analysis.fleet_growth N REQUESTS ARRIVAL_SCALE", file=sys.stderr)
        return 2
    from hwprofiles import load_profile
    from sim.config import load_scenario
    from sim.runner import run

    cfg = load_scenario("fleet-mooncake-conversation")
    w = dataclasses.replace(cfg.workload, requests=requests, replicas=n, arrival_scale=scale)
    cfg = dataclasses.replace(cfg, workload=w, variants=cfg.variants[:1])  # gpu-only
    profile = load_profile("fleet-8x-dgx-h100")
    c0 = time.process_time()
    s = run(cfg, profile, None).summary().iloc[0]
    c1 = time.process_time()
    print(json.dumps({
        "N": n, "R": requests, "S": scale, "cpu_all": c1, "cpu_run": c1 - c0,
        "span_s": float(s["duration_s"]), "ttft_p99": float(s["ttft_p99_s"]),
        "hit_gpu": float(s["hit_rate_gpu"]),
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

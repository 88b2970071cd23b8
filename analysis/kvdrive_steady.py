"""KVDrive's GPU cache at steady state, and the same cache over the baselines'
selections (seed 003 Table 3).

    python -m analysis.kvdrive_steady --steps 128 --out analysis/kvdrive_steady.csv

Plans the lanes of Llama-3-8B-1048K at 120K x 4 (the workload of
``sim/scenarios/kvdrive-sens.yaml``, fitted generator, seed 0) for ``--steps``
decode steps, without simulating time: a hit rate depends only on the
selections, not on the timing.

* **KVDrive** (window 2, lookahead and LRU): each step's hits and misses as the
  design counts them (``info["gpu_hits"]``, ``info["gpu_misses"]``: the entries
  chosen beyond sinks and local window), summed over the four lanes.
* **Quest, ShadowKV, RetroInfer**: kvtier's designs keep no GPU cache of their
  own (RetroInfer's is a wave buffer of whole clusters). The paper's Table 3
  puts each eviction policy on a GPU cache "in every system"; here that cache
  is KVDrive's :class:`~sim.policies.kvdrive.gpucache.WindowCache`, with
  KVDrive's capacity (2 step budgets), fed each design's own selections beyond
  sinks and local window, starting empty.  Lookahead evicts the entries whose
  current-step score is lowest (the paper's rule), each scored as the design
  itself estimates it, per unit (:func:`unit_scores`), as KVDrive's own
  lookahead scores an entry by its centroid.

Steady state: the rate per block of 16 steps; the first block is the warm-up,
and the steady state is the rate pooled over every later step, with the
least-squares slope of the later blocks' rates (near 0: it stopped rising).
The printout gives the blocks, so both can be checked by hand.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace
from pathlib import Path

import numpy as np

from hwprofiles.loader import load_profile
from sim.scenarios.kvdrive_kind import KVDriveParams
from sim.scenarios.kvdrive_table3 import STEADY_AFTER, lane_cache_steps
from sim.scenarios.swarm import build_lanes, replay_lane

BLOCK = STEADY_AFTER  # steps per block of the steady-state rule (the first: warm-up)
BASE = KVDriveParams(  # sim/scenarios/kvdrive-sens.yaml's workload
    model="Llama-3-8B-1048K",
    context_tokens=122880,
    batch=4,
    sparsity=0.0156,
    steps=16,
    profile_steps=32,
    layers_modeled=1,
    layers=8,
    trace="smollm2-fitted",
    local_window=64,
    sink_tokens=4,
    dram_fill=True,
    host_reserved_gb=8,
    design="kvdrive",
    micro_batches=2,
    io_path="io_uring",
    pinned_mb=4000,
    design_params={"sync": "balanced", "ssd_io": "memmap"},
)
KVDRIVES = {"KVDrive (lookahead)": "kvdrive", "KVDrive (LRU)": "kvdrive-lru"}
BASELINES = ("quest", "shadowkv", "retroinfer")


def kvdrive_steps(p: KVDriveParams, profile, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(hits, misses) per step over every lane, as KVDrive counts them."""
    _, layout, built = build_lanes(p, profile, seed)
    hits, misses = np.zeros(p.steps), np.zeros(p.steps)
    for lane in built.values():
        for t, d in enumerate(replay_lane(lane, p, layout).decisions):
            hits[t] += d.info["gpu_hits"]
            misses[t] += d.info["gpu_misses"]
    return hits, misses


def cache_steps(
    p: KVDriveParams,
    profile,
    seed: int,
    policies: tuple[str, ...],
    window: int = 2,
    scores: str = "unit",
):
    """Per policy, (hits, misses) per step over every lane of Table 3's window cache
    (:func:`sim.scenarios.kvdrive_table3.lane_cache_steps`) fed the design's
    selections; the design is built and replayed once for all policies."""
    _, layout, built = build_lanes(p, profile, seed)
    out = {pol: (np.zeros(p.steps), np.zeros(p.steps)) for pol in policies}
    for lane in built.values():
        decisions = replay_lane(lane, p, layout).decisions
        got = lane_cache_steps(lane, decisions, p, layout, policies, window, scores)
        for pol, (h, m) in got.items():
            out[pol][0][:] += h
            out[pol][1][:] += m
    return out


def blocks(hits: np.ndarray, misses: np.ndarray) -> np.ndarray:
    """The hit rate of each whole block of :data:`BLOCK` steps."""
    n = len(hits) // BLOCK
    h = hits[: n * BLOCK].reshape(n, BLOCK).sum(axis=1)
    return h / (hits + misses)[: n * BLOCK].reshape(n, BLOCK).sum(axis=1)


def steady(hits: np.ndarray, misses: np.ndarray) -> tuple[float, float]:
    """(the hit rate pooled over every step after the first block, the
    least-squares slope of the block rates after the first, per block): the
    first block is the warm-up; a slope near 0 says the rate stopped rising."""
    rates = blocks(hits, misses)[1:]
    pooled = float(hits[BLOCK:].sum() / (hits[BLOCK:] + misses[BLOCK:]).sum())
    slope = float(np.polyfit(np.arange(len(rates)), rates, 1)[0]) if len(rates) > 1 else 0.0
    return pooled, slope


def report(rows: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """One line per row: the run's rate over its first 2 / 16 / 32 steps, each
    block's, and :func:`steady`'s two figures, in percent (points per block)."""
    for name, (h, m) in rows.items():
        run = [float(h[:n].sum() / (h[:n] + m[:n]).sum()) for n in (2, 16, 32) if n <= len(h)]
        pooled, slope = steady(h, m)
        print(
            f"{name}: over steps 1-2 / 1-16 / 1-32 "
            + " / ".join(f"{100 * v:.1f}" for v in run)
            + f"%; per {BLOCK}-step block "
            + ", ".join(f"{100 * r:.1f}" for r in blocks(h, m))
            + f"%; steps {BLOCK + 1}-{len(h)}: {100 * pooled:.1f}%, "
            + f"slope {100 * slope:+.2f} points per block"
        )


def load(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The per-step counts a run wrote (``--out``), by row."""
    got: dict[str, list[tuple[int, int]]] = {}
    with path.open() as f:
        for r in csv.DictReader(f):
            got.setdefault(r["row"], []).append((int(r["hits"]), int(r["misses"])))
    return {
        k: tuple(np.array(c, dtype=np.float64) for c in zip(*v, strict=True))
        for k, v in got.items()
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--hw", default="l20-server")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated row names (default: all)")
    ap.add_argument(
        "--scores",
        choices=("unit", "exact"),
        default="unit",
        help="the baselines' lookahead scores: per unit (the design's) or per entry",
    )
    ap.add_argument("--out", type=Path, default=Path("analysis/kvdrive_steady.csv"))
    ap.add_argument("--report-only", action="store_true", help="print --out's counts, run nothing")
    args = ap.parse_args(argv)
    if args.report_only:
        report(load(args.out))
        return
    profile = load_profile(args.hw)
    p = replace(BASE, steps=args.steps)
    rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    want = set(filter(None, args.only.split(",")))
    for name, design in KVDRIVES.items():
        if not want or name in want:
            rows[name] = kvdrive_steps(replace(p, design=design), profile, args.seed)
    labels = {"lookahead": "lookahead", "lru": "LRU"}
    for design in BASELINES:
        base = replace(p, design=design, micro_batches=1, design_params={})
        pols = tuple(x for x in labels if not want or f"{design} ({labels[x]})" in want)
        if pols:
            got = cache_steps(base, profile, args.seed, pols, scores=args.scores)
            for pol, counts in got.items():
                rows[f"{design} ({labels[pol]})"] = counts
    with args.out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["row", "step", "hits", "misses"])
        for name, (h, m) in rows.items():
            w.writerows([name, t, int(h[t]), int(m[t])] for t in range(len(h)))
    report(rows)
    print(f"per-step counts: {args.out}")


if __name__ == "__main__":
    main()

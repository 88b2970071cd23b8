"""Serving-engine speed benchmark on a Mooncake-shaped conversation trace.

    python -m sim.serving.bench --requests 1000 --design lmcache --block 256

The trace comes from :func:`traces.conversation.generate_conversations` with
sessions shaped after the Mooncake conversation trace (FAST'25: 12,031
requests over 3,537 s, mean input ~12K tokens, p99 ~85K, ~37% of prompt
tokens reusable).  The paper gives only those totals, so the generator's
parameters were fitted to them (measured on 12K drawn requests, seeds 0-2:
mean input 12.3-12.4K, p99 85-87K, reusable 37.6-38.4%, 3.3-3.4 requests/s):
session totals log-normal with median 6K and p99 78K tokens; user turns
log-normal with median 16K and p90 64K tokens, capped by what is left of
the session, so that most sessions are one or two long turns (reuse comes
from the history a later turn re-sends; more, shorter turns give more of
it); 2.4 sessions/s with 60 s mean think time, so that requests arrive at
~3.4/s.  tests/sim/test_serving_bench.py checks a drawn trace against these
targets.  The printed trace statistics (mean and p99 input, reusable share
= hashed blocks seen before / all hashed blocks) are measured on the drawn
trace, not assumed.

The run keeps no plan (``keep_plan=False``: no extents, no dependencies;
the op records need neither).  Prints requests served, simulated span
(last finish), wall time, speed vs real time (simulated span / wall), the
process's CPU time in the run and the speed per CPU second (simulated span /
CPU time: what a loaded machine's wall time hides), and the process's peak
RSS, at the end and before the run's first event (the trace and the
engine's setup), so what the run itself adds shows.

Measured 2026-11-24 05:25-05:42 (branch sfast3 at 7e525cc: waiting stores
re-placed only when a drain can change their verdict, and then only their
keys that fit; no column of the baseline runs changes), Llama-3.1-8B on
h100-2dimm-2ssd, seed 0, back to back on the 2-core machine shared with five
other helpers (``uptime`` load average 5.0-9.3), so wall times are 1-4x the
CPU time; the CPU time of the run (``time.process_time``) is the figure to
compare.  CPU s / simulated span s / speed per CPU second (speed per wall
second) / peak RSS MiB:

======================  ==================================  ==============================
design                  block 256, 1K requests              block 16, 1K requests
======================  ==================================  ==============================
gpu-only                0.40 / 499 / 1,249x (1,241x) / 157  1.32 / 496 / 377x (151x) / 200
hicache                 0.40 / 499 / 1,234x (875x) / 157    1.49 / 496 / 334x (72x) / 200
lmcache                 1.60 / 569 / 357x (129x) / 157      17.1 / 573 / 34x (12x) / 278
lmcache-lp              1.66 / 512 / 308x (103x) / 163      9.98 / 568 / 57x (43x) / 242
lmcache-lp-async        1.65 / 452 / 273x (63x) / 157       9.47 / 453 / 48x (47x) / 238
paged-cpu               0.70 / 498 / 711x (160x) / 157      2.74 / 497 / 182x (180x) / 200
paged-cpu-ssd           5.68 / 758 / 134x (37x) / 164       81.2 / 806 / 9.9x (5.5x) / 305
paged-ssd               1.14 / 457 / 400x (161x) / 157      5.07 / 459 / 91x (54x) / 200
pool                    3.16 / 481 / 152x (29x) / 169       21.0 / 482 / 23x (15x) / 286
pool-orchestrator-only  3.31 / 482 / 145x (33x) / 169       22.7 / 485 / 21x (7.7x) / 284
pool-passthrough-only   1.55 / 452 / 292x (132x) / 158      11.2 / 453 / 40x (23x) / 239
======================  ==================================  ==============================

Growth with the request count, block 256, CPU s / span s / speed per CPU
second (1K / 4K / 12K requests): gpu-only 0.40 / 1.24 / 3.80 s, 1,249x /
1,755x / 1,801x; lmcache 1.60 / 4.72 / 11.75 s, 357x / 480x / 591x; pool
3.16 / 12.9 / 40.2 s, 152x / 167x / 170x; paged-cpu-ssd 5.68 / 23.9 /
78.4 s, 134x / 157x / 151x (spans 758 / 3,753 / 11,857 s).  CPU time
grows linearly with the simulated span (speed does not fall from 1K to 12K).
Peak RSS 234 MiB at 4K, 446 MiB at 12K, all of it there before the run's
first event (the trace).

paged-cpu-ssd before these changes (back to back at 05:44-05:46, load 6.3-7.4;
process CPU including ~1 s of trace and setup): 1K requests at block 256
9.10 s -> 5.70 s; 200 requests at block 16 36.7 s -> 8.80 s.  Its waiting
stores (each retried at every demotion that drained, over all its keys)
were quadratic in the queue; at block 16 it could not be run to 1K before.
Still below 300x per CPU second: at block 256 lmcache-lp-async (273x), the
pool family and paged-cpu-ssd; at block 16 every design but gpu-only and
hicache.  Where the time goes now: per-key pool placement
(:func:`sim.serving.tierplace.place_pool`'s short keys, ~35K at 1K
requests, each a distinct spill or eviction), the flow network's re-rating
per op, and at block 16 per-block bookkeeping in lookup, store and the
GPU cache (9M blocks).

Branch sfast4a, 2026-11-24 06:00-06:20, load 6-7, 1K requests, block 16,
CPU s of the run against the starting tree (aad03c6) in the same session:
lookups as C-level maps over a request's keys with galloping prefix
searches (no column changes): gpu-only 1.35 -> 1.25 s, lmcache 17.5 ->
17.05 s; then a non-layer-wise load as one op per device (a modelling
change, its own commit: spans 573.1 -> 585.1 s): lmcache 11.14 s (52x per
CPU second).  The full table above was not re-measured.

Pool placement by runs (2026-11-24 06:20, branch sfast4b: keys that fit
or spill alike decided per window, :mod:`sim.serving.poolplace`; no column
of the baseline runs changes), same run against the previous tree, load
~5: pool, block 16, 300 requests (mostly spilling to the SSDs) 3.43 ->
2.65 CPU s (36x -> 46x per CPU second); 1K requests (mostly evicting, one
or two victims per key) 22.05 -> 21.54 s (22x); block 256, 1K 2.88 ->
2.87 s (167x).  Once the tier evicts, each key still takes its victims
and their slots one by one.

Pool eviction fused, waiting stores indexed (2026-11-24 07:15-07:16,
branch sfast5 against its starting tree 5c398ea in the same run, load 2.0;
no column of the baseline runs changes): a full pool's keys whose victims
are dropped, and a key that spills between two of them, decided in one
loop (:mod:`sim.serving.pooldrop`); waiting stores indexed by key
(:mod:`sim.serving.waiters`).  CPU s: pool, block 16, 1K requests 21.68 ->
19.10 s (22x -> 25x per CPU second); block 256, 1K 2.98 -> 2.81 s (161x ->
171x); paged-cpu-ssd, block 16, 300 requests 12.60 -> 11.94 s.  Still per
key once the pool evicts (~281K keys at block 16, 1-2 victims each): its
spill check (several Algorithm 1 layouts tried per key), the victims'
stale items on the other devices' heaps, and one slot per run; at
paged-cpu-ssd each drain places one key and starts its demotions (the
store and demotion transfers are most of what is left there).

One-device tiers by runs (2026-11-24 08:40-09:05, branch srun1 against its
starting tree 96828e4, back to back per row, load 4.5-11.6; spans identical,
no column of the baseline runs changes): a key's victims counted first and
taken in one batch (:meth:`sim.serving.lru.LruRuns.take`), a full tier's
dropped victims replaced by a run of keys, entries built by one ``map``,
``entries`` a plain dict.  CPU s before -> after (block 16: 300 / 1K
requests; block 256: 1K): lmcache 1.64 -> 1.38 / 12.05 -> 10.28 / 1.24 ->
1.04 s (1K, block 16: 57x per CPU second); lmcache-lp 1.79 -> 1.38 / 10.67
-> 8.68 / 1.56 -> 1.47 s (65x); paged-ssd 0.82 -> 0.78 / 3.61 -> 3.65 /
0.94 -> 0.89 s; paged-cpu-ssd 13.7 -> 14.7 / 87.9 -> 86.3 / 6.18 -> 6.40 s
(unchanged: one key per drain, its time is the store and demotion ops).
The tier's placement in lmcache, 1K at block 16: 2.65 -> 1.17 s.  What is
left is per key, not per victim: one ``Entry`` per key (738K) and Python's
cyclic GC, which those allocations drive: with the young-generation
threshold at 10,000 instead of 700 the same run takes 6.7 s instead of 9.1
(gc off: 6.5 s; ``gc.freeze()`` at the start of the run: 8.2 s).

GPU cache by slots and runs (2026-11-24 09:09-09:10, branch srun2 at
f88faf9 against its starting tree 96828e4 in the same run, load 2.2-3.3;
no column of the baseline runs changes): the GPU cache as arrays over
slots, reference counts updated by vector operations over a request's
blocks (one by one for a few), the LRU a queue of runs released together,
``allocate(n)`` taking the n oldest at once (:mod:`sim.serving.gpucache`);
a lookup's lower hits worked out only once the GPU room is sure, so that a
refused admission probes no tier (:mod:`sim.serving.prefix`); store groups
masked in numpy; store pieces grouped by layout with C-level compares.
CPU s before -> after (speed per CPU second): block 16, 300 requests:
gpu-only 0.39 -> 0.29 s, hicache 0.38 -> 0.28 s, paged-cpu 0.69 -> 0.56 s,
lmcache 1.57 -> 1.26 s, pool 2.24 -> 2.08 s; block 16, 1K: gpu-only 1.22
-> 0.63 s (406x -> 787x), hicache 1.21 -> 0.63 s (409x -> 784x), paged-cpu
2.72 -> 1.68 s (182x -> 296x), lmcache 10.21 -> 5.37 s (57x -> 109x; most
of it from refused admissions, 1,814 of 2,814 lookups); block 256, 1K:
gpu-only 0.36 -> 0.40 s (1,375x -> 1,235x), hicache 0.37 -> 0.40 s,
paged-cpu 0.66 -> 0.67 s, lmcache 1.10 -> 1.02 s; paged-cpu-ssd, block 16,
150 requests: 4.77 -> 4.95 s (16K single-group stores, each a few scalar
array accesses).  At 256-token blocks a request holds ~47 blocks, too few
for numpy's per-call cost (~30 array operations per request) to pay off.

Pool eviction by runs of the LRU and remembered room checks (2026-11-24
08:55-09:10, branch spool against its starting tree 96828e4 in the same
run, load 4-9; 0 of 1,054 baseline columns differ): a device's victims
read straight off the run on top of its LRU heap, the cursor written back
once (:mod:`sim.serving.poolcursor`); every fit and spill check a position
among exact float thresholds, the spill decision remembered per state
(:mod:`sim.serving.poolroom`); a full pool's spills placed in the evicting
loop up to 4 in a row, entries made, stamps and live counts added once per
loop (:mod:`sim.serving.pooldrop`).  CPU s before -> after (speed per CPU
second): block 16, 300 requests: pool 2.24 -> 2.01 (55x -> 61x),
pool-orchestrator-only 2.38 -> 2.05 (53x -> 61x), pool-passthrough-only
2.13 -> 2.11; block 16, 1K: pool 20.49 -> 15.47 (24x -> 32x),
pool-orchestrator-only 21.29 -> 15.60 (25x -> 34x), pool-passthrough-only
10.80 -> 10.23 (46x -> 48x; one device per tier, not this path); block
256, 1K: pool 2.78 -> 2.61 (175x -> 186x), pool-orchestrator-only 2.90 ->
2.63 (168x -> 186x), pool-passthrough-only 1.73 -> 1.73.  Pool placement
at block 16, 1K: ~6.7 of the 15.5 s (~595K keys, ~11 us each, ~490K
victims); the rest is outside it (GPU cache, lookups, store pieces).  The
final tree of the branch (4b8e647: victims' counts once per loop, the
index following a resized peer tier), same run against 96828e4 at load
2-2.6: block 16, 1K: pool 18.10 -> 12.55 s (27x -> 40x),
pool-orchestrator-only 18.75 -> 13.58 s (28x -> 39x); block 256, 1K: pool
2.83 -> 2.55 s (172x -> 191x).

Transfer pieces and per-entry loops (2026-11-24 10:01-10:02, branch slmc
at 3735cda against its starting tree feab5bd in the same run, interleaved,
load 2.4-3.1; 0 of 1,054 baseline columns differ): store pieces of entries
with one layout as one broadcast add per run (700 entries: 417 -> 132 us),
load pieces of hits of one tier and one layout by broadcast (700 hits,
layer-wise: 3.19 -> 0.27 ms; per device: 0.98 -> 0.16 ms), the LRU's
one-device victim walk as one tight loop, pins per run.  On CPython 3.11
a list comprehension over ``__slots__`` attributes (~40 ns an entry) beats
C-level ``map`` over ``attrgetter`` (~275 ns for the same test): tried and
dropped.  CPU s before -> after (speed per CPU second): block 16, 300
requests: lmcache 0.95 -> 0.89 s, lmcache-lp 1.05 -> 0.90 s,
lmcache-lp-async 1.04 -> 0.91 s; block 16, 1K: lmcache 3.13 -> 2.64 s
(187x -> 222x), lmcache-lp 3.76 -> 3.14 s (151x -> 181x), lmcache-lp-async
4.09 -> 3.40 s (149x -> 179x); block 256, 1K: lmcache 0.92 -> 0.88 s,
lmcache-lp 1.40 -> 1.33 s, lmcache-lp-async 1.47 -> 1.40 s.  Still short
of 300x at block 16: one ``Entry`` per key stored (~0.3 us each to build,
738K), the store groups' dict probes in every tier, and per-entry LRU
offers (~0.1 us an entry over 1.29M offered); Python's cyclic GC takes
~0.25 s of the lmcache run (259 young, 23 middle, 2 full collections).
Commit 60be36a (write-through by list comprehensions) re-measured at
10:05, two interleaved pairs at a higher load: lmcache, block 16, 1K:
3.71 / 3.52 -> 2.85 / 3.05 s.

Earlier, 2026-11-24 04:34-04:37 on a quiet machine (load 0.9-1.1; branch
sonline2, wall time): block 256, 1K requests, gpu-only 1,260x, paged-cpu
769x, paged-ssd 445x, lmcache 364x, lmcache-lp 336x, lmcache-lp-async 310x,
pool-passthrough-only 283x, pool-orchestrator-only 167x, pool 166x,
paged-cpu-ssd 86x; block 16: lmcache 35x, pool 22.5x.

paged-cpu-ssd's drain path (2026-11-24 09:50-10:05, branch spcs against
its starting tree feab5bd, back to back, load 2-3; no column of the
baseline runs changes): each drain stores one key and demotes one victim,
a transfer of one entry each, whose pieces now come from a template per
layout pair (:mod:`sim.serving.onepiece`: the entry's slots added to
offsets worked out once), and the stores' transfers run as callbacks at the
instants their simpy processes stepped, with no ``layer_done`` events
nobody waits for (:mod:`sim.serving.stores`).  CPU s before -> after
(per CPU second): paged-cpu-ssd, block 16, 300 requests 11.24 -> 8.10 s
(13x -> 18x); 1K 56.5 -> 37.7 s (14x -> 21x); block 256, 1K 5.00 -> 3.87 s
(152x -> 196x); no change elsewhere: paged-ssd block 256 1K 0.89 -> 0.90 s,
block 16 300 0.54 -> 0.54 s; lmcache block 256 1K 0.91 -> 0.92 s, block 16
300 0.90 -> 0.93 s.  Still one store and one demotion op per drain (147K
drains at 1K, block 16: ~255 us each, about half of it the ops' own events
and flows); each drain also re-places the head waiting store whole (~120
keys, C-level passes in :meth:`BlockManager.place_store` and the tier's
placement), which only a placement that stops at the first dry key could
avoid.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from hwprofiles.loader import load_profile
from sim.models import get_model
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import DESIGNS, get_design
from sim.serving.engine import EngineConfig
from sim.serving.requests import Request, load_requests
from traces.conversation import ConversationParams, Exponential, LogNormal, generate_conversations

# fitted to Mooncake's totals (module docstring)
MOONCAKE_SESSION_TOKENS = LogNormal.from_quantiles(0.5, 6_000, 0.99, 78_000, lo=64, hi=131_072)
MOONCAKE_PROMPT_TOKENS = LogNormal.from_quantiles(0.5, 16_000, 0.9, 65_536, lo=1, hi=65_536)
MOONCAKE_SESSION_RATE = 2.4  # sessions/s: ~3.4 requests/s
MOONCAKE_THINK_S = 60.0  # mean think time between a session's turns
TRACE_BLOCK = 16  # hash granularity of the generated trace (divides 16 and 256)


def mooncake_table(n: int, seed: int = 0) -> pa.Table:
    """The first ``n`` requests (by arrival) of a Mooncake-shaped trace, as a
    request table with ``TRACE_BLOCK``-token block hashes."""
    params = ConversationParams(
        sessions=max(1, n),  # at least one request per session: enough sessions
        rate=MOONCAKE_SESSION_RATE,
        session_tokens=MOONCAKE_SESSION_TOKENS,
        prompt_tokens=MOONCAKE_PROMPT_TOKENS,
        think_time_s=Exponential(MOONCAKE_THINK_S),
        block_tokens=TRACE_BLOCK,
    )
    table = generate_conversations(params, seed=seed).table
    return table.slice(0, n).replace_schema_metadata({"block_tokens": str(TRACE_BLOCK)})


def mooncake_requests(n: int, engine_block: int, seed: int = 0) -> list[Request]:
    """The first ``n`` requests (by arrival) of a Mooncake-shaped trace."""
    return load_requests(mooncake_table(n, seed), engine_block)


def table_stats(table: pa.Table) -> dict[str, float]:
    """:func:`trace_stats` of a request table at its own block size
    (vectorised), and the arrival rate (requests / last arrival)."""
    inp = table.column("input_tokens").to_numpy()
    col = table.column("block_hashes")
    flat = np.concatenate([np.asarray(c.flatten(), dtype=np.int64) for c in col.chunks])
    flat.sort()  # distinct values without np.unique's further copies
    seen_first = int(np.count_nonzero(flat[1:] != flat[:-1])) + 1 if len(flat) else 0
    last = float(table.column("arrival_s").to_numpy().max())
    return {
        "mean_input": float(inp.mean()),
        "p99_input": float(np.percentile(inp, 99)),
        "reusable": 1.0 - seen_first / max(len(flat), 1),
        "rate": table.num_rows / last if last > 0 else float("inf"),
    }


def trace_stats(reqs: list[Request]) -> dict[str, float]:
    """Mean/p99 input tokens and the share of hashed blocks seen before."""
    inp = np.array([r.input_tokens for r in reqs], dtype=np.float64)
    seen: set[int] = set()
    total = reused = 0
    for r in reqs:
        hs = r.hashes
        reused += sum(1 for h in hs if h in seen)
        total += len(hs)
        seen.update(hs)
    return {
        "mean_input": float(inp.mean()),
        "p99_input": float(np.percentile(inp, 99)),
        "reusable": reused / max(total, 1),
    }


def run(
    requests: int, design: str, block: int, hw: str, model: str, seed: int,
    tiers_gib: tuple[float, float] = (18.63, 186.26), progress: bool = False,
) -> dict:  # fmt: skip
    """Build and run one engine (``tiers_gib``: host-memory and SSD offload
    budgets, seed 004's 20 GB and 200 GB by default, for the tiers the design has:
    :func:`_tier_overrides`); the measured numbers."""
    profile = load_profile(hw)
    card = get_model(model)
    table = mooncake_table(requests, seed)
    stats = table_stats(table)
    reqs = load_requests(table, block)
    del table
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=False)  # fmt: skip
    engine = build_engine(
        profile,
        card,
        get_design(design, _tier_overrides(design, tiers_gib)),
        cfg,
        reqs,
    )
    before = _peak_rss_mib()  # the trace and the engine, before any event
    t0, c0 = time.perf_counter(), time.process_time()
    records = engine.run(_progress(t0) if progress else None)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0  # this process alone: robust to a loaded machine
    table = records.requests
    assert table is not None
    span = float(np.nanmax(table.column("finish_s").to_numpy(zero_copy_only=False)))
    rss_mib = _peak_rss_mib()
    speed = span / wall if wall > 0 else float("inf")
    speed_cpu = span / cpu if cpu > 0 else float("inf")
    return {"requests": len(reqs), **stats, "span_s": span, "wall_s": wall, "cpu_s": cpu,
            "speed": speed, "speed_cpu": speed_cpu, "peak_rss_mib": rss_mib,
            "setup_peak_rss_mib": before}  # fmt: skip


def _peak_rss_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tier_overrides(design: str, tiers_gib: tuple[float, float]) -> dict[str, float]:
    """The offload budgets for the tiers ``design`` has: a paged design keeps its own
    tiers (paged-cpu has no SSD), seed 004's designs (write-through, capacities set by
    the scenario) get both, GPU only none (a host-memory tier would make it another
    design)."""
    base = get_design(design)
    sizes = {"cpu_gib": tiers_gib[0], "ssd_gib": tiers_gib[1]}
    if base.has_offload:
        return {k: v for k, v in sizes.items() if getattr(base, k) > 0}
    return sizes if base.cpu_to_ssd == "write_through" else {}


def _progress(t0: float) -> Callable[[float, int, int], None]:
    """A one-line progress report on stderr: simulated time, requests done, wall."""

    def show(now: float, done: int, total: int) -> None:
        end = "\n" if done == total else ""
        wall = time.perf_counter() - t0
        print(f"\r  sim {now:,.1f} s  {done:,}/{total:,} requests  wall {wall:,.1f} s",
              end=end, file=sys.stderr, flush=True)  # fmt: skip

    return show


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.serving.bench", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--design", default="lmcache", choices=DESIGNS.names())
    ap.add_argument("--block", type=int, default=256, help="engine KV block, tokens")
    ap.add_argument("--hw", default="h100-2dimm-2ssd")
    ap.add_argument("--model", default="Llama-3.1-8B")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-gib", type=float, default=18.63, help="host-memory offload budget")
    ap.add_argument("--ssd-gib", type=float, default=186.26, help="SSD offload budget")
    a = ap.parse_args(argv)
    if a.requests < 1 or a.block < 1 or a.block % TRACE_BLOCK:
        print(f"bench: --requests >= 1 and --block a multiple of {TRACE_BLOCK}", file=sys.stderr)
        return 2
    m = run(a.requests, a.design, a.block, a.hw, a.model, a.seed, (a.cpu_gib, a.ssd_gib), True)
    print(
        f"{a.design} block={a.block} requests={m['requests']} "
        f"input mean={m['mean_input']:,.0f} p99={m['p99_input']:,.0f} "
        f"reusable={m['reusable']:.0%} | span={m['span_s']:,.1f} s wall={m['wall_s']:,.2f} s "
        f"speed={m['speed']:,.1f}x real time cpu={m['cpu_s']:,.2f} s "
        f"({m['speed_cpu']:,.1f}x real time per CPU second) peak RSS={m['peak_rss_mib']:,.0f} MiB "
        f"(before the run: {m['setup_peak_rss_mib']:,.0f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

``--json`` prints the same measures (and the run's op and flow counts) as
one JSON line instead: ``kvtier bench-serving`` (``make bench-serving``)
runs every design and block that way, each in a fresh process, and prints
the table.

Measurements (CPU s and speed per CPU second per design and block, growth
with the request count, peak RSS) and what each speed change bought are
kept in ``docs/serving-speed.md``.
"""

from __future__ import annotations

import argparse
import json
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
from sim.serving.execute.engine import Engine, EngineConfig
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
    table = mooncake_table(requests, seed)
    stats = table_stats(table)
    reqs = load_requests(table, block)
    del table
    engine = build(reqs, design, block, hw, model, tiers_gib)
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
    ops, flows = int(records.stats["ops"]), int(records.stats["flows"])
    return {"requests": len(reqs), **stats, "span_s": span, "wall_s": wall, "cpu_s": cpu,
            "speed": speed, "speed_cpu": speed_cpu, "peak_rss_mib": rss_mib,
            "setup_peak_rss_mib": before, "ops": ops, "flows": flows}  # fmt: skip


def build(
    reqs: list[Request], design: str, block: int, hw: str, model: str,
    tiers_gib: tuple[float, float] = (18.63, 186.26), keep_plan: bool = False,
) -> Engine:  # fmt: skip
    """The benchmark's engine for ``reqs``: 90% of the GPU's memory left after the
    weights as KV blocks of ``block`` tokens, the design's tiers sized by ``tiers_gib``
    (:func:`_tier_overrides`), the plan kept only when ``keep_plan``."""
    profile = load_profile(hw)
    card = get_model(model)
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    cfg = EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                       gpu=profile.gpu_names[0], keep_plan=keep_plan)  # fmt: skip
    return build_engine(
        profile, card, get_design(design, _tier_overrides(design, tiers_gib)), cfg, reqs
    )


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
    ap.add_argument("--json", action="store_true", help="print the measures as one JSON line")
    a = ap.parse_args(argv)
    if a.requests < 1 or a.block < 1 or a.block % TRACE_BLOCK:
        print(f"bench: --requests >= 1 and --block a multiple of {TRACE_BLOCK}", file=sys.stderr)
        return 2
    m = run(
        a.requests, a.design, a.block, a.hw, a.model, a.seed, (a.cpu_gib, a.ssd_gib), not a.json
    )
    if a.json:
        print(json.dumps({"design": a.design, "block": a.block, **m}))
        return 0
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

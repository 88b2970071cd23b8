"""Serving-engine speed benchmark on a Mooncake-shaped conversation trace.

    python -m sim.serving.bench --requests 1000 --design lmcache --block 256 --load 0.8

The trace comes from :func:`traces.conversation.generate_conversations` with
sessions shaped after the Mooncake conversation trace (FAST'25: 12,031
requests over 3,537 s, mean input ~12K tokens, p99 ~85K, ~37% of prompt
tokens reusable).  The paper gives only those totals, so the generator's
parameters were fitted to them (measured on 12K drawn requests, seeds 0-2:
mean input 12.0-12.1K, p99 85.5-86.9K, reusable 37.5-38.4%, 3.29-3.38
requests/s): session totals log-normal with median 6K and
p99 78K tokens; user turns log-normal with median 16K and p90 64K tokens,
capped by what is left of the session, so that most sessions are one or two
long turns (reuse comes from the history a later turn re-sends; more,
shorter turns give more of it); 2.4 sessions/s with 60 s mean think time, so
that requests arrive at ~3.4/s.  tests/sim/test_serving_bench.py checks a
drawn trace against these targets.  The printed trace statistics (mean and
p99 input, reusable share = hashed blocks seen before / all hashed blocks)
are measured on the drawn trace, not assumed.

**Output lengths.**  Mooncake's trace release (kvcache-ai/Mooncake,
``FAST25-release``, and the paper's appendix) gives per-workload means:
conversation 12,035 input / 343 output tokens, tool-and-agent 8,596 / 182,
synthetic 15,325 / 149.  The shape is fitted on the conversation trace
itself: 270 requests read from ``FAST25-release/traces/conversation_trace.jsonl``
(commit a2a4b18, the requests in four 16,000-character windows at character
offsets 0, 1.0M, 2.0M and 2.95M of its 3.03M: the start, middle and end of
the trace) have mean 333, p10 26, p25 148, median 348, p90 593, p99 981
output tokens, and 40 of them (14.8%) are under 50 tokens: a group of short
replies (1-45 tokens, log-mean 2.45, log-sd 1.11) beside a body of answers
(50-1,342 tokens, median 379, p90 616).  No single log-normal has that
shape: the Azure LLM inference conversation trace (Splitwise, ISCA'24;
CC-BY 4.0; /work/shared/traces/azure, 19,366 requests) has log-sd 0.86
(median 129, p90 424, mean 211), and a log-normal with that log-sd and mean
343 would have median 237 and p90 713.  The fit
(:data:`MOONCAKE_OUTPUT_TOKENS`) is therefore a mixture of two log-normals:
14.8% short replies (median 11.6, sigma 1.11, at least 1 token) and 85.2%
answers with the log-sd of the body's median and p90 (0.379) and the median
that makes the mixture's mean Mooncake's published 343 (371 tokens).  Drawn,
it gives median ~341, p90 ~582, p25 ~238 (the sample's 148: the body's lower
tail, 50-200 tokens, is thinner than the sample's; Kolmogorov-Smirnov
distance 0.12 over the 270), 13.4% under 50 tokens; in the drawn trace
(12K requests, seeds 0-2, where a session shorter than its answer cuts it)
mean 336-342, median 337-341, p90 571-578, 13-14% under 50.  The generator keeps
every answer whole (``whole_answers``: the session total cuts the last
prompt instead), so the outputs follow this fit rather than what a session
has left; before this fit every reply of a one-turn session was 1 token
(median 1, mean 53), a quarter of the decode work of Mooncake's trace.  The
serving baseline (:mod:`sim.serving.baseline`) keeps that earlier trace
(``fitted_outputs=False``) so that its saved runs stay comparable.

**Load.**  The trace's own rate (3.4 requests/s) is more than one instance
serves: ``--load RHO`` stretches the arrival times (arrival rate and think
times alike) so that the offered load is ``RHO``.  The offered load is the
engine's own overload estimate (:func:`sim.limits.offered_load`: arrival
rate x the mean request's prefill and decode time on the GPU, roofline from
:mod:`sim.serving.policy.costs`) with one change: its decode batch is at most the
running requests whose mean context (input + half the output) fits in the
GPU's KV cache, not ``max_batch`` (on h100-2dimm-2ssd with Llama-3.1-8B,
41 of 128 at 1K requests: the engine cannot batch more).  The prefill counts the whole
prompt (no cache hits), so a cache-friendly design has a lower load than
this.  The GPU's busy share (``gpu_util``) is no measure of it (continuous
batching keeps the GPU busy at any batch); ``--capacity`` measures one
(:func:`capacity`: the completion rate of a saturated pass, untimed) and the
run's arrival rate over it.  On 2026-12-02 at 1K requests, block 256:
gpu-only 1.686 requests/s, lmcache 1.664, so ``--load 0.8`` (1.187
requests/s) is 0.70-0.71 of what the instance serves.  The saturated pass
compresses think times too, so a session's later turns find more of its
prefix still cached: the capacity is an upper bound's side of the truth.

The run keeps no plan (``keep_plan=False``: no extents, no dependencies;
the op records need neither).  Prints requests served, the trace's arrival
duration (first to last arrival), the simulated span (last finish), the
process's CPU time in the run and in all (interpreter start, imports, trace,
setup, run and records), the speeds (arrival duration / all CPU s, span /
all CPU s, span / CPU s of the run), and the process's peak RSS, at the end
and before the run's first event (the trace and the engine's setup), so
what the run itself adds shows.

``--json`` prints the same measures (and the run's op and flow counts) as
one JSON line instead: ``kvtier bench-serving`` (``make bench-serving``)
runs every design and block that way, each in a fresh process, and prints
the table.  Measurements are kept in ``docs/serving-speed.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import resource
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from hwprofiles import HardwareProfile
from hwprofiles.loader import load_profile
from kvtier.contracts.arrays import arrow_array, to_numpy
from sim.limits import offered_load
from sim.models import ModelCard, get_model
from sim.serving.build import build_engine, default_gpu_kv_bytes, gpu_blocks
from sim.serving.designs import DESIGNS, get_design
from sim.serving.execute.engine import Engine, EngineConfig
from sim.serving.metrics import ServingRecords
from sim.serving.requests import Request, load_requests
from traces.conversation import (
    ConversationParams,
    Exponential,
    LogNormal,
    Mixture,
    generate_conversations,
)

# fitted to Mooncake's totals (module docstring)
MOONCAKE_SESSION_TOKENS = LogNormal.from_quantiles(0.5, 6_000, 0.99, 78_000, lo=64, hi=131_072)
MOONCAKE_PROMPT_TOKENS = LogNormal.from_quantiles(0.5, 16_000, 0.9, 65_536, lo=1, hi=65_536)
MOONCAKE_SESSION_RATE = 2.4  # sessions/s: ~3.4 requests/s
MOONCAKE_THINK_S = 60.0  # mean think time between a session's turns
TRACE_BLOCK = 16  # hash granularity of the generated trace (divides 16 and 256)

# output lengths (module docstring): Mooncake's published conversation mean, and the
# shape measured on 270 of its conversation trace's requests
MOONCAKE_OUTPUT_MEAN = 343.0
MOONCAKE_SHORT_SHARE = 40 / 270  # replies under 50 tokens
MOONCAKE_SHORT_TOKENS = LogNormal(median=math.exp(2.45), sigma=1.11, lo=1)
_BODY_SIGMA = LogNormal.from_quantiles(0.5, 379, 0.9, 616).sigma  # the body's median, p90


def _body_median(mean: float, share: float, short: LogNormal, sigma: float) -> float:
    """The body's median that makes the mixture's mean ``mean`` (a log-normal's
    mean is its median x exp(sigma^2 / 2); the short replies' clip at 1 token
    and the rounding to whole tokens are left out: under 0.2 tokens)."""
    short_mean = short.median * math.exp(short.sigma**2 / 2)
    return (mean - share * short_mean) / ((1 - share) * math.exp(sigma**2 / 2))


MOONCAKE_OUTPUT_TOKENS = Mixture(
    (MOONCAKE_SHORT_SHARE, 1 - MOONCAKE_SHORT_SHARE),
    (
        MOONCAKE_SHORT_TOKENS,
        LogNormal(
            median=_body_median(
                MOONCAKE_OUTPUT_MEAN, MOONCAKE_SHORT_SHARE, MOONCAKE_SHORT_TOKENS, _BODY_SIGMA
            ),
            sigma=_BODY_SIGMA,
            lo=1,
        ),
    ),
)


def mooncake_table(n: int, seed: int = 0, fitted_outputs: bool = True) -> pa.Table:
    """The first ``n`` requests (by arrival) of a Mooncake-shaped trace, as a
    request table with ``TRACE_BLOCK``-token block hashes.  ``fitted_outputs``:
    answers drawn whole from :data:`MOONCAKE_OUTPUT_TOKENS`; ``False``: the
    trace before that fit (answers cut to what the session has left), the
    serving baseline's."""
    answers = (
        {"response_tokens": MOONCAKE_OUTPUT_TOKENS, "whole_answers": True} if fitted_outputs else {}
    )
    params = ConversationParams(
        sessions=max(1, n),  # at least one request per session: enough sessions
        rate=MOONCAKE_SESSION_RATE,
        session_tokens=MOONCAKE_SESSION_TOKENS,
        prompt_tokens=MOONCAKE_PROMPT_TOKENS,
        think_time_s=Exponential(MOONCAKE_THINK_S),
        block_tokens=TRACE_BLOCK,
        **answers,
    )
    table = generate_conversations(params, seed=seed).table
    return table.slice(0, n).replace_schema_metadata({"block_tokens": str(TRACE_BLOCK)})


def mooncake_requests(
    n: int, engine_block: int, seed: int = 0, fitted_outputs: bool = True
) -> list[Request]:
    """The first ``n`` requests (by arrival) of a Mooncake-shaped trace."""
    return load_requests(mooncake_table(n, seed, fitted_outputs), engine_block)


def kv_batch(table: pa.Table, gpu_blocks: int, block: int, max_batch: int) -> int:
    """The decode batch one instance can hold: ``max_batch``, or fewer when the
    GPU's KV cache holds fewer requests at the mean context (input + half the
    output, as :func:`sim.limits.offered_load` decodes), in whole blocks."""
    inp = float(to_numpy(table.column("input_tokens")).mean())  # whole tokens: exact sums
    out = float(to_numpy(table.column("output_tokens")).mean())
    per_request = math.ceil(round(inp + out / 2) / block)
    return max(1, min(max_batch, gpu_blocks // max(per_request, 1)))


def scale_load(table: pa.Table, load: float, rho: float) -> pa.Table:
    """``table`` with its arrival times stretched so that a trace of offered load
    ``rho`` offers ``load`` (the offered load is proportional to the arrival
    rate); ``load`` 0: unchanged."""
    if load <= 0 or rho <= 0:
        return table
    i = table.schema.get_field_index("arrival_s")
    arrivals = to_numpy(table.column(i)) * (rho / load)
    return table.set_column(i, table.schema.field(i), arrow_array(arrivals, pa.float64()))


def table_stats(table: pa.Table) -> dict[str, float]:
    """:func:`trace_stats` of a request table at its own block size
    (vectorised), the output lengths, the arrival duration (first to last
    arrival) and rate (requests / last arrival)."""
    inp = to_numpy(table.column("input_tokens"))
    out = to_numpy(table.column("output_tokens"))
    col = table.column("block_hashes")
    flat = np.concatenate([_list_values(c) for c in col.chunks])
    flat.sort()  # distinct values without np.unique's further copies
    seen_first = int(np.count_nonzero(flat[1:] != flat[:-1])) + 1 if len(flat) else 0
    arrivals = to_numpy(table.column("arrival_s"))
    last = float(arrivals.max())
    return {
        "mean_input": float(inp.mean()),
        "p99_input": float(np.percentile(inp, 99)),
        "mean_output": float(out.mean()),
        "p50_output": float(np.percentile(out, 50)),
        "p90_output": float(np.percentile(out, 90)),
        "reusable": 1.0 - seen_first / max(len(flat), 1),
        "duration_s": last - float(arrivals.min()),
        "rate": table.num_rows / last if last > 0 else float("inf"),
    }


def _list_values(c: pa.ListArray) -> np.ndarray:
    """The values of a list chunk's rows, in order (its offsets into its values)."""
    offsets = to_numpy(c.offsets)
    return to_numpy(c.values)[offsets[0] : offsets[-1]]


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


def bench_trace(
    requests: int, seed: int, block: int, hw: str, model: str, load: float = 0.0
) -> tuple[pa.Table, dict[str, float]]:  # fmt: skip
    """The benchmark's trace, its arrivals stretched to offered load ``load``
    (0: the trace's own rate), and its statistics: :func:`table_stats`, the
    offered load of the trace's own rate (``offered_load_trace``) and of the
    one run (``offered_load``), the decode batch they assume (``kv_batch``)."""
    table = mooncake_table(requests, seed)
    profile, card = _machine(hw, model)
    cfg = engine_config(hw, model, block)
    batch = kv_batch(table, cfg.gpu_blocks, block, cfg.max_batch)
    rho = offered_load(table, card, profile, batch)
    table = scale_load(table, load, rho)
    stats = table_stats(table)
    stats |= {"offered_load_trace": rho, "kv_batch": batch,
              "offered_load": offered_load(table, card, profile, batch)}  # fmt: skip
    return table, stats


def run(
    requests: int, design: str, block: int, hw: str, model: str, seed: int,
    tiers_gib: tuple[float, float] = (18.63, 186.26), progress: bool = False,
    load: float = 0.0,
) -> dict:  # fmt: skip
    """Build and run one engine (``tiers_gib``: host-memory and SSD offload
    budgets, seed 004's 20 GB and 200 GB by default, for the tiers the design has:
    :func:`_tier_overrides`; ``load``: :func:`bench_trace`); the measured numbers."""
    table, stats = bench_trace(requests, seed, block, hw, model, load)
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
    span = float(np.nanmax(to_numpy(table.column("finish_s"))))
    total = time.process_time()  # the whole process: interpreter, imports, trace, setup, run
    ops, flows = int(records.stats["ops"]), int(records.stats["flows"])
    return {"requests": len(reqs), **stats, "span_s": span, "wall_s": wall, "cpu_s": cpu,
            "cpu_total_s": total, "speed": _per(span, wall), "speed_cpu": _per(span, cpu),
            "speed_span_total": _per(span, total),
            "speed_trace_total": _per(stats["duration_s"], total),
            "gpu_util": gpu_util(records), "peak_rss_mib": _peak_rss_mib(),
            "setup_peak_rss_mib": before, "ops": ops, "flows": flows}  # fmt: skip


SATURATE = 4.0  # estimated offered load of the capacity pass: a queue from its first minute


def capacity(
    requests: int, design: str, block: int, hw: str, model: str, seed: int,
    tiers_gib: tuple[float, float] = (18.63, 186.26),
) -> dict[str, float]:  # fmt: skip
    """What the instance serves when it is never idle: the benchmark's trace with its
    arrivals compressed to an estimated offered load of :data:`SATURATE` (think times
    alike), run to the end; the capacity is the completion rate over the middle 80% of
    completions (the 10th to the 90th percentile of finish times), where a queue keeps
    the batch full: before it the queue is forming, after it the last batch drains.
    Returns ``capacity_rps`` and the GPU busy share of that pass."""
    table, _ = bench_trace(requests, seed, block, hw, model, SATURATE)
    reqs = load_requests(table, block)
    del table
    records = build(reqs, design, block, hw, model, tiers_gib).run(None)
    t = records.requests
    assert t is not None
    served = ~to_numpy(t.column("rejected"))
    finish = np.sort(to_numpy(t.column("finish_s"))[served])
    lo, hi = int(0.1 * len(finish)), int(0.9 * len(finish))
    if hi - lo < 2 or finish[hi - 1] <= finish[lo]:
        return {"capacity_rps": float("nan"), "capacity_gpu_util": float("nan")}
    return {"capacity_rps": (hi - 1 - lo) / float(finish[hi - 1] - finish[lo]),
            "capacity_gpu_util": gpu_util(records)}  # fmt: skip


def gpu_util(records: ServingRecords) -> float:
    """The busiest GPU's busy share of a run (0 without a GPU)."""
    dev = records.devices
    kinds, util = dev.column("type").to_pylist(), dev.column("util_mean").to_pylist()
    return max((u for k, u in zip(kinds, util, strict=True) if k == "gpu"), default=0.0)


def engine_config(hw: str, model: str, block: int, keep_plan: bool = False) -> EngineConfig:
    """The benchmark's engine configuration: 90% of the GPU's memory left after the
    weights as KV blocks of ``block`` tokens, the plan kept only when ``keep_plan``."""
    profile, card = _machine(hw, model)
    kv = default_gpu_kv_bytes(profile, card, 0.9)
    return EngineConfig(gpu_blocks=gpu_blocks(kv, card, block), block_tokens=block,
                        gpu=profile.gpu_names[0], keep_plan=keep_plan)  # fmt: skip


def build(
    reqs: list[Request], design: str, block: int, hw: str, model: str,
    tiers_gib: tuple[float, float] = (18.63, 186.26), keep_plan: bool = False,
) -> Engine:  # fmt: skip
    """The benchmark's engine for ``reqs`` (:func:`engine_config`), the design's
    tiers sized by ``tiers_gib`` (:func:`_tier_overrides`)."""
    cfg = engine_config(hw, model, block, keep_plan)
    spec = get_design(design, _tier_overrides(design, tiers_gib))
    return build_engine(*_machine(hw, model), spec, cfg, reqs)


@functools.cache
def _machine(hw: str, model: str) -> tuple[HardwareProfile, ModelCard]:
    """The profile and model card, read once per process (frozen: safe to share;
    a profile's YAML costs ~17 ms of CPU, a fair share of a short run)."""
    return load_profile(hw), get_model(model)


def _per(x: float, cpu: float) -> float:
    """Seconds of ``x`` per second of ``cpu`` (x real time)."""
    return x / cpu if cpu > 0 else float("inf")


def _peak_rss_mib() -> float:
    """The process's peak resident memory so far, MiB: ``VmHWM`` of
    ``/proc/self/status``, the high-water mark of this process's own address
    space.  ``ru_maxrss`` is not that on Linux: it carries the largest RSS of
    the process before its ``execve`` too, so a run that ``kvtier bench-serving``
    forks from its own (larger) process reported the parent's peak (206 MiB for a
    50-request run that peaks at 83 MiB alone).  Elsewhere ``ru_maxrss`` (KiB)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
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
    ap.add_argument("--load", type=float, default=0.0,
                    help="offered load to stretch the arrivals to (0: own rate)")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print the measures as one JSON line")
    ap.add_argument("--capacity", action="store_true",
                    help="measure what the instance serves (a saturated pass, untimed) and "
                         "the run's load against it, instead of timing the run")  # fmt: skip
    a = ap.parse_args(argv)
    if a.requests < 1 or a.block < 1 or a.block % TRACE_BLOCK:
        print(f"bench: --requests >= 1 and --block a multiple of {TRACE_BLOCK}", file=sys.stderr)
        return 2
    if not (a.load >= 0 and math.isfinite(a.load)):
        print(f"bench: --load {a.load} must be >= 0 (0: the trace's own rate)", file=sys.stderr)
        return 2
    if a.capacity:
        return _print_capacity(a)
    m = run(a.requests, a.design, a.block, a.hw, a.model, a.seed, (a.cpu_gib, a.ssd_gib),
            not a.json, a.load)  # fmt: skip
    if a.json:
        print(json.dumps({"design": a.design, "block": a.block, **m}))
        return 0
    print(
        f"{a.design} block={a.block} requests={m['requests']} "
        f"input mean={m['mean_input']:,.0f} p99={m['p99_input']:,.0f} "
        f"output mean={m['mean_output']:,.0f} p50={m['p50_output']:,.0f} "
        f"p90={m['p90_output']:,.0f} reusable={m['reusable']:.0%} "
        f"offered load={m['offered_load']:.2f} (trace's own rate: "
        f"{m['offered_load_trace']:.2f}) GPU busy={m['gpu_util']:.0%}\n"
        f"  arrivals={m['duration_s']:,.1f} s span={m['span_s']:,.1f} s "
        f"CPU: run={m['cpu_s']:,.2f} s all={m['cpu_total_s']:,.2f} s | "
        f"x real time per CPU second: arrivals/all={m['speed_trace_total']:,.0f} "
        f"span/all={m['speed_span_total']:,.0f} span/run={m['speed_cpu']:,.0f} "
        f"(span/wall of the run {m['speed']:,.0f}) | peak RSS={m['peak_rss_mib']:,.0f} MiB "
        f"(before the run: {m['setup_peak_rss_mib']:,.0f} MiB)"
    )
    return 0


def _print_capacity(a: argparse.Namespace) -> int:
    """``--capacity``: the instance's capacity (:func:`capacity`) and the load the
    run at ``--load`` offers against it (its arrival rate over the capacity)."""
    _table, stats = bench_trace(a.requests, a.seed, a.block, a.hw, a.model, a.load)
    c = capacity(a.requests, a.design, a.block, a.hw, a.model, a.seed, (a.cpu_gib, a.ssd_gib))
    n = a.requests
    rate = (n - 1) / stats["duration_s"] if stats["duration_s"] > 0 else 0.0
    m = {"design": a.design, "block": a.block, "requests": a.requests,
         "offered_load": stats["offered_load"], "arrival_rps": rate, **c,
         "load_measured": rate / c["capacity_rps"]}  # fmt: skip
    if a.json:
        print(json.dumps(m))
        return 0
    print(f"{a.design} block={a.block} requests={a.requests}: capacity "
          f"{m['capacity_rps']:.3f} requests/s (saturated pass, GPU busy "
          f"{m['capacity_gpu_util']:.0%}); at --load {a.load:g} (estimated offered load "
          f"{m['offered_load']:.2f}) the arrivals come at {rate:.3f} requests/s: "
          f"load {m['load_measured']:.2f} of the capacity")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

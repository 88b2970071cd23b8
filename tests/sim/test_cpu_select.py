"""Issue 12 point 4: selection runs on the host CPU, as seed 000 §7 runs it.

A ``cpu`` compute op of F FLOPs over B DRAM bytes on n threads takes
max(F / (n x core FLOP/s), B / min(n x per-core bandwidth, DRAM total)) and
holds n of the host's cores, which the I/O software path also uses.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from hwprofiles import load_profile
from kvtier.contracts.plan import CPU, PlanBuilder, PlanError, validate_plan
from sim.config import SwarmParams
from sim.executor import simulate
from sim.models import decode_layer_cost, get_model
from sim.policies import StepDecision, get_design
from sim.scenarios.swarm import LaneResult, _assemble, layout_for, max_io_bytes


def _one_op(flops: float, nbytes: float, threads: int) -> PlanBuilder:
    b = PlanBuilder()
    b.cpu_compute(flops, nbytes, threads, tag="select")
    return b


def _makespan(b: PlanBuilder, profile) -> float:
    return float(simulate(b.table(), profile).ops.to_pandas()["end_s"].max())


def test_flop_bound_op_takes_flops_over_threads_times_core_rate(make_profile):
    tiny = make_profile(cores=4, core_gflops=100.0, core_mem_gbps=10.0)
    # 2 GFLOP on 2 cores of 100 GFLOP/s = 10 ms; its 1 MB at 2 x 10 GB/s is 0.05 ms
    assert _makespan(_one_op(2e9, 1e6, 2), tiny) == pytest.approx(2e9 / 200e9, rel=1e-9)


def test_memory_bound_op_takes_bytes_over_threads_times_core_bandwidth(make_profile):
    tiny = make_profile(cores=4, core_gflops=100.0, core_mem_gbps=10.0)
    # 400 MB at 2 x 10 GB/s = 20 ms; its 1 MFLOP is 5 us
    assert _makespan(_one_op(1e6, 4e8, 2), tiny) == pytest.approx(4e8 / 20e9, rel=1e-9)


def test_many_threads_read_no_faster_than_the_dram_modules(make_profile):
    tiny = make_profile(cores=8, core_gflops=100.0, core_mem_gbps=10.0)
    # 8 threads x 10 GB/s = 80 GB/s > tiny's one 50 GB/s DRAM module: 400 MB in 8 ms
    assert _makespan(_one_op(1e6, 4e8, 8), tiny) == pytest.approx(4e8 / 50e9, rel=1e-9)


def test_more_threads_than_cores_time_share_them(make_profile):
    tiny = make_profile(cores=2, core_gflops=100.0, core_mem_gbps=10.0)
    # 4 threads planned, 2 cores here: 2 GFLOP at 2 x 100 GFLOP/s = 10 ms, not 5
    assert _makespan(_one_op(2e9, 0.0, 4), tiny) == pytest.approx(2e9 / 200e9, rel=1e-9)


def test_two_ops_on_one_core_take_twice_as_long(make_profile):
    tiny = make_profile(cores=1, core_gflops=100.0, core_mem_gbps=10.0)
    b = _one_op(1e9, 0.0, 1)
    b.cpu_compute(1e9, 0.0, 1, tag="select")
    ends = simulate(b.table(), tiny).ops.to_pandas()["end_s"]
    # alone each is 1 GFLOP / 100 GFLOP/s = 10 ms; sharing one core both end at 20 ms
    assert list(ends) == pytest.approx([0.02, 0.02], rel=1e-9)


def test_cpu_selection_slows_io_submission_on_the_same_core(make_profile):
    tiny = make_profile(cores=1, core_gflops=100.0, core_mem_gbps=10.0)
    b = _one_op(1e9, 0.0, 1)  # 10 ms of one core
    # 10,000 x 4 KiB io_uring reads at QD 10,000: tiny charges 1 us per I/O + 2 us
    # per io_uring_enter (one batch) = 10.002 ms of CPU; the SSD alone needs less
    b.read("ssd0", "dram0", 10_000 * 4096, 10_000, io_path="io_uring", queue_depth=10_000)
    rec = simulate(b.table(), tiny)
    ops = rec.ops.to_pandas()
    cpu_io = 10_000 * 1e-6 + 2e-6
    # one core, two flows at half a core each until the shorter (10 ms) ends at 20 ms
    assert ops["end_s"].iloc[0] == pytest.approx(0.02, rel=1e-6)
    assert ops["end_s"].iloc[1] == pytest.approx(0.02 + (cpu_io - 0.01), rel=1e-6)
    assert ops["cpu_s"].iloc[0] == pytest.approx(0.01, rel=1e-9)  # its core-seconds


@pytest.mark.parametrize(
    ("threads", "dst", "message"),
    [
        (0, CPU, "threads 0 must be >= 1 on a cpu compute op"),
        (-1, CPU, "threads -1 must be >= 1 on a cpu compute op"),
        (1, "gpu0", "threads 1 must be 0 (not a cpu op)"),
        (0, "cpu0", "compute dst must be a GPU of the profile or 'cpu'"),
    ],
)
def test_validation_rejects_nonsense_threads_and_devices(threads, dst, message, make_profile):
    b = PlanBuilder()
    b.add("compute", dst, flops=1e9, threads=threads)
    tiny = make_profile(cores=4)
    with pytest.raises(PlanError, match=re.escape(message)):
        validate_plan(b.table(), tiny.node_names, tiny.ssd_names, tiny.gpu_names)


@pytest.mark.parametrize("name", ["swarm", "nocluster", "infllm", "pqcache"])
def test_the_papers_designs_score_on_the_cpu(name):
    assert get_design(name).score_device == CPU


def test_assemble_puts_a_cpu_designs_select_on_one_thread_per_sequence(make_profile):
    """One layer, batch 2, no SSD reads: the select op runs on ``cpu`` with 2
    threads, and each step's critical path is select -> copy -> attention."""
    tiny = make_profile(cores=4, core_gflops=100.0, core_mem_gbps=10.0)
    p = SwarmParams(
        context_tokens=1000, batch=2, steps=2, profile_steps=0, layers=1, local_window=64
    )
    empty = [np.zeros((0, 2), dtype=np.int64) for _ in tiny.ssd_names]
    dec = StepDecision(np.arange(300), 300, empty, score_flops=1e9, score_bytes=1e8)
    zeros = np.zeros(len(tiny.ssd_names), np.int64)
    lane = dataclasses.replace(LaneResult([dec] * p.steps, [], 0, 0, zeros), score_device=CPU)
    lanes = {(0, 0): lane, (1, 0): lane}
    bases = {k: zeros for k in lanes}
    layout = layout_for(p, tiny, len(tiny.ssd_names), p.context_tokens)
    ssds = max_io_bytes(tiny, tuple(tiny.ssd_names))
    table = _assemble(p, tiny, ssds, layout, lanes, bases, p.context_tokens)
    plan = table.to_pandas()
    sel = plan[plan["tag"] == "select"]
    assert (sel["dst"] == CPU).all() and (sel["threads"] == 2).all()
    # the two lanes' 2 GFLOP over 200 MB on 2 threads: max(2e9/200e9, 2e8/20e9) = 10 ms
    t_select = max(2e9 / (2 * 100e9), 2e8 / (2 * 10e9))
    entry = get_model(p.model).kv_bytes_per_token_layer
    t_copy = 600 * entry / 25e9  # both lanes' 300 entries over gpu0.pcie (25 GB/s)
    total = 0.0
    for t in range(p.steps):
        visible = p.context_tokens + t + 1
        cost = decode_layer_cost(get_model(p.model), 2, visible, 600 / (2 * visible))
        total += t_select + t_copy + max(cost.flops / 100e12, cost.hbm_bytes / 2000e9)
    rec = simulate(table, tiny)
    assert rec.ops.to_pandas()["end_s"].max() == pytest.approx(total, rel=1e-9)


# Table 4 of seed 000 ("Naive Lat.", a full scan of the keys): 1.635, 3.136, 6.176,
# 12.15 ms at the four prefixes whose index reaches 0.412 GB at 1M, i.e. 128K-1M.
TABLE4_PREFIXES = (131_072, 262_144, 524_288, 1_048_576)


@pytest.mark.parametrize("prefix", TABLE4_PREFIXES)
def test_nocluster_full_scan_at_table4_prefixes_by_hand(prefix):
    """No Cluster scores every visible key once per layer: ``score_bytes = P x
    key_bytes`` (Qwen3-32B: 8 KV heads x 128 dims x 2 B = 2048 B per key) and
    ``score_flops = 2 d P``.  On h20-8ssd's figures, one thread (one sequence):
    FLOP bound 2 x 128 x P / 134.4e9 (0.25 ms at 128K), memory bound
    P x 2048 / 25.6e9 (10.5 ms at 128K): memory-bound, 10.5 / 21.0 / 41.9 /
    83.9 ms at 128K / 256K / 512K / 1M.

    Against Table 4 (not asserted): the hand values grow linearly as Table 4's
    do (x2 per doubling), but are 6.4-6.9x Table 4's 1.635-12.15 ms.  Table 4
    implies 2 GiB / 12.15 ms = 177 GB/s at 1M: about 7 cores' worth of the
    25.6 GB/s per-core assumption, i.e. the paper's naive scan is multi-threaded
    (or scans fewer bytes per key); with 7 threads the model gives 12.0 ms.
    """
    h20 = load_profile("h20-8ssd")
    key_bytes = 8 * 128 * 2
    assert get_model("Qwen3-32B").kv_bytes_per_token_layer // 2 == key_bytes
    flops, nbytes = 2.0 * 128 * prefix, float(prefix * key_bytes)
    hand = max(flops / 134.4e9, nbytes / 25.6e9)  # h20-8ssd.yaml cpu: figures
    assert hand == pytest.approx(prefix * 2048 / 25.6e9)  # memory-bound at every prefix
    assert _makespan(_one_op(flops, nbytes, 1), h20) == pytest.approx(hand, rel=1e-9)


@pytest.mark.parametrize(
    ("core_gbps", "seconds"),
    [
        (4.0, 4e8 / (2 * 4e9)),  # a kernel measured at 4 GB/s per thread: 2 x 4 = 8 GB/s
        (20.0, 4e8 / (2 * 10e9)),  # above the core's 10 GB/s: the core's rate
        (0.0, 4e8 / (2 * 10e9)),  # none given: the core's rate
    ],
)
def test_a_kernels_measured_rate_per_thread_bounds_the_op(make_profile, core_gbps, seconds):
    tiny = make_profile(cores=4, core_gflops=100.0, core_mem_gbps=10.0)
    b = PlanBuilder()
    b.cpu_compute(0.0, 4e8, 2, tag="stage", core_gbps=core_gbps)
    assert _makespan(b, tiny) == pytest.approx(seconds, rel=1e-9)


@pytest.mark.parametrize(
    ("dst", "threads", "rate", "message"),
    [
        ("gpu0", 0, 4.0, "op 0: core_gbps 4.0 must be 0 (not a cpu compute op)"),
        (CPU, 1, -1.0, "op 0: core_gbps must be >= 0"),
        (CPU, 1, float("nan"), "op 0: core_gbps must be a finite number, got nan"),
    ],
)
def test_validation_rejects_a_rate_off_a_cpu_op(dst, threads, rate, message, make_profile):
    b = PlanBuilder()
    b.add("compute", dst, flops=1e9, threads=threads, core_gbps=rate)
    tiny = make_profile(cores=4)
    with pytest.raises(PlanError, match=re.escape(message)):
        validate_plan(b.table(), tiny.node_names, tiny.ssd_names, tiny.gpu_names)

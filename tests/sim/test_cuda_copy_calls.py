"""Host-to-device copies issued as CUDA copy calls (``io_path: cuda_copy``): one
call's cost before the DMA, every call's cost on the issuing thread beside it,
and how KVDrive's plan counts its calls (gather or one per run)."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from kvtier.contracts.plan import PlanBuilder, PlanError, validate_plan
from sim.executor import simulate
from sim.policies.kvdrive.design import Params, count_runs
from sim.registry import ParamError
from sim.scenarios.kvdrive import _copy_calls

MIB = 1 << 20
CALL_US = 6.0


def _with_calls(profile, call_us: float = CALL_US):
    return replace(profile, software=replace(profile.software, cuda_copy_per_call_us=call_us))


def _copy_end(profile, nbytes: int, calls: int) -> float:
    b = PlanBuilder()
    b.copy("dram0", "gpu0", nbytes, n_ios=calls, io_path="cuda_copy")
    return float(simulate(b.table(), profile).ops.to_pandas()["end_s"].iloc[0])


def test_one_call_delays_the_dma_by_its_cost(tiny):
    # gpu0.pcie is 25 GB/s, the narrowest hop: 25 MiB take 1.049 ms after the 6 us call
    t = _copy_end(_with_calls(tiny), 25 * MIB, 1)
    assert t == pytest.approx(6e-6 + 25 * MIB / 25e9)


def test_many_small_calls_are_bound_by_the_issuing_thread(tiny):
    # 1,000 calls of 1 KiB: the DMA is 41 us, the thread 1,000 x 6 us = 6 ms
    t = _copy_end(_with_calls(tiny), 1000 * 1024, 1000)
    assert t == pytest.approx(1000 * CALL_US * 1e-6)


def test_calls_cost_nothing_where_the_profile_gives_no_figure(tiny):
    assert _copy_end(tiny, 25 * MIB, 1000) == pytest.approx(25 * MIB / 25e9)


def test_cuda_copy_is_for_copies_only(tiny):
    b = PlanBuilder()
    b.read("ssd0", "dram0", MIB, 1, queue_depth=1, io_path="cuda_copy")
    with pytest.raises(PlanError, match="cuda_copy"):
        validate_plan(b.table(), tiny.node_names, tiny.ssd_names, tiny.gpu_names)


def test_count_runs_by_hand():
    assert count_runs(np.array([10, 9, 1, 2, 3, 7])) == 3  # 1-3, 7, 9-10
    assert count_runs(np.array([5])) == 1
    assert count_runs(np.zeros(0, dtype=np.int64)) == 0
    assert count_runs(np.arange(0, 40, 4)) == 10  # every 4th id: no two adjacent


def _dec(runs: int, per_run: bool):
    return SimpleNamespace(info={"h2d_runs": float(runs), "h2d_per_run": float(per_run)}), 0


def test_a_micro_batch_gathers_in_one_call_or_copies_run_by_run():
    assert _copy_calls([_dec(120, False), _dec(80, False)]) == 1
    assert _copy_calls([_dec(120, True), _dec(80, True)]) == 200
    assert _copy_calls([(SimpleNamespace(info={}), 0)]) == 1  # designs without runs: one call


def test_h2d_copy_is_checked():
    with pytest.raises(ParamError, match="h2d_copy"):
        Params(h2d_copy="scatter")

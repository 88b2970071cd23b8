"""Host thread counts are assumptions a sensitivity run varies (``workload.select_threads``).

Toy: the swarm kind on the tiny machine (8 cores of 10 GB/s each, one 50 GB/s
DRAM module), two variants of the same design (No Cluster, which scans every
visible key on the CPU each layer), the same workload: ``a`` leaves the
selection's threads to the assumption (one per sequence: batch 4, 4 threads),
``b`` sets its own count ``k``.  Their plans differ only in the ``select`` op's
threads, so their step times differ only by its time, B / min(n x 10, 50) GB/s
for the scan's B bytes on n threads: equal where min(n x 10, 50) = k x 10, i.e.
at n = k (for k < 5).  The registered range is [1, the cores] = [1, 8]:

* k = 2: as given a scans at 40 GB/s, b at 20 GB/s, a ahead; at the low end
  (n = 1, 10 GB/s) b is ahead: the ranking flips at low.  At the high end (n =
  8: 80 GB/s, capped at the DRAM's 50) a stays ahead.
* k = 1: at the low end a runs exactly b's plan (n = 1 = k), a tie, which ranks
  by name (a first), so the ranking holds at both ends.

b's figure is the same at every end: a variant that sets its own count has made
its own choice, and the run leaves it alone.
"""

from __future__ import annotations

import pytest

from sim.config import load_scenario
from sim.parallel import LocalExecutor
from sim.sensitivity import knobs, sensitivity

TOY = """name: threads
description: the selection's threads
seed: 0
workload:
  kind: swarm
  design: nocluster
  context_tokens: 1024
  batch: 4
  steps: 2
  layers: 2
  profile_steps: 16
  local_window: 64
variants:
  - {name: a}
  - {name: b, select_threads: K}
"""


def _toy(tmp_path, k: int):
    path = tmp_path / "threads.yaml"
    path.write_text(TOY.replace("K", str(k)))
    return load_scenario(path)


def _run(tmp_path, make_profile, k: int) -> dict:
    profile = make_profile(cores=8, core_mem_gbps=10.0)
    cfg = _toy(tmp_path, k)
    s = sensitivity(cfg, profile, LocalExecutor(1), only=["workload.select_threads"])
    (row,) = s.table.to_dict("records")
    return row


def test_the_selection_threads_are_a_knob_from_one_to_the_cores(tmp_path, make_profile):
    (k,) = knobs(_toy(tmp_path, 2), make_profile(cores=8), only=["workload.select_threads"])
    assert (k.low, k.value, k.high) == (1, 4, 8)  # 1, one per sequence (batch 4), the cores


def test_fewer_threads_than_the_fixed_variant_flip_the_ranking(tmp_path, make_profile):
    row = _run(tmp_path, make_profile, 2)
    assert (row["top"], row["second"]) == ("a", "b")
    assert row["verdict"] == "flips" and row["flips_at"] == "low"
    assert row["swap"] == "low: b ahead of a"
    assert row["ratio_low"] < 1 < row["ratio_base"] < row["ratio_high"]
    assert row["b @low"] == row["b @base"] == row["b @high"]


def test_a_tie_at_the_range_end_holds(tmp_path, make_profile):
    row = _run(tmp_path, make_profile, 1)
    assert row["verdict"] == "holds"
    # at n = 1 the two variants run the same plan: the same figure, exactly
    assert row["a @low"] == pytest.approx(row["b @base"], rel=1e-12)
    assert row["ratio_low"] == pytest.approx(1.0, rel=1e-12)

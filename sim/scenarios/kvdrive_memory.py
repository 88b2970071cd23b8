"""GPU and host memory of a kvdrive run, one rule for every design (seed 003 §9).

Both checks charge the **whole model**: a modeled layer stands for
``repeat = card.layers / layers_modeled`` layers (all 32 of Llama-3-8B, even
when the run times only ``layers`` of them), because memory is what the
real system must hold, not what the simulation samples.

* GPU: ``weights + repeat x sum over lanes of (peak resident KV + index)``,
  where a lane's resident KV at a step is ``info["hbm_entries"]`` when the
  design says (Original: the whole visible layer) and otherwise its GPU
  cache's capacity plus the step's selection (the working set attention
  reads), in ``entry_bytes`` each.  Over the GPU's HBM: out of memory.
* Host: ``repeat x sum over lanes of design.host_bytes()`` at build time
  (the prefill: the paper's MagicPIG fails "during initialization") against
  the **host budget**, the same for every design of a comparison
  (:func:`host_budget`).  Over it: out of memory.

A design whose KV does not fit spills by its own mechanism where it has one:
KVDrive's DRAM tier is sized to the budget (:func:`dram_tier_fraction`), the
rest stays on SSD; designs without an SSD tier (ShadowKV, MagicPIG,
RetroInfer) are out of memory.  An out-of-memory run is reported as such,
with no throughput.
"""

from __future__ import annotations

import math

from sim.models import get_model


def memory_repeat(p) -> float:
    """Model layers one modeled layer stands for in the memory checks."""
    return get_model(p.model).layers / p.layers_modeled


def lane_peak_entries(lane) -> float:
    """The most KV entries the lane keeps on the GPU at any step."""
    return max(
        (
            d.info.get("hbm_entries", d.info.get("cache_capacity", 0.0) + len(d.selected))
            for d in lane.decisions
        ),
        default=0.0,
    )


def gpu_memory(p, profile, lanes: dict, entry_bytes: int) -> tuple[float, bool]:
    """(bytes the run needs on the GPU, whether that exceeds its HBM)."""
    card = get_model(p.model)
    kv = sum(lane_peak_entries(lane) * entry_bytes + lane.index_bytes for lane in lanes.values())
    need = card.weight_bytes + memory_repeat(p) * kv
    return need, bool(need > profile.gpu.hbm_capacity_gib * 2**30)


def host_budget(p, profile) -> float:
    """Host DRAM bytes every design may hold (KV tier and host-side index):
    ``host_mem_gb`` x 1e9 when set, else the profile's DRAM capacity minus
    ``host_reserved_gb`` x 1e9 (what the scenario keeps for the OS, runtime and
    staging buffers)."""
    if p.host_mem_gb > 0:
        return p.host_mem_gb * 1e9
    capacity = sum(m.capacity_gib for m in profile.dram) * 2**30
    return capacity - p.host_reserved_gb * 1e9


def host_memory(p, profile, host_bytes: list[int]) -> tuple[float, float, bool]:
    """(bytes the run needs in host DRAM, the budget, whether it exceeds it);
    ``host_bytes``: each lane's :meth:`host_bytes` after build."""
    need = memory_repeat(p) * float(sum(host_bytes))
    budget = host_budget(p, profile)
    return need, budget, bool(need > budget)


def dram_tier_fraction(p, profile, prefix: int) -> float:
    """The DRAM cache (``dram_cache``, a fraction of the prefix) once the host
    budget caps it: every lane of every model layer may hold ``budget / (batch
    x layers x entry_bytes)`` entries.  ``dram_fill``: as many as the budget
    allows, not ``dram_cache``; just under 1 when the whole prefix fits (the
    parameter's range is [0, 1): the last-ranked entry stays on SSD)."""
    card = get_model(p.model)
    per_lane = host_budget(p, profile) / (p.batch * card.layers * card.kv_bytes_per_token_layer)
    fits = max(0.0, per_lane / prefix)
    want = math.nextafter(1.0, 0.0) if p.dram_fill else p.dram_cache
    return min(want, fits)

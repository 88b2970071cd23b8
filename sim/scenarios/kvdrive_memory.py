"""GPU and host memory of a kvdrive run, one rule for every design (seed 003 §9).

Both checks charge the **whole model**: a modeled layer stands for
``repeat = card.layers / layers_modeled`` layers (all 32 of Llama-3-8B, even
when the run times only ``layers`` of them), because memory is what the
real system must hold, not what the simulation samples.

* GPU: ``weights + repeat x sum over lanes of (resident KV + index) + live x
  max over modeled layers of sum over its lanes of the working set``.  A
  lane's *resident* KV stays for the whole run, in every layer:
  ``info["hbm_entries"]`` when the design says (Original: the whole visible
  layer), else its GPU cache's capacity.  Its *working set* (the step's
  selection, which attention reads; 0 for a design whose KV is all resident)
  lives only while its layer runs: one layer's at a time, two with prefetch
  (``live``; the next layer's fetched while this one computes).  FlexGen's
  whole-layer working set is thus one layer's KV, not the model's ("it
  circumvents OOM errors", §9.2).  Over the GPU's HBM: out of memory.
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


def lane_peak_entries(lane) -> tuple[float, float]:
    """(the most KV entries the lane keeps resident on the GPU, the largest working
    set of one step beyond them), over its steps."""
    resident = working = 0.0
    for d in lane.decisions:
        if "hbm_entries" in d.info:
            resident = max(resident, d.info["hbm_entries"])
        else:
            resident = max(resident, d.info.get("cache_capacity", 0.0))
            working = max(working, float(len(d.selected)))
    return resident, working


def gpu_memory(p, profile, lanes: dict, entry_bytes: int) -> tuple[float, bool]:
    """(bytes the run needs on the GPU, whether that exceeds its HBM); ``lanes``
    keyed (sequence, modeled layer)."""
    card = get_model(p.model)
    kept, layer_sets = 0.0, {}
    for key, lane in lanes.items():
        resident, working = lane_peak_entries(lane)
        kept += resident * entry_bytes + lane.index_bytes
        lm = key[1] if isinstance(key, tuple) else 0
        layer_sets[lm] = layer_sets.get(lm, 0.0) + working * entry_bytes
    live = 2 if getattr(p, "prefetch", False) else 1
    need = card.weight_bytes + memory_repeat(p) * kept + live * max(layer_sets.values(), default=0)
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


def dram_tier_entries(p, profile, prefix: int) -> int:
    """KVDrive's DRAM tier per lane in whole entries: ``floor(budget / (batch x
    layers x entry_bytes))``, at most the prefix (``dram_fill``) or
    ``int(dram_cache x prefix)``."""
    card = get_model(p.model)
    per_lane = host_budget(p, profile) / (p.batch * card.layers * card.kv_bytes_per_token_layer)
    cap = prefix if p.dram_fill else int(p.dram_cache * prefix)
    return max(0, min(cap, math.floor(per_lane)))


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

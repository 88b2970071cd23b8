"""GPU memory of a kvdrive run, one rule for every design (seed 003 §9).

``weights + repeat x sum over lanes of (peak resident KV + index)``, where a
lane's resident KV at a step is ``info["hbm_entries"]`` when the design says
(Original: the whole visible layer) and otherwise its GPU cache's capacity
plus the step's selection (the working set attention reads), in
``entry_bytes`` each; ``repeat = layers / layers_modeled`` (a modeled layer
stands for that many).  A run whose total exceeds the GPU's HBM is out of
memory: reported as such, with no throughput.
"""

from __future__ import annotations

from sim.models import get_model


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
    repeat = (p.layers or card.layers) / p.layers_modeled
    kv = sum(lane_peak_entries(lane) * entry_bytes + lane.index_bytes for lane in lanes.values())
    need = card.weight_bytes + repeat * kv
    return need, bool(need > profile.gpu.hbm_capacity_gib * 2**30)

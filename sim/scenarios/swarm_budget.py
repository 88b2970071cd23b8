"""Swarm's host DRAM budget for index plus cache: an assumption with its range.

The Swarm scenarios (``default``, ``default-matched``, ``swarm-ablations``,
``swarm-maintenance``, ``swarm-real-matched*``) give every design the same host
DRAM per lane for its index and its cache together, ``dram_budget`` (a fraction
of the prefix's KV bytes; :class:`sim.config.SwarmParams`,
:meth:`sim.policies.kvdesign.Layout.cache_entries`), 0.2.  The seed gives no
such budget (seed 000 §8.3, Fig. 15 varies the cache ratio alone; Table 4 gives
Swarm's index alone, 0.412 GB at 1M), so 0.2 is an assumption
(``docs/swarm-vs-paper.md``, "DRAM"): it holds Swarm's index (13.5% of the KV
at 48K: 26.8% of the keys, a key being half an entry) and a 6.5% cache.  Its
plausible range is 0.15 (just above Swarm's index alone: below 0.135 the index
does not fit at 48K) to 0.3 (the range default.yaml and docs/swarm-vs-paper.md
give).  A sensitivity run varies it as ``workload.dram_budget`` in scenarios
that set 0.2 (:attr:`sim.registry.WorkloadAssumption.at`); a scenario with
another budget, or with none (0: ``dram_cache`` with the index on top), has
made its own choice.
"""

from __future__ import annotations

from sim.registry import WorkloadAssumption

DRAM_BUDGET = 0.2
"""The index + cache budget the Swarm scenarios assume, a fraction of the prefix's KV."""

DRAM_BUDGET_ASSUMPTION = WorkloadAssumption(
    "dram_budget",
    0.15,
    0.3,
    "assumption: seed 000 gives no index + cache DRAM budget (Fig. 15 varies the cache "
    "alone); 0.15 (Swarm's 13.5% index and little cache at 48K) to 0.3",
    lambda p, profile: p.dram_budget,
    at=DRAM_BUDGET,
)

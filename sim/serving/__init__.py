"""Serving-level model: continuous batching with prefix caching over tiers.

Closed loop, unlike the rest of ``sim/``: admission depends on when loads
finish, so the engine (:mod:`sim.serving.execute.engine`) is a simpy process
that issues plan ops one by one on the machine's flow network
(:mod:`sim.serving.execute.online`) and records them in the plan schema, so
the run can be replayed open loop, by the simulator or on real disks.

The sub-packages are the layers (``pyproject.toml``'s import contract
"serving policies decide without a clock" names the clock-free ones as
packages, so a new module in them is covered by default):

* :mod:`sim.serving.tiers` -- the offload tiers as plain state: entries,
  their eviction order, where their bytes live on each device, and how an
  offload set is placed (Unified KV Pooling's Algorithm 1, spills, LRU
  victims).  No clock.
* :mod:`sim.serving.policy` -- what the engine decides, as plain data: the
  GPU prefix cache, lookups, the block manager's loads, stores, write-through
  and demotions returned as transfers with their byte ranges, and an
  iteration's work.  No clock.
* :mod:`sim.serving.designs` -- the designs of seeds 001 and 004 as
  parameters (how each stores, loads and places).  No clock.
* :mod:`sim.serving.swift` -- SwiftCache's (seed 002) multi-instance parts:
  layer stream cache, elastic units, lending, as data.  No clock.
* :mod:`sim.serving.execute` -- what owns time: the engine loop, the offload
  runner, the movers' streams, the online op issuer, and several
  instances on one machine.

Around them: request tables in (:mod:`.requests`), wiring
(:mod:`.build`), the plan as it is written (:mod:`.planstore`), records to
metrics (:mod:`.metrics`) and tables
(:mod:`.report`), and the speed tools (:mod:`.bench`, :mod:`.baseline`).
"""

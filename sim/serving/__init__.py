"""Serving-level model: continuous batching with prefix caching over tiers.

Closed loop, unlike the rest of ``sim/``: admission depends on when loads
finish, so the engine (:mod:`sim.serving.engine`) is a simpy process that
issues plan ops one by one on the machine's flow network
(:mod:`sim.serving.online`) and records them in the plan schema, so the run
can be replayed open loop.  Plain state: requests (:mod:`.requests`), GPU
cache and offload tiers (:mod:`.blocks`).  Decisions: the block manager
(:mod:`.manager`), Unified KV Pooling's placement (:mod:`.placement`), the
designs of seeds 001 and 004 (:mod:`.designs`).  Physics: transfers
(:mod:`.transfers`), iteration costs (:mod:`.costs`).  Metrics:
:mod:`.metrics`.
"""

"""Serving-level model: continuous batching with prefix caching over tiers.

Closed loop, unlike the rest of ``sim/``: admission depends on when loads
finish, so the engine (:mod:`sim.serving.engine`) is a simpy process that
issues plan ops one by one on the machine's flow network
(:mod:`sim.serving.online`) and records them in the plan schema, so the run
can be replayed open loop, by the simulator or on real disks.

*Policies* (pure data in, pure data out; no clock, no simpy, no executor
imports; an import-linter contract in ``pyproject.toml`` keeps it so): plain
state of requests (:mod:`.requests`) and of the GPU cache and offload tiers
(:mod:`.blocks`); where entries live on each device (:mod:`.layout`); the
block manager's decisions (:mod:`.manager`), returned as transfers with
their byte ranges (:mod:`.jobs`); Unified KV Pooling's placement
(:mod:`.placement`); the designs of seeds 001 and 004 (:mod:`.designs`).

*Executors* (they own time): the engine loop (:mod:`.engine`), the offload
runner (:mod:`.stores`), the movers' streams and workers
(:mod:`.transfers`), the online op issuer (:mod:`.online`); wiring in
:mod:`.build`.  Iteration costs: :mod:`.costs`.  Metrics: :mod:`.metrics`.
"""

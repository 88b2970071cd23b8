"""The fleet: many serving instances behind a router, above the serving engine.

:mod:`sim.serving` simulates serving instances (one engine each, or several
on one machine); this package puts them behind a fleet's front end:

* :mod:`sim.fleet.router` -- the routing policies (round-robin, least-loaded,
  prefix- and KV-aware), as plain decisions over what each instance shows.
  No clock.
* :mod:`sim.fleet.routed` -- the routed run: one flow network for every
  node, requests handed to instances as they arrive.
* :mod:`sim.fleet.disagg` -- prefill/decode disaggregation: prefill instances
  hand a request's KV to decode instances over the network.
* :mod:`sim.fleet.scopes` -- who owns an offload tier (an instance, a node,
  the fleet) and which instances reach it.

The serving engine never imports this package (``pyproject.toml``'s
contract "the fleet over the serving engine").
"""

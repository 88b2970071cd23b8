"""What owns time in a serving run: simpy processes on the machine's flow network.

* :mod:`.engine` -- :class:`~sim.serving.execute.engine.Engine`: the client,
  admission, continuous-batching iterations, loads and preemption;
  :mod:`.engine_config` its configuration;
* :mod:`.stores` -- the offload runner turning the manager's decisions into
  transfers; :mod:`.transfers` -- the movers' streams and workers;
* :mod:`.online` -- ops issued one by one on the flow network, written down
  by :mod:`sim.serving.planstore`;
* :mod:`.streaming`, :mod:`.lending` -- SwiftCache's layer stream and lending
  at run time; :mod:`.multi` -- several instances on one machine;
  :mod:`.scopes` -- whose offload tiers an instance reaches (its own,
  its node's, the fleet's); :mod:`.tp` -- tensor parallelism's all-reduces; :mod:`.gcpolicy` -- the
  cyclic garbage collector during a run.
"""

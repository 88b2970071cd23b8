"""The simulator held against the real backend: one layer above both.

``kvtier real validate`` and ``kvtier real replay`` need the simulator and the
real replayer together; what they compute lives here, and the CLI
(:mod:`kvtier.cli.validate`, :mod:`kvtier.cli.replay`) only parses flags and
prints.  Nothing here reads an ``argparse.Namespace`` or prints to a console:

* :mod:`.validation` — one validation from start to end (the designs planned,
  the devices set up, the replayer's costs measured, both plans run);
* :mod:`.devices` — the devices a validation runs on (emulated, paced or as
  they are) and the profile that models them;
* :mod:`.regimes` — the regime plan simulated and replayed, the pass/fail
  verdict, the report written;
* :mod:`.designs` — each KV design's own plan, scaled down, simulated and
  replayed on the same devices, the results written;
* :mod:`.metrics` — per design the step time, read bandwidth, errors, and the
  ranking of the designs in both backends (Kendall's tau);
* :mod:`.replayer` — the replayer as the simulation models it (paced or
  batched, at its measured costs);
* :mod:`.durations` — the simulated times copy and compute ops wait out in a
  replay (no GPU here).

Layers (``pyproject.toml``): under :mod:`kvtier.cli`, over :mod:`analysis` and
the two backends ``sim | real``, which never import each other.
"""

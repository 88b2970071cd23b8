"""kvtier: the shared contracts at the bottom, the CLI on top.

* :mod:`kvtier.contracts` — the nouns ``sim`` and ``real`` share (plan,
  geometry, records, units, provenance, checks at the edges, output
  directories, the console); they import nothing else of kvtier;
* :mod:`kvtier.cli` — the ``kvtier`` command line, above everything else.

``sim`` and ``real`` import the contracts and never each other; only the CLI
imports both (``import-linter`` contracts in ``pyproject.toml``).
"""

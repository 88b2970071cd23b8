"""kvtier's shared contracts, imported by both backends, and the CLI on top.

* :mod:`kvtier.plan` — the transfer plan (schema, builder, validation; its parts
  in :mod:`kvtier.plan_schema` and :mod:`kvtier.plan_check`);
* :mod:`kvtier.geometry` — the byte ranges and I/Os of its read/write ops;
* :mod:`kvtier.records` — what an executor measured (one schema for sim and real);
* :mod:`kvtier.units` — unit conversions and formatting;
* :mod:`kvtier.provenance` — git SHA, machine, package versions of a result;
* :mod:`kvtier.console` — the console every command prints through;
* :mod:`kvtier.cli` — the ``kvtier`` command line, above everything else.

``sim`` and ``real`` import the contracts and never each other; only the CLI
imports both (``import-linter`` contracts in ``pyproject.toml``).
"""

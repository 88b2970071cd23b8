"""The shared nouns both backends import, at the bottom of every layer.

* :mod:`.plan` — the transfer plan (schema, builder, validation; its parts in
  :mod:`.plan_schema` and :mod:`.plan_check`);
* :mod:`.geometry` — the byte ranges and I/Os of its read/write ops;
* :mod:`.records` — what an executor measured (one schema for sim and real);
* :mod:`.units` — unit conversions and formatting;
* :mod:`.provenance` — git SHA, machine, package versions of a result;
* :mod:`.validate` — checks of values at the edges (one clean line each);
* :mod:`.outdir` — result directories and their locks;
* :mod:`.console` — the console every command prints through.

They import no other part of kvtier (``pyproject.toml``'s contract "the
shared contracts import no other part of kvtier").
"""

"""The output-directory lock, shared by every command: see :mod:`kvtier.contracts.outdir`
(kept here so that ``from real.outdir import claim`` still works)."""

from __future__ import annotations

from kvtier.contracts.outdir import LOCK, claim, run_id

__all__ = ["LOCK", "claim", "run_id"]

"""User-facing trace errors: a bad line or key in a trace file, a missing
optional dependency.  The CLI prints them as one ``kvtier: error:`` line."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace the user gave cannot be used; the message names file:line or key."""

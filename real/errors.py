"""Errors of the real backend that are the user's to fix (bad path, no
permission, disk full, data mismatch): the CLI prints them as one line."""

from __future__ import annotations


class RealError(Exception):
    """A refusal or failure of the real backend, reported as ``kvtier: error: <message>``.

    The message names the path, device or key involved and says what to do.
    """

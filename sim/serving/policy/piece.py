"""A piece of a transfer: bytes from one node to another, and their byte ranges.

What :mod:`sim.serving.policy.jobs` decides and :mod:`sim.serving.execute.transfers` moves
(the module docstring of :mod:`sim.serving.policy.jobs` says what the ranges are).
A piece made by :meth:`Piece.deferred` knows its range count and bytes at
once and makes its ranges only when they are first read: a store's ranges
(hundreds of entries x layers) are needed only to be written into a kept
plan, so a run that keeps no plan never makes them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvtier.contracts.geometry import expand_runs

_NO_EXTENTS = np.zeros((0, 2), dtype=np.int64)
_MAKE_RUNS = np.zeros((0, 4), dtype=np.int64)  # a deferred piece's runs, not yet made


class Piece:
    """``nbytes`` from ``src`` to ``dst``; ``layer`` -1 = all layers; ``extents``
    the (n, 2) byte ranges on the tier end's device (module docstring);
    ``length``: the length of every one of them (they are one offload block's
    layer each, all of one tier), 0 = not known to be equal.

    A piece made by :meth:`deferred` knows its range count (``ranges``) and
    bytes at once and makes its ``extents`` only when they are first read
    (a run that keeps no plan never reads a store's: :class:`sim.serving.
    transfers.Mover` needs only the count and the length)."""

    __slots__ = ("src", "dst", "nbytes", "layer", "length", "_ext", "_make", "_n", "_runs")

    def __init__(
        self,
        src: str,
        dst: str,
        nbytes: float,
        layer: int = -1,
        extents: np.ndarray | None = None,
        length: int = 0,
    ):
        self.src, self.dst, self.nbytes, self.layer, self.length = src, dst, nbytes, layer, length
        self._ext = _NO_EXTENTS if extents is None else extents
        self._make: Callable[[], np.ndarray] | None = None
        self._n = len(self._ext)
        self._runs: np.ndarray | None = None  # a deferred store piece's ranges as runs

    @classmethod
    def deferred(
        cls, src: str, dst: str, nbytes: float, ranges: int, length: int,
        make: Callable[[], np.ndarray], runs: bool = False,
    ) -> Piece:  # fmt: skip
        """An all-layers piece of ``ranges`` ranges of ``length`` bytes each,
        whose ranges ``make()`` gives when first read: (n, 2) extents, or with
        ``runs`` (k, 4) runs of them (:func:`kvtier.contracts.geometry.expand_runs`),
        which :meth:`runs` gives as they are."""
        piece = cls(src, dst, nbytes, -1, None, length)
        piece._make, piece._n = make, ranges
        if runs:
            piece._runs = _MAKE_RUNS
        return piece

    @property
    def extents(self) -> np.ndarray:
        """The (n, 2) byte ranges (made now by a deferred piece's first read)."""
        runs = self.runs()
        if runs is not None and self._n and not len(self._ext):
            self._ext = expand_runs(runs)
        elif self._make is not None:
            self._ext, self._make = self._make(), None
        return self._ext

    def runs(self) -> np.ndarray | None:
        """The ranges as (offset, length, count, stride) runs where the piece was
        made so (a store's, :func:`sim.serving.policy.jobs.store_pieces`), else None."""
        if self._runs is _MAKE_RUNS:
            assert self._make is not None
            self._runs, self._make = self._make(), None
        return self._runs

    @property
    def ranges(self) -> int:
        """How many ranges ``extents`` has (without making them)."""
        return self._n

    def __repr__(self) -> str:
        return f"Piece({self.src!r}, {self.dst!r}, {self.nbytes!r}, {self.layer}, ranges={self._n})"

"""What every sparse-attention design repeats: parameters, the build preamble,
the in-order step preamble and the default footprints (one base, one rule).

A design subclasses :class:`DesignBase`, names its ``Params`` dataclass in
``params_type`` and calls :meth:`DesignBase.start` first in ``build`` and
:meth:`DesignBase.advance` first in ``step``.  Everything else (index,
selection, layout) is the design's own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from sim.policies.kvdesign import Layout


class KeyLog:
    """Keys by entry id: the prefix, then one row per decode step (amortised growth)."""

    def __init__(self, keys: np.ndarray):
        self._buf = np.array(keys, dtype=np.float32, copy=True)
        self.n = len(self._buf)

    def append(self, key: np.ndarray) -> None:
        if self.n == len(self._buf):
            grown = np.empty((max(2 * self.n, 16), self._buf.shape[1]), dtype=np.float32)
            grown[: self.n] = self._buf[: self.n]
            self._buf = grown
        self._buf[self.n] = key
        self.n += 1

    def rows(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._buf[start : self.n if stop is None else stop]


class DesignBase:
    """Constructor, build/step preambles and default footprints of a design.

    After :meth:`start`: ``layout``, ``n_prefix`` (prefix entries), ``visible``
    (entries visible so far: the prefix, then one more per step) and, with
    ``keep_keys``, ``keys`` (a :class:`KeyLog` of every visible key)."""

    name: ClassVar[str]
    score_device: ClassVar[str]
    params_type: ClassVar[type]  # the design's Params dataclass (its defaults when none given)
    layout: Layout
    keys: KeyLog | None = None

    def __init__(self, params: Any = None):
        self.params = params if params is not None else self.params_type()

    def start(self, keys: np.ndarray, layout: Layout, keep_keys: bool = True) -> int:
        """The build preamble: remember the layout and the prefix; the prefix length."""
        self.layout = layout
        self.n_prefix = self.visible = len(keys)
        self.keys = KeyLog(keys) if keep_keys else None
        return self.n_prefix

    def advance(self, t: int, new_key: np.ndarray) -> int:
        """The step preamble: step ``t`` must be the next one; its key joins the
        log (entry ``n_prefix + t``).  Returns the visible count after it."""
        if self.visible != self.n_prefix + t:
            raise ValueError(f"step {t} out of order (expected {self.visible - self.n_prefix})")
        if self.keys is not None:
            self.keys.append(new_key)
        self.visible += 1
        return self.visible

    def index_bytes(self) -> int:
        """Bytes of the design's index (none by default)."""
        return 0

    def ssd_bytes(self) -> np.ndarray:
        """Bytes placed on each SSD (none by default: the KV lives elsewhere)."""
        return np.zeros(self.layout.n_ssd, dtype=np.int64)

    def host_bytes(self) -> int:
        """Host DRAM the lane holds: by default its index when selection runs on
        the CPU (against a DRAM-resident index), nothing else.  Designs that keep
        KV in DRAM (a DRAM cache, a DRAM tier, the whole KV) say so themselves."""
        return self.index_bytes() if self.score_device == "cpu" else 0

"""Selection helpers shared by the sparse-attention designs."""

from __future__ import annotations

import numpy as np


def always_selected(visible: int, sink_tokens: int, local_window: int) -> np.ndarray:
    """Sink tokens and the local window of ``visible`` entries (sorted ids)."""
    sinks = np.arange(min(sink_tokens, visible))
    window = np.arange(max(visible - local_window, 0), visible)
    return np.union1d(sinks, window).astype(np.int64)


def take_units(
    scores: np.ndarray, members: list[np.ndarray], budget: int, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Units in descending score until their distinct entries reach ``budget``.

    ``exclude`` (sorted) entries do not count toward the budget (they are
    selected anyway: sinks, window).  Returns (chosen unit ids, their distinct
    entries not in ``exclude``, sorted).  Ties break by unit id.
    """
    order = np.lexsort((np.arange(len(scores)), -np.asarray(scores)))
    chosen: list[int] = []
    seen: set[int] = set()
    excl = set(exclude.tolist()) if exclude is not None else set()
    for u in order:
        if len(seen) >= budget:
            break
        chosen.append(int(u))
        seen.update(int(e) for e in members[u] if int(e) not in excl)
    return np.array(chosen, dtype=np.int64), np.array(sorted(seen), dtype=np.int64)

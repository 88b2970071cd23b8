"""vLLM v1's incremental block allocation and RECOMPUTE preemption.

With ``preempt`` a request reserves only its prompt's blocks and takes one
more each time its decodes fill one; when none is free the newest running
request is preempted: its blocks are freed and it goes back to the head of
the queue (vLLM v1 ``Scheduler.schedule``).  Mixed into
:class:`sim.serving.engine.Engine`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections import deque

    from sim.serving.engine_config import EngineConfig
    from sim.serving.jobs import Piece
    from sim.serving.manager import BlockManager, Seq


class PreemptMixin:
    """Blocks at admission, growth per decode, and preemption."""

    cfg: EngineConfig
    B: int
    mgr: BlockManager
    running: list[Seq]
    waiting: deque[Seq]
    _forward: dict[Seq, list[Piece]]

    def _target(self, s: Seq) -> int:
        """GPU blocks ``s`` takes at admission: its whole context, or with
        ``preempt`` its prompt and any tokens it generated before a preemption
        (vLLM v1 allocates as tokens arrive and recomputes them all)."""
        if not self.cfg.preempt:
            return s.total_blocks
        return math.ceil((s.req.input_tokens + s.generated) / self.B)  # + tokens it had made

    def _grow_or_preempt(self) -> None:
        """Give each running request (oldest first) the block its next token
        needs; when none is free, preempt the newest running request until it
        is (vLLM v1 ``Scheduler.schedule``: ``self.running.pop()``)."""
        B, running, grow = self.B, self.running, self.mgr.grow
        i = 0
        while i < len(running):  # preemption only shortens the tail: index i stays put
            s = running[i]
            i += 1
            if s.prefill_left > 0:
                continue
            held = len(s.blocks) + s.private
            more = -(-(s.req.input_tokens + s.generated) // B) - held  # after next decode
            while more > 0 and not grow(s, more):
                victim = running[-1]
                self._preempt(victim)
                if victim is s:
                    break

    def _preempt(self, s: Seq) -> None:
        """RECOMPUTE preemption: free ``s``'s blocks, requeue it at the head."""
        self.mgr.release(s)
        if self.running[-1] is s:  # the newest: always, from _grow_or_preempt
            self.running.pop()
        else:
            self.running.remove(s)
        s.cached_tokens = s.prefilled = s.stored_groups = 0
        s.lookup = s.load = None
        self._forward.pop(s, None)
        s.req.preemptions += 1
        self.waiting.appendleft(s)

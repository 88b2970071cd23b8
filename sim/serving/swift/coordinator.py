"""Master-worker coordination (seed 002 §3.5): block-table sync as messages.

Each worker lends the *tail* of its block-major KV buffer to the master
(:mod:`.elastic`): its own blocks are ``[0, own)`` and grow or shrink at the
boundary, so the lent region is ``[own, end)``.  The master's replica of a
worker's block table numbers the master-sized slots in that region from the
end of the buffer: slot ``s`` lies at byte ``end - (s + 1) x
master_block_bytes``.  Numbered so, a slot keeps its number (and address)
while the boundary moves: a lend appends slots ``[lent, lent + k)``, a
reclaim revokes the highest ones ``[lent - k, lent)``, nearest the worker's
own blocks.

Every resize the worker decides becomes one message, :class:`Lend` (the
worker scaled down; the master gains slots) or :class:`Reclaim` (the worker
scaled up; the master loses slots and must drop the KV it kept there).
Messages carry a per-worker sequence number; the master applies them in
order and refuses a gap, a repeat or a reclaim of more than is lent, so
both sides always agree on the lent bytes: ``(total - own) x
worker_block_bytes == slots x master_block_bytes`` (whole MEUs on both
sides, :mod:`.meu`).  The paper sends these over ZeroMQ (§4); here they are
plain data the engine delivers.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.serving.swift.elastic import ElasticCache, Resize


class CoordinationError(ValueError):
    """A message the master's replica cannot apply; the message is one line."""


@dataclass(frozen=True)
class Lend:
    """Worker ``worker`` lends ``worker_blocks`` of its blocks = ``master_blocks`` slots."""

    worker: str
    seq: int
    at_s: float
    worker_blocks: int
    master_blocks: int


@dataclass(frozen=True)
class Reclaim:
    """Worker ``worker`` takes back ``worker_blocks`` = the master's top ``master_blocks`` slots."""

    worker: str
    seq: int
    at_s: float
    worker_blocks: int
    master_blocks: int


Message = Lend | Reclaim


class WorkerCoordinator:
    """One worker's side: turns its elastic cache's resizes into messages."""

    def __init__(self, worker: str, cache: ElasticCache):
        self.worker = worker
        self.cache = cache
        self._seq = 0

    def _message(self, r: Resize | None) -> list[Message]:
        if r is None:
            return []
        self._seq += 1
        cls = Reclaim if r.worker_blocks > 0 else Lend
        return [cls(self.worker, self._seq, r.at_s, abs(r.worker_blocks), abs(r.master_blocks))]

    def initial(self, now: float) -> Lend:
        """Message 1: what the worker lends when it starts (its cache's state)."""
        if self._seq:
            raise CoordinationError(f"{self.worker}: the initial message is the first")
        self._seq = 1
        c = self.cache
        return Lend(self.worker, 1, now, c.lent_units * c.p.meu_worker, c.lent_master_blocks)

    def withdraw(self, msg: Message) -> None:
        """Take back ``msg``, the last one, before it was sent (the worker could
        not free the memory): the cache's lent units and the sequence go back."""
        if msg.seq != self._seq:
            raise CoordinationError(f"{self.worker}: only the last message can be withdrawn")
        units = msg.worker_blocks // self.cache.p.meu_worker
        self.cache.lent_units += units if isinstance(msg, Reclaim) else -units
        self._seq -= 1

    def on_request(
        self, now: float, request_len: int, n_blocks: int | None = None
    ) -> list[Message]:
        """A request arrives at the worker: ScaleUp, announced if it happened
        (``n_blocks``: Algorithm 1's ``N_i``, :meth:`ElasticCache.on_request`)."""
        return self._message(self.cache.on_request(now, request_len, n_blocks))

    def scale_down(self, now: float, n_blocks: int | None = None) -> list[Message]:
        """The periodic check: ScaleDown, announced if it happened."""
        return self._message(self.cache.scale_down(now, n_blocks))


@dataclass
class _Replica:
    buffer_bytes: int  # the worker's whole KV buffer
    master_block_bytes: int
    slots: int = 0
    seq: int = 0


class MasterBlockTable:
    """The master's replica of every worker's lent region (see the module docstring)."""

    def __init__(self) -> None:
        self._workers: dict[str, _Replica] = {}

    def register(self, worker: str, buffer_bytes: int, master_block_bytes: int) -> None:
        """Track ``worker``, whose KV buffer is ``buffer_bytes`` long; nothing lent yet."""
        if worker in self._workers:
            raise CoordinationError(f"worker {worker!r} registered twice")
        self._workers[worker] = _Replica(buffer_bytes, master_block_bytes)

    def slots(self, worker: str) -> int:
        """Master blocks currently lent by ``worker``."""
        return self._workers[worker].slots

    def slot_offset(self, worker: str, slot: int) -> int:
        """Byte offset of ``slot`` in ``worker``'s KV buffer."""
        r = self._workers[worker]
        if not 0 <= slot < r.slots:
            raise CoordinationError(f"{worker}: slot {slot} not lent (0..{r.slots - 1})")
        return r.buffer_bytes - (slot + 1) * r.master_block_bytes

    def apply(self, msg: Message) -> range:
        """Apply ``msg``: the slots it adds (Lend) or revokes (Reclaim)."""
        r = self._workers.get(msg.worker)
        if r is None:
            raise CoordinationError(f"message from unknown worker {msg.worker!r}")
        if msg.seq != r.seq + 1:
            raise CoordinationError(f"{msg.worker}: message {msg.seq} after {r.seq}")
        if isinstance(msg, Reclaim):
            if msg.master_blocks > r.slots:
                raise CoordinationError(
                    f"{msg.worker}: reclaims {msg.master_blocks} slots, {r.slots} lent"
                )
            changed = range(r.slots - msg.master_blocks, r.slots)
            r.slots -= msg.master_blocks
        else:
            if (r.slots + msg.master_blocks) * r.master_block_bytes > r.buffer_bytes:
                raise CoordinationError(f"{msg.worker}: lends more than its buffer")
            changed = range(r.slots, r.slots + msg.master_blocks)
            r.slots += msg.master_blocks
        r.seq = msg.seq
        return changed

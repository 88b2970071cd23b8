"""The serving engine's state of one request (:class:`Seq`)."""

from __future__ import annotations

from sim.serving.policy.jobs import Transfer
from sim.serving.policy.prefix import Lookup
from sim.serving.requests import Request
from sim.serving.tiers.blocks import GpuBlock


class Seq:
    """The engine's state of one request.

    ``prefill_left`` (prompt tokens neither cached nor prefilled yet) is read
    several times per running request per iteration, so it is a plain
    attribute kept up to date by the setters of ``cached_tokens`` and
    ``prefilled`` rather than recomputed on every read.
    """

    __slots__ = ("req", "total_blocks", "blocks", "private", "_cached", "_prefilled",
                 "prefill_left", "generated", "stored_groups", "unstored", "lookup",
                 "load", "remote", "keys", "no_room", "touched")  # fmt: skip

    def __init__(self, req: Request, total_blocks: int):
        self.req = req
        self.total_blocks = total_blocks
        self.blocks: list[GpuBlock] = []  # per input block: its GPU slot, -1 if not cached
        self.private = 0
        self._cached = self._prefilled = 0
        self.prefill_left = req.input_tokens
        self.generated = 0
        self.stored_groups = 0
        self.unstored = False  # its last store was not prepared: tried again next step
        self.lookup: Lookup | None = None  # hits still to load
        self.load: Transfer | None = None  # their load, once started
        # prefilled elsewhere: the GPU its prompt's KV is fetched from at admission
        # (a disaggregated decode instance, sim.fleet.disagg); None once in
        self.remote: str | None = None
        # its offload blocks' keys (each group's last block hash) as Python ints, made by
        # the block manager at the first lookup or store and let go at release: a
        # request is looked up and touched at every step it waits, and reading the
        # keys out of its int64 hashes each time was a fifth of that
        self.keys: list[int] | None = None
        # what its last store not prepared read (BlockManager.prepare_store): the same
        # again is the same verdict
        self.no_room: tuple | None = None
        # each tier's LRU clock and changes as its last lookup's touch left them
        # (BlockManager.lookup): the same again, that touch would change nothing
        self.touched: list[tuple[int, int]] | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens whose KV a prefix hit supplies (GPU or a lower tier)."""
        return self._cached

    @cached_tokens.setter
    def cached_tokens(self, n: int) -> None:
        self._cached = n
        self.prefill_left = self.req.input_tokens - n - self._prefilled

    @property
    def prefilled(self) -> int:
        """Prompt tokens computed by prefill chunks so far."""
        return self._prefilled

    @prefilled.setter
    def prefilled(self, n: int) -> None:
        self._prefilled = n
        self.prefill_left = self.req.input_tokens - self._cached - n

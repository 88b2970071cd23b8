"""The self-checking 4 KiB block format of the replayer's data files.

A target (file, loop or block device) is an array of blocks; block ``b``
lives at byte ``b * 4096`` and holds::

    offset  type  field
    0       u64   magic b"KVTIERB1"
    8       u32   node id: crc32 of the plan node's name (``ssd0``)
    12      u32   crc32 of the payload (bytes 32..4095)
    16      u64   block index b
    24      u64   seed of the data set
    32      2032 x float16 payload drawn from N(0, 1), like a slice of a K or V tensor

The payload of block ``b`` is base block ``b mod 256`` of 256 drawn from a
generator seeded with ``(seed, node id)``.  Everything is therefore a function
of (seed, node, block): nothing is stored to verify a read, and a block read
back from the wrong offset, the wrong device, a stale or unwritten region, or
with a flipped bit differs from what is expected.  The crc32 in the header makes
a block checkable on its own by other tools (``zlib.crc32(block[32:])``).

Checking is vectorised: a template of 2 x 256 blocks means the expected image
of any run of up to 256 consecutive blocks is a view, so verifying a 1 MiB read
is three numpy comparisons (about 0.1 ms); single-block reads take a bytes path
without numpy's per-call overhead.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

BLOCK = 4096
HEADER = 32
MAGIC = b"KVTIERB1"
BASE_BLOCKS = 256
_WORDS = BLOCK // 8
_U64 = np.dtype("<u8")
_MAGIC_WORD = int.from_bytes(MAGIC, "little")
_HDR = struct.Struct("<8sIIQQ")


def node_id(node: str) -> int:
    """The 32-bit id of a plan node stored in each block header."""
    return zlib.crc32(node.encode())


class BlockFormat:
    """Renders and checks the blocks of one node's data set."""

    def __init__(self, node: str, seed: int) -> None:
        self.node = node
        self.seed = seed
        self.node_id = node_id(node)
        rng = np.random.default_rng([seed, self.node_id])
        payload = rng.standard_normal((BASE_BLOCKS, (BLOCK - HEADER) // 2), dtype=np.float32)
        raw = payload.astype(np.float16).view(np.uint8)
        crcs = np.array([zlib.crc32(row) for row in raw], dtype=_U64)
        tmpl = np.empty((2 * BASE_BLOCKS, _WORDS), dtype=_U64)
        tmpl.view(np.uint8)[:BASE_BLOCKS, HEADER:] = raw
        tmpl[:BASE_BLOCKS, 0] = _MAGIC_WORD
        tmpl[:BASE_BLOCKS, 1] = np.uint64(self.node_id) | (crcs << np.uint64(32))
        tmpl[:BASE_BLOCKS, 2] = 0
        tmpl[:BASE_BLOCKS, 3] = seed
        tmpl[BASE_BLOCKS:] = tmpl[:BASE_BLOCKS]
        self._tmpl = tmpl
        self._eq = np.empty((64, _WORDS), bool)  # scratch of first_bad_block
        self._crc = crcs.tolist()
        rows = [tmpl[k].tobytes() for k in range(BASE_BLOCKS)]
        self._head = [r[:16] for r in rows]  # magic, node id, crc
        self._tail = [r[24:] for r in rows]  # seed, payload

    def expected(self, block: int) -> bytes:
        k = block % BASE_BLOCKS
        return self._head[k] + block.to_bytes(8, "little") + self._tail[k]

    def render(self, first_block: int, out: memoryview) -> None:
        """Write the blocks from ``first_block`` into ``out`` (a multiple of 4 KiB)."""
        if len(out) == BLOCK:
            out[:] = self.expected(first_block)
            return
        words = np.frombuffer(out, dtype=_U64).reshape(-1, _WORDS)
        for pos, block, m, s in self._runs(first_block, len(words)):
            words[pos : pos + m] = self._tmpl[s : s + m]
            words[pos : pos + m, 2] = np.arange(block, block + m, dtype=_U64)

    def first_mismatch(self, buf: memoryview, first_block: int) -> int:
        """Index of the first block of ``buf`` that is not as expected, or -1."""
        n = len(buf) // BLOCK
        if n <= 4:
            for i in range(n):
                b = first_block + i
                k = b % BASE_BLOCKS
                got = bytes(buf[i * BLOCK : (i + 1) * BLOCK])
                if not (
                    got.startswith(self._head[k])
                    and got.endswith(self._tail[k])
                    and int.from_bytes(got[16:24], "little") == b
                ):
                    return i
            return -1
        words = np.frombuffer(buf, dtype=_U64).reshape(-1, _WORDS)
        for pos, block, m, s in self._runs(first_block, n):
            got, exp = words[pos : pos + m], self._tmpl[s : s + m]
            idx = np.arange(block, block + m, dtype=_U64)
            if not (
                np.array_equal(got[:, :2], exp[:, :2])
                and np.array_equal(got[:, 2], idx)
                and np.array_equal(got[:, 3:], exp[:, 3:])
            ):
                bad = (got[:, :2] != exp[:, :2]).any(1) | (got[:, 2] != idx)
                bad |= (got[:, 3:] != exp[:, 3:]).any(1)
                return pos + int(np.argmax(bad))
        return -1

    def first_bad_block(self, words: np.ndarray, blocks: np.ndarray) -> int:
        """Row of ``words`` (n x 512 u64, one 4 KiB block each) that is not block
        ``blocks[row]`` as expected, the first one; -1 when every row is.

        One gather of the expected images and one comparison (into a reused
        scratch array) for the whole batch: the replayer checks every
        single-block read a round reaps at once.
        """
        n = len(blocks)
        if n == 0:
            return -1
        exp = self._tmpl[blocks % BASE_BLOCKS]
        exp[:, 2] = blocks
        eq = np.equal(words, exp, out=self._scratch(n))
        if eq.all():
            return -1
        return int(np.argmin(eq.all(axis=1)))

    def good_rows(self, words: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """Per row of ``words`` (n x 512 u64), whether it is block ``blocks[row]``."""
        exp = self._tmpl[blocks % BASE_BLOCKS]
        exp[:, 2] = blocks
        return np.equal(words, exp, out=self._scratch(len(blocks))).all(axis=1)

    def _scratch(self, n: int) -> np.ndarray:
        if len(self._eq) < n:
            self._eq = np.empty((max(n, 2 * len(self._eq)), _WORDS), bool)
        return self._eq[:n]

    def describe(self, got: bytes, block: int) -> str:
        """What a bad block holds, against what block ``block`` should hold."""
        magic, nid, crc, idx, seed = _HDR.unpack_from(got)
        want = f"block {block} of {self.node} (seed {self.seed}, crc32 {self._crc_of(block):#010x})"
        if magic != MAGIC:
            what = "all zeros" if not any(got) else f"no kvtier header (starts {got[:8].hex()})"
            return f"expected {want}, found {what}"
        payload_crc = zlib.crc32(got[HEADER:])
        found = f"block {idx} of node id {nid:#010x} (seed {seed}, crc32 {crc:#010x}"
        found += ")" if payload_crc == crc else f", payload crc32 {payload_crc:#010x})"
        return f"expected {want}, found {found}"

    def _crc_of(self, block: int) -> int:
        return int(self._crc[block % BASE_BLOCKS])

    @staticmethod
    def _runs(first_block: int, n: int):
        """(position, block, count, template row) runs that are views of the template."""
        pos = 0
        while pos < n:
            block = first_block + pos
            m = min(n - pos, BASE_BLOCKS)
            yield pos, block, m, block % BASE_BLOCKS
            pos += m

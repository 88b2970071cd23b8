"""A byte-level BPE tokenizer built from a GGUF file's ``tokenizer.ggml.*`` metadata.

GPT-2 style: text is split into pieces by a pre-tokenizer regex, each piece's
UTF-8 bytes are mapped to printable characters (GPT-2's ``bytes_to_unicode``)
and merged pairwise by the ranks of ``tokenizer.ggml.merges`` (lowest rank
first) until no listed pair remains; the resulting strings are looked up in
``tokenizer.ggml.tokens``.

SmolLM2's pre-tokenizer (``tokenizer.ggml.pre = "smollm"``; HF:
``Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]``)
first isolates every digit, then applies GPT-2's regex.  Python's ``re`` has
no ``\\p{L}``/``\\p{N}``: letters are ``[^\\W\\d_]``, numbers ``\\d``, and
"neither space, letter nor number" is ``[^\\s\\w]|_``.  Special tokens
(``<|im_start|>`` ...) are not parsed out of the text: plain prose is all the
capture needs.
"""

from __future__ import annotations

import functools
import re

_DIGIT = re.compile(r"(\d)")
_PIECE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class ByteBPETokenizer:
    """Encode text to token ids and back; ``decode(encode(s)) == s`` for any string."""

    def __init__(self, tokens: list[str], merges: list[str]) -> None:
        self.tokens = tokens
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.byte_enc = bytes_to_unicode()
        self.byte_dec = {c: b for b, c in self.byte_enc.items()}
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_gguf(cls, reader) -> ByteBPETokenizer:  # reader: gguf.GGUFReader
        model = reader.fields["tokenizer.ggml.model"].contents()
        if model != "gpt2":
            raise ValueError(f"tokenizer.ggml.model = {model!r}: only gpt2-style BPE is supported")
        tokens = reader.fields["tokenizer.ggml.tokens"].contents()
        merges = reader.fields["tokenizer.ggml.merges"].contents()
        return cls(list(tokens), list(merges))

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in _DIGIT.split(text):
            if not part:
                continue
            for piece in _PIECE.findall(part):
                ids.extend(self._piece_ids(piece))
        return ids

    def decode(self, ids: list[int]) -> str:
        chars = "".join(self.tokens[i] for i in ids)
        return bytes(self.byte_dec[c] for c in chars).decode("utf-8", errors="replace")

    def _piece_ids(self, piece: str) -> list[int]:
        hit = self._cache.get(piece)
        if hit is None:
            word = [self.byte_enc[b] for b in piece.encode("utf-8")]
            hit = [self.vocab[w] for w in self._bpe(word)]
            if len(self._cache) < 1 << 16:
                self._cache[piece] = hit
        return hit

    def _bpe(self, word: list[str]) -> list[str]:
        while len(word) > 1:
            pairs = [
                (self.ranks.get(p, 1 << 30), i)
                for i, p in enumerate(zip(word, word[1:], strict=False))
            ]
            rank, _ = min(pairs)
            if rank == 1 << 30:
                break
            a, b = next(p for p in zip(word, word[1:], strict=False) if self.ranks.get(p) == rank)
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

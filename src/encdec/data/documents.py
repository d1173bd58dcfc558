"""Tokenized documents as one flat token array plus document offsets.

The same structure serves in-memory lists and memory-mapped shards, so every
objective reads documents the same way. Document i is
`tokens[offsets[i]:offsets[i + 1]]`.

Shapes: N tokens in total, D documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def token_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """The smallest unsigned integer type that holds every id of a `vocab_size` vocabulary: uint16 or uint32."""
    return np.uint16 if vocab_size <= 2**16 else np.uint32


@dataclass(frozen=True)
class Documents:
    tokens: np.ndarray  # (N,) unsigned ints, possibly a read-only memmap
    offsets: np.ndarray  # (D + 1,) int64, offsets[0] == 0, offsets[-1] == N

    @classmethod
    def from_lists(cls, documents: Sequence[Sequence[int]], dtype=np.uint32) -> Documents:
        lengths = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
        offsets = np.zeros(len(documents) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.fromiter((t for d in documents for t in d), dtype=dtype, count=int(offsets[-1]))
        return cls(tokens, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)  # (D,)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def to_lists(self) -> list[list[int]]:
        return [self[i].tolist() for i in range(len(self))]

    def chunks(self, max_len: int, min_len: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths) of pieces of at most `max_len` tokens cutting every document.

        Pieces shorter than `min_len` are dropped.

        ROT5 cut documents into <= 512-token chunks before denoising.
        """
        lengths = self.lengths
        pieces = -(-lengths // max_len)  # (D,) ceil division
        doc = np.repeat(np.arange(len(self)), pieces)  # (P,)
        first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
        index_in_doc = np.arange(len(doc)) - first_piece
        starts = self.offsets[doc] + index_in_doc * max_len
        chunk_lengths = np.minimum(max_len, lengths[doc] - index_in_doc * max_len)
        keep = chunk_lengths >= min_len
        return starts[keep], chunk_lengths[keep]

"""The batch every objective yields and every model family takes, and the collate that builds it.

Shapes: B batch, S source length, T target length.

Encoder-decoder: `src_ids`/`src_mask` are the encoder input (a speech family's: the recordings' log-mel
features (B, M, F), no mask: data.objectives.transcribe); `tgt_ids` is the
decoder input = labels shifted right after the decoder-start token; `labels`
are padded with -100. A packed batch (objective.pack, data.objectives.packing) holds
several examples per row and says where each lies in `src_segments` / `tgt_segments`
(1, 2, ... per example, 0 at padding) and `src_positions` / `tgt_positions` (counted
from 0 in each example); an unpacked batch leaves these None. Decoder-only (causal or prefix LM): `src_*` are None,
`tgt_ids` is the token window and `labels` the next tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

IGNORE_INDEX = -100
PACKING_FIELDS = ("src_segments", "tgt_segments", "src_positions", "tgt_positions")


@dataclass
class Batch:
    tgt_ids: Tensor  # (B, T) int64 decoder input
    labels: Tensor  # (B, T) int64, IGNORE_INDEX where no loss
    src_ids: Tensor | None = None  # (B, S) int64 encoder input; a speech family's: log-mel features (B, M, F) float
    src_mask: Tensor | None = None  # (B, S) bool, True at real tokens
    prefix_lengths: Tensor | None = None  # (B,) prefix-LM only: positions < prefix attend bidirectionally
    src_segments: Tensor | None = None  # (B, S) int64 packed only: example number in the row, 0 at padding
    tgt_segments: Tensor | None = None  # (B, T) int64 packed only
    src_positions: Tensor | None = None  # (B, S) int64 packed only: position within the example
    tgt_positions: Tensor | None = None  # (B, T) int64 packed only
    modes: list[str] | None = field(default=None, compare=False)  # e.g. UL2 denoiser per example, for inspection

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return replace(
            self,
            tgt_ids=move(self.tgt_ids),
            labels=move(self.labels),
            src_ids=move(self.src_ids),
            src_mask=move(self.src_mask),
            prefix_lengths=move(self.prefix_lengths),
            **{name: move(getattr(self, name)) for name in PACKING_FIELDS},
        )

    @property
    def packing(self) -> dict[str, Tensor]:
        """The packing fields as keyword arguments for a model's forward; empty for an unpacked batch."""
        return {name: getattr(self, name) for name in PACKING_FIELDS if getattr(self, name) is not None}

    @property
    def num_tokens(self) -> int:
        """Target tokens that carry loss (labels != -100): the unit for tokens/s and loss averaging."""
        return int((self.labels != IGNORE_INDEX).sum())

    @property
    def batch_size(self) -> int:
        return self.labels.shape[0]


def pad_rows(rows: Sequence[np.ndarray], value: int, length: int | None = None) -> np.ndarray:
    """Right-pad 1-D int arrays into one (B, L) int64 array."""
    length = max((len(r) for r in rows), default=0) if length is None else length
    out = np.full((len(rows), max(length, 1)), value, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def collate_encoder_decoder(
    examples: Sequence[tuple[np.ndarray, np.ndarray]],
    pad_id: int,
    decoder_start_id: int,
    modes: list[str] | None = None,
) -> Batch:
    """(inputs, targets) id arrays -> Batch; targets already end with EOS when they should."""
    src = pad_rows([s for s, _ in examples], pad_id)  # (B, S)
    src_mask = np.zeros(src.shape, dtype=bool)
    for i, (s, _) in enumerate(examples):
        src_mask[i, : len(s)] = True
    tgt, labels = decoder_rows([t for _, t in examples], pad_id, decoder_start_id)
    return Batch(
        tgt_ids=tgt, labels=labels, src_ids=torch.from_numpy(src), src_mask=torch.from_numpy(src_mask), modes=modes
    )


def decoder_rows(
    targets: Sequence[np.ndarray], pad_id: int, decoder_start_id: int, prefixes: Sequence[np.ndarray] | None = None
) -> tuple[Tensor, Tensor]:
    """(tgt_ids, labels), each (B, T): the labels right-padded with IGNORE_INDEX, the decoder input the labels
    shifted right after the decoder-start token. `prefixes` (one a row, possibly empty) are read before the
    decoder-start token and not learned (Whisper's <|startofprev|> and a previous text): their labels IGNORE_INDEX."""
    prefixes = [np.zeros(0, np.int64)] * len(targets) if prefixes is None else prefixes
    ignored = [np.full(len(prefix), IGNORE_INDEX, np.int64) for prefix in prefixes]
    labels = pad_rows([np.concatenate([i, t]) for i, t in zip(ignored, targets)], IGNORE_INDEX)  # (B, T)
    read = [np.concatenate([p, [decoder_start_id], t[:-1]]).astype(np.int64) for p, t in zip(prefixes, targets)]
    tgt = pad_rows(read, pad_id, labels.shape[1])
    tgt[tgt == IGNORE_INDEX] = pad_id
    return torch.from_numpy(tgt), torch.from_numpy(labels)


def padded_to_bucket(batch: Batch, multiple: int, rows: int, pad_id: int) -> Batch:
    """`batch` with each length padded up to a multiple of `multiple` and its rows up to `rows` (training.bucket_length):
    padding tokens, masked out, unlabelled and of segment 0, so that what the model computes for the real rows is
    unchanged and a compiled step meets a few shapes, not one per batch."""

    def pad(t: Tensor | None, value: int | bool) -> Tensor | None:
        if t is None:
            return None
        shape = (max(rows, t.shape[0]), *(-(-n // multiple) * multiple for n in t.shape[1:]))
        out = torch.full(shape, value, dtype=t.dtype, device=t.device)
        out[tuple(slice(0, n) for n in t.shape)] = t
        return out

    return replace(
        batch,
        tgt_ids=pad(batch.tgt_ids, pad_id),
        labels=pad(batch.labels, IGNORE_INDEX),
        src_ids=pad(batch.src_ids, pad_id),
        src_mask=pad(batch.src_mask, False),
        prefix_lengths=pad(batch.prefix_lengths, 0),
        **{name: pad(getattr(batch, name), 0) for name in PACKING_FIELDS},
    )

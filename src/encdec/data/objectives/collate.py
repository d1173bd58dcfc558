"""Prefix-LM batches for decoder-only models: the input is a prefix, the loss falls on the target only.

For an example (prefix, target) the sequence is prefix + target; `tgt_ids` =
sequence[:-1], `labels` = sequence[1:] with -100 wherever the predicted token
is still in the prefix, so labels are -100 "over the prefix". `prefix_lengths`
lets a model attend bidirectionally inside the prefix if it wants to.

The UL2, prefix-LM and seq2seq objectives all emit this layout, so it lives
here, below them, and none of them imports another for it.

Shapes: B batch, T sequence length - 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from encdec.data.batch import IGNORE_INDEX, Batch, pad_rows


def collate_prefix_lm(
    examples: Sequence[tuple[np.ndarray, np.ndarray]], pad_id: int, modes: list[str] | None = None
) -> Batch:
    """(prefix, target) id arrays -> decoder-only Batch with loss on the target tokens."""
    sequences = [np.concatenate([p, t]).astype(np.int64) for p, t in examples]
    full = pad_rows(sequences, pad_id)  # (B, T + 1)
    labels = full[:, 1:].copy()  # (B, T)
    positions = np.arange(labels.shape[1])[None, :] + 1  # index in the sequence of each label
    prefix = np.array([len(p) for p, _ in examples])[:, None]  # (B, 1)
    length = np.array([len(s) for s in sequences])[:, None]
    labels[(positions < prefix) | (positions >= length)] = IGNORE_INDEX
    return Batch(
        tgt_ids=torch.from_numpy(full[:, :-1].copy()),
        labels=torch.from_numpy(labels),
        prefix_lengths=torch.from_numpy(prefix[:, 0].copy()),
        modes=modes,
    )

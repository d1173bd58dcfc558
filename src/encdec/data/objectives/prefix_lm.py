"""Prefix-LM batches for decoder-only models: the input is a prefix, the loss falls on the target only.

For an example (prefix, target) the sequence is prefix + target; `tgt_ids` =
sequence[:-1], `labels` = sequence[1:] with -100 wherever the predicted token
is still in the prefix, so labels are -100 "over the prefix". `prefix_lengths`
lets a model attend bidirectionally inside the prefix if it wants to.

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


def prefix_lm_objective(documents, batch_size: int, pad_id: int, eos_id: int, max_length: int = 512, seed: int = 0):
    """Decoder-only prefix LM on documents: each chunk split as UL2's S denoiser does (first half -> rest)."""
    from encdec.data.objectives.ul2 import UL2Config, UL2Objective

    config = UL2Config(r_prob=0.0, x_prob=0.0, s_prob=1.0, max_length=max_length)
    return UL2Objective(
        documents,
        batch_size,
        pad_id=pad_id,
        eos_id=eos_id,
        decoder_start_id=pad_id,
        sentinel_ids=[],
        config=config,
        batch_format="prefix_lm",
        seed=seed,
    )

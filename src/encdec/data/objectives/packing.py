"""Packing: several (source, target) examples laid out in one row, as seqio / t5x do with `pack=True`.

A step's examples are placed by greedy first fit (longest first) into rows of at most
`max_source_len` source and `max_target_len` target tokens (an example longer
than that gets a row of its own), so short examples stop paying for padding to
the longest one. Each row carries, for source and target alike,

    segments   1, 2, ... for the examples in the row, 0 at padding
    positions  0, 1, ... restarting at each example

and the model attends within a segment only (encoder, causal decoder and
cross-attention), with positions counted per segment, so each example's loss is
what it would be alone in a row (tests/models/test_packed_attention.py). The
decoder input of each segment starts with the decoder-start token: the shift
right happens per example, never across a segment border.

Shapes: B rows, S source length, T target length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from encdec.data import bins
from encdec.data.batch import IGNORE_INDEX, Batch, pad_rows


def first_fit(lengths: Sequence[tuple[int, int]], max_source_len: int, max_target_len: int) -> list[list[int]]:
    """Example indices per row, by first fit decreasing (data.bins): longest source first, each (source length,
    target length) into the first row where both fit."""
    return bins.first_fit(lengths, (max_source_len, max_target_len))


def segment_layout(lengths: Sequence[int], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Segment ids (1, 2, ...; 0 after the last) and per-segment positions of one row: (width,) each."""
    segments = np.zeros(width, dtype=np.int64)
    positions = np.zeros(width, dtype=np.int64)
    start = 0
    for i, n in enumerate(lengths):
        segments[start : start + n] = i + 1
        positions[start : start + n] = np.arange(n)
        start += n
    return segments, positions


def collate_packed(
    examples: Sequence[tuple[np.ndarray, np.ndarray]],
    pad_id: int,
    decoder_start_id: int,
    max_source_len: int,
    max_target_len: int,
    modes: list[str] | None = None,
) -> Batch:
    """(inputs, targets) id arrays -> a packed Batch, its rows as wide as the widest packed row.

    Targets already end with EOS when they should. `modes` stay per example, in the order of `examples`.
    """
    rows = first_fit([(len(s), len(t)) for s, t in examples], max_source_len, max_target_len)
    sources = [[examples[i][0] for i in row] for row in rows]
    targets = [[examples[i][1] for i in row] for row in rows]
    src = pack_rows(sources, pad_id)  # (B, S)
    labels = pack_rows(targets, IGNORE_INDEX)  # (B, T)
    tgt = pack_rows([[shift_right(t, decoder_start_id) for t in row] for row in targets], pad_id)  # (B, T)
    src_segments, src_positions = layouts(sources, src.shape[1])  # (B, S) each
    tgt_segments, tgt_positions = layouts(targets, tgt.shape[1])  # (B, T) each
    return Batch(
        tgt_ids=torch.from_numpy(tgt),
        labels=torch.from_numpy(labels),
        src_ids=torch.from_numpy(src),
        src_mask=torch.from_numpy(src_segments > 0),
        modes=modes,
        src_segments=torch.from_numpy(src_segments),
        tgt_segments=torch.from_numpy(tgt_segments),
        src_positions=torch.from_numpy(src_positions),
        tgt_positions=torch.from_numpy(tgt_positions),
    )


def pack_rows(rows: Sequence[Sequence[np.ndarray]], value: int) -> np.ndarray:
    """Each row's parts concatenated, right-padded with `value` to the widest row: (B, L) int64."""
    return pad_rows([np.concatenate(parts).astype(np.int64) for parts in rows], value)


def layouts(rows: Sequence[Sequence[np.ndarray]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Segment ids and per-segment positions of every row: (B, width) each."""
    pairs = [segment_layout([len(p) for p in parts], width) for parts in rows]
    return np.stack([s for s, _ in pairs]), np.stack([p for _, p in pairs])


def shift_right(target: np.ndarray, decoder_start_id: int) -> np.ndarray:
    """The decoder input of one example: the decoder-start token, then the target without its last token."""
    return np.concatenate([[decoder_start_id], target[:-1]]).astype(np.int64)

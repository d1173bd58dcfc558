"""Padding masks as callers hand them over, made boolean once at a model's public entry points;
and the segment masks of packed batches (`Packing`).

Hugging Face tokenizers return 0/1 integer `attention_mask`s; others pass booleans
or 0./1. floats. Every family takes all three and works on booleans inside.

Shapes: B batch, S length (source length beside T, the target length).
"""

from dataclasses import dataclass

import torch

from encdec.errors import DataError
from encdec.modules.attention_kinds.masked import Band


def as_bool_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """mask (B, S) bool, integer or float, nonzero at real tokens -> (B, S) bool, True at real tokens.

    Booleans and integers cost nothing. A float mask is checked to hold only 0 and 1,
    one host sync: an additive mask (0 and -inf) would otherwise read as its inverse.
    """
    if mask is None or mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() and not bool(((mask == 0) | (mask == 1)).all()):
        raise DataError("a float attention mask must hold only 0 and 1 (1 at real tokens), not additive values")
    return mask != 0


@dataclass
class Packing:
    """Where the examples of a packed batch lie (data.objectives.packing): segment ids (1, 2, ... per
    example, 0 at padding) and positions counted from 0 in each example, for source and target.

    The three masks keep examples apart: a token attends only to tokens of its own segment (in the
    decoder, also only to earlier ones). Each is built once per forward and shared by every layer.
    """

    src_segments: torch.Tensor  # (B, S) int
    tgt_segments: torch.Tensor  # (B, T) int
    src_positions: torch.Tensor  # (B, S) int
    tgt_positions: torch.Tensor  # (B, T) int
    src_longest: int | None = None  # no source segment is longer (known on the host, where packed): a band

    def encoder_allowed(self) -> torch.Tensor:
        """(B, 1, S, S) bool: source token i may see source token j of its own segment."""
        return same_segment(self.src_segments, self.src_segments)

    def decoder_allowed(self) -> torch.Tensor:
        """(B, 1, T, T) bool: target token i may see target token j <= i of its own segment."""
        T = self.tgt_segments.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=self.tgt_segments.device).tril()  # (T, T)
        return same_segment(self.tgt_segments, self.tgt_segments) & causal

    def cross_allowed(self) -> torch.Tensor:
        """(B, 1, T, S) bool: target token i may see the source tokens of its own example."""
        return same_segment(self.tgt_segments, self.src_segments)

    def source_lengths(self) -> torch.Tensor:
        """(B, T): the source length of each target token's example (for RoPE's "prepended" cross positions)."""
        return (self.tgt_segments[:, :, None] == self.src_segments[:, None, :]).sum(-1)


def same_segment(q_segments: torch.Tensor, k_segments: torch.Tensor) -> torch.Tensor:
    """q_segments (B, T), k_segments (B, S) -> (B, 1, T, S) bool, True where both lie in one example
    (never at a padding key; a padding query sees nothing, which additive_mask keeps finite)."""
    same = q_segments[:, :, None] == k_segments[:, None, :]  # (B, T, S)
    return (same & (k_segments[:, None, :] > 0))[:, None]


def within_window(
    q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, causal: bool, split: bool = False
) -> torch.Tensor:
    """Which keys a sliding-window attention's queries see, True to attend: q_pos, k_pos (T,) / (S,) ->
    (1, 1, T, S), or (B, T) / (B, S) -> (B, 1, T, S): the rule of a `Band(window, causal, split)` kind
    (modules.attention_kinds.masked, where its three forms are described)."""
    near = Band(window, causal, split).rule(q_pos[..., :, None], k_pos[..., None, :])  # (T, S) or (B, T, S)
    return near[None, None] if near.dim() == 2 else near[:, None]

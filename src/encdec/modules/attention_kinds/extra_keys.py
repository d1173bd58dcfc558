"""The kinds that attend to keys beside a layer's own: LongT5's transient-global keys (one per block of the
input, modules.transient_global) and T5Gemma 2's merged self- and cross-attention (the memory's keys).

Shapes: B batch, H heads, G global keys.
"""

from dataclasses import dataclass

import torch
from torch import nn

from encdec.modules.attention import additive_mask
from encdec.modules.attention_kinds.kind import AttentionKind, ExtraKeys
from encdec.modules.positions import relative_position_bucket
from encdec.modules.transient_global import TransientGlobals


@dataclass(frozen=True)
class TransientGlobal(AttentionKind):
    """LongT5's global keys: one per `block_size` tokens, the block's summed states normed by the attention's
    `global_norm`, seen by every real token through `table`, a relative bias of k - its block (Guo et al. 2022,
    3.1.2), looked up once a batch (TransientGlobals.bias)."""

    block_size: int
    table: nn.Module
    extra_keys = True

    def parameters(self) -> int:
        return self.table.embed.weight.numel()

    def side(self, real: torch.Tensor, globals_: TransientGlobals, t0: int, t1: int, dtype) -> torch.Tensor:
        """The mask of query rows t0..t1 over the G global keys, real (B, S) the real tokens: (B, H, rows, G)."""
        sees = (real[:, t0:t1, None] == globals_.real[:, None, :])[:, None]  # (B, 1, rows, G)
        return additive_mask(sees, globals_.rows_bias(t0, t1), dtype)

    def flex_keys(self, real: torch.Tensor, globals_: TransientGlobals) -> ExtraKeys:
        """`side` by index, for FlexAttention: query q of row b sees global key g where both are real or neither
        is, its score plus the table's bias of g - the query's block."""
        table, blocks = self.table, globals_.blocks

        def sees(b, q, g):
            return real[b, q] == globals_.real[b, g]

        def score(score, b, h, q, g):
            bucket = relative_position_bucket(
                g - blocks[b, q], table.bidirectional, table.num_buckets, table.max_distance
            )
            return score + table.embed.weight[bucket, h]

        return ExtraKeys(globals_.count, sees, score, rows=real.shape[0])


@dataclass(frozen=True)
class Merged(AttentionKind):
    """A decoder self-attention that reads the memory too, one softmax over its own keys and the encoder's
    (T5Gemma 2's; modules.blocks.DecoderBlock without a cross-attention)."""

    extra_keys = True
    in_blocks = False  # a decoder's: its memory's keys are not a band's

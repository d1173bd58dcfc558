"""The kinds that give positions: T5's relative bias of the scores (one table a stack shares, or UMT5's one per
layer) and RoPE's rotation of queries and keys (a global or local theta, a scaling: the rotary table's).

Shapes: H heads, T queries, S keys.
"""

from dataclasses import dataclass

from torch import nn

from encdec.modules.attention_kinds.kind import AttentionKind
from encdec.modules.positions import relative_position_bucket


@dataclass(frozen=True)
class RelativeBias(AttentionKind):
    """T5's learned bias of k - q, bucketed (modules.positions.RelativePositionBias): shared when every layer's
    kind holds the same table (T5's), one per layer otherwise (UMT5's). Kinds of one table are equal, so the
    layers that read it share one mask."""

    table: nn.Module
    masks = True

    def bias(self, q_pos, k_pos):
        return self.table(q_pos, k_pos)  # (1, H, T, S)

    def score(self, score, head, q, k):
        table = self.table
        bucket = relative_position_bucket(k - q, table.bidirectional, table.num_buckets, table.max_distance)
        return score + table.embed.weight[bucket, head]

    def parameters(self) -> int:
        return self.table.embed.weight.numel()


@dataclass(frozen=True)
class Rope(AttentionKind):
    """Queries and keys rotated by their positions (modules.positions.RotaryEmbedding: rope_theta, or a sliding
    layer's positions.rope_local_theta; positions.rope_scale's linear scaling); no mask, no parameters."""

    rotary: nn.Module

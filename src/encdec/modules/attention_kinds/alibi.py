"""ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embeddings; each head's scores are lowered
in proportion to the distance of the key from its query, by a fixed slope of its own.

    bias(q, k) = -slope_h * |q - k|      slope_h = 2^(-8 h / H), h = 1 .. H

with H a power of two; otherwise the slopes of the power of two below H, then every other slope of the one above
(the paper's code, as BLOOM's `_get_alibi_slopes`). Causal layers see only k <= q, where |q - k| = q - k.
Slopes are fixed, not learned: no parameters. A config names it, `model.attention.kinds: {alibi: {}}`, with no
settings: its heads are the stack's.

Shapes: H heads, T queries, S keys.
"""

import math
from dataclasses import dataclass

import torch

from encdec.errors import ConfigError, listed
from encdec.modules.attention_kinds.kind import AttentionKind


def alibi_slopes(heads: int) -> tuple[float, ...]:
    """Each head's slope, in the paper's order."""
    below = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * h / below) for h in range(1, below + 1)]
    return tuple(slopes + list(alibi_slopes(2 * below)[0::2][: heads - below])) if heads > below else tuple(slopes)


@dataclass(frozen=True)
class Alibi(AttentionKind):
    heads: int
    masks = True

    @classmethod
    def declared(cls, settings, heads, causal, key):
        if settings:
            raise ConfigError(
                f"{key} takes no settings (its slopes follow from the heads), got {listed(list(settings))}"
            )
        return cls(heads)

    def slopes(self, device: torch.device) -> torch.Tensor:
        return torch.tensor(alibi_slopes(self.heads), device=device)

    def bias(self, q_pos, k_pos):
        distance = (q_pos[:, None] - k_pos[None, :]).abs()  # (T, S)
        return -(self.slopes(q_pos.device)[:, None, None] * distance)[None]  # (1, H, T, S)

    def head_slope(self, head: torch.Tensor) -> torch.Tensor:
        """`alibi_slopes` of head indices (from 0) by arithmetic, no table: a score_mod compiled by inductor
        cannot build a tensor inside it. The first `below` heads 2^(-8 (h + 1) / below), the rest every other
        slope of 2 x below heads from the first, 2^(-4 (2 (h - below) + 1) / below)."""
        below = 2 ** math.floor(math.log2(self.heads))
        extra = torch.exp2(-4.0 * (2 * (head - below) + 1) / below)
        return torch.where(head < below, torch.exp2(-8.0 * (head + 1) / below), extra)

    def score(self, score, head, q, k):
        return score - self.head_slope(head) * (q - k).abs()

"""The kinds that say which keys a query sees: every key, causal, and a band (local, sliding, each side or split).

Shapes: T queries, S keys.
"""

from dataclasses import dataclass

from encdec.modules.attention_kinds.kind import AttentionKind, LayerKinds


@dataclass(frozen=True)
class Full(AttentionKind):
    """Every key (an encoder's, a cross-attention's)."""


@dataclass(frozen=True)
class Causal(AttentionKind):
    """Keys at or before the query (a decoder's self-attention)."""

    masks = True

    def rule(self, q, k):
        return k <= q


@dataclass(frozen=True)
class Band(AttentionKind):
    """Keys near the query: causal, the `width` newest up to it, q - k < width (Gemma 2's sliding window);
    each side, at most `width` away, |q - k| <= width (LongT5's local radius, T5Gemma's encoder window, as
    transformers masks them); split, `width` keys in all, (width + 1) // 2 back counting the query's own and
    width // 2 ahead (T5Gemma 2's encoder window)."""

    width: int
    causal: bool = False
    split: bool = False
    masks = True

    @property
    def band(self) -> int:
        return self.width

    def rule(self, q, k):
        distance = q - k
        if self.causal:
            return distance < self.width
        if self.split:
            return (distance >= -(self.width // 2)) & (distance < (self.width + 1) // 2)
        return distance.abs() <= self.width


def only_causal(kinds: LayerKinds) -> bool:
    """Whether the layer's mask is causality alone, no other rule or bias (SDPA's mask-free causal path serves
    it; RoPE rotates apart, and a merged attention joins the memory's keys to it itself)."""
    return [kind for kind in kinds if kind.masks] == [Causal()]

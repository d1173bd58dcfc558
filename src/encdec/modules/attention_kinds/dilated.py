"""A dilated band (Longformer's dilated sliding window, Beltagy et al. 2020, 3.1): a query sees every
`dilation`-th key of its band, `width` steps of them each side (or, causal, the query's own and width - 1
steps back), so that a layer reaches width x dilation positions away with 2 x width + 1 keys.

    each side   (q - k) % dilation == 0 and |q - k| <= width x dilation
    causal      (q - k) % dilation == 0 and 0 <= q - k < width x dilation

Shapes: T queries, S keys.
"""

from dataclasses import dataclass

from encdec.modules.attention_kinds.kind import AttentionKind
from encdec.schema import Positive, read


@dataclass(frozen=True)
class DilatedBand(AttentionKind):
    width: Positive
    dilation: Positive
    causal: bool = False
    masks = True

    @classmethod
    def declared(cls, settings, heads, causal, key):
        return read(cls, {**settings, "causal": causal}, f"{key}.")  # causal as its stack is

    @property
    def band(self) -> int:
        """No key farther than this from its query: what the chunked path reads around a chunk's rows."""
        return (self.width - 1 if self.causal else self.width) * self.dilation

    def rule(self, q, k):
        distance = q - k
        on_step = distance % self.dilation == 0
        if self.causal:
            return on_step & (distance >= 0) & (distance < self.width * self.dilation)
        return on_step & (distance.abs() <= self.width * self.dilation)

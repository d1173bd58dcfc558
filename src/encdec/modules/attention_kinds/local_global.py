"""Longformer's global tokens beside a local band (Beltagy et al. 2020, 3.2; LED's encoder): a layer of kinds
`(Full(), Band(w), GlobalTokenKeys())` sees the keys of its band, the global tokens' left out of it, then every
global token as a key after them, each once (modules.global_tokens: which tokens, and their own attention).
Which tokens are global is the batch's (`GlobalTokenRows`), not a rule of positions, so the kind declares no
`rule`: its `own` and `side` fold the batch's into a span's mask, as TransientGlobal's `side` does.

Shapes: B batch, G global tokens.
"""

from dataclasses import dataclass

import torch

from encdec.modules.attention import additive_mask
from encdec.modules.attention_kinds.kind import AttentionKind, ExtraKeys
from encdec.modules.global_tokens import GlobalTokenRows


@dataclass(frozen=True)
class GlobalTokenKeys(AttentionKind):
    extra_keys = True
    in_blocks = False  # which keys are global is the batch's, not a rule of k - q

    def own(self, allowed: torch.Tensor | None, tokens: GlobalTokenRows, k0: int, k1: int) -> torch.Tensor:
        """What a batch allows of keys k0..k1 (bool, broadcastable to (B, 1, T, keys); None: all), the global
        tokens left out: each is a key after them instead."""
        local = ~tokens.is_global(k0, k1)[:, None, None, :]  # (B, 1, 1, keys)
        return local if allowed is None else allowed & local

    def side(self, real: torch.Tensor, tokens: GlobalTokenRows, t0: int, t1: int, dtype) -> torch.Tensor:
        """The mask of query rows t0..t1 over the G global keys (B, 1, rows, G): every query sees its row's global
        tokens (a row of fewer has the rest blocked)."""
        B, G = tokens.present.shape
        return additive_mask(tokens.present[:, None, None, :].expand(B, 1, t1 - t0, G), None, dtype)

    def flex_keys(self, tokens: GlobalTokenRows) -> ExtraKeys:
        """`own` and `side` by index, for FlexAttention: a global token is no key of the band, and every query
        sees its row's global tokens after it."""
        G = tokens.count

        def sees(b, q, g):
            return tokens.present[b, g]

        def own(b, k):
            return tokens.slot[b, k] >= G

        return ExtraKeys(G, sees, own=own, rows=tokens.present.shape[0])

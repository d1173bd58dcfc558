"""Longformer's global tokens (Beltagy et al. 2020, 3.2): beside a local band, chosen tokens of the input attend
to every key, and every token attends to them.

    a token's keys      its band's, the global tokens' left out, then every global token's after them (G extra
                        keys, by the layer's own projections): each global key seen once, as transformers' LED
                        (its `_concat_with_global_key_attn_probs`) sees it
    a global token      its output replaced by its own attention over every real key, its query, keys and values
                        by projections of their own (Attention's global_q, global_k, global_v)

`GlobalTokenRows` holds a batch's global tokens, made once per forward (`global_token_rows`) and shared by every
layer. Both parts are linear in the input: G extra keys a query, G queries over every key.

Shapes: B batch, S length, G global tokens (the most of one row), H heads, K kv heads, D head dim.
"""

from dataclasses import dataclass

import torch


@dataclass
class GlobalTokenRows:
    index: torch.Tensor  # (B, G) long: each row's global tokens' positions, in order (0 where absent)
    present: torch.Tensor  # (B, G) bool: which of a row's G are global tokens (a row may have fewer)
    slot: torch.Tensor  # (B, S) long: each token's place among its row's global tokens, G for none
    real: torch.Tensor  # (B, S) bool: the real tokens, the keys a global token sees

    @property
    def count(self) -> int:
        return self.index.shape[1]

    def is_global(self, k0: int, k1: int) -> torch.Tensor:
        """(B, k1 - k0) bool: which of the tokens k0..k1 are global."""
        return self.slot[:, k0:k1] < self.count

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, S, C) -> the global tokens' rows (B, G, C)."""
        return x.gather(1, self.index[:, :, None].expand(-1, -1, x.shape[-1]))

    def keys(self, k: torch.Tensor) -> torch.Tensor:
        """k (B, K, S, D) (keys or values) -> k with the global tokens' after them, (B, K, S + G, D)."""
        B, K, _, D = k.shape
        return torch.cat([k, k.gather(2, self.index[:, None, :, None].expand(B, K, -1, D))], dim=2)

    def heads(self, x: torch.Tensor, projections, n_heads: int) -> tuple[torch.Tensor, ...]:
        """x (B, S, C) and the global tokens' own q, k and v projections -> their queries (B, H, G, D), every
        token's keys and values (B, H, S, D), and the keys they see, the real ones (B, 1, 1, S) bool."""
        states = (self.take(x), x, x)
        q, k, v = (layer(s).unflatten(-1, (n_heads, -1)).transpose(1, 2) for layer, s in zip(projections, states))
        return q, k, v, self.real[:, None, None, :]

    def replace(self, out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """out (B, H, S, D) with each global token's row replaced by its own, rows (B, H, G, D)."""
        B, H, S, D = out.shape
        padded = torch.cat([rows, rows.new_zeros(B, H, 1, D)], dim=2)  # slot G: a token of none
        own = padded.gather(2, self.slot[:, None, :, None].expand(B, H, S, D))
        return torch.where(self.is_global(0, S)[:, None, :, None], own, out)


def global_token_rows(real: torch.Tensor, rule: str) -> GlobalTokenRows | None:
    """The global tokens `rule` picks in a batch of real tokens (B, S) bool: "first", each row's first real token;
    "none", none (None)."""
    if rule == "none":
        return None
    first = real & (real.cumsum(1) == 1)  # (B, S)
    return from_mask(first, real)


def from_mask(chosen: torch.Tensor, real: torch.Tensor) -> GlobalTokenRows:
    """The global tokens a mask (B, S) bool marks (transformers' global_attention_mask, real tokens alone)."""
    chosen = chosen & real
    B, S = chosen.shape
    counts = chosen.sum(1)  # (B,)
    G = int(counts.max()) if B else 0
    order = chosen.cumsum(1) - 1  # (B, S): a global token's place in its row
    slot = torch.where(chosen, order, G)
    index = torch.zeros(B, G + 1, dtype=torch.long, device=real.device)
    index.scatter_(1, slot, torch.arange(S, device=real.device).expand(B, S))  # non-global tokens: column G, dropped
    present = torch.arange(G, device=real.device)[None, :] < counts[:, None]
    return GlobalTokenRows(index[:, :G].where(present, 0), present, slot, real)

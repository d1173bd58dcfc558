"""LongT5's transient-global attention (Guo et al. 2022, 3.1.2): besides its local keys, every token attends to
one key per block of `block_size` input tokens, made from the sum of the block's (normed) inputs.

    block of token p:   p // block_size for a real token; a last, partial block joins the full one before it;
                        padding (and a row of fewer real tokens than one block) belongs to none
    global keys:        G = S // block_size of them; key k is real where some token's block reaches k
    which it sees:      a real token every real global key, through a relative bias of k - its block, looked up
                        once a batch for every block (`bias`, (H, G + 1, G)) and read by each token's block

`TransientGlobals` holds these for one batch, made once per forward (`transient_globals`) and shared by every
layer; each layer's attention sums its own inputs by block (`block_sums`), norms them and projects them into
keys and values beside its local ones. transformers' LongT5 computes the same blocks (its
`_make_global_fixed_block_ids`), so a checkpoint's attention reads the same keys.

Shapes: B batch, S length, G global keys, C model dim, H heads.
"""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class TransientGlobals:
    blocks: torch.Tensor  # (B, S) long: each token's block, -1 for none
    real: torch.Tensor  # (B, G) bool: which global keys some token's block reaches
    bias: torch.Tensor | None = None  # (H, G + 1, G): the keys' bias for a token of block -1 (none), 0, 1, ...

    @property
    def count(self) -> int:
        return self.real.shape[1]

    def sees(self, mask: torch.Tensor) -> torch.Tensor:
        """mask (B, S) bool, True at real tokens -> (B, 1, S, G) bool: a real token sees the real global keys (a
        padding token only the others, as transformers' LongT5 masks it; its output is never read)."""
        return (mask[:, :, None] == self.real[:, None, :])[:, None]

    def rows_bias(self, t0: int, t1: int) -> torch.Tensor:
        """The global keys' bias for tokens t0..t1: (B, H, rows, G), each token's block's row of `bias`."""
        return self.bias[:, self.blocks[:, t0:t1] + 1].transpose(0, 1)


def transient_globals(mask: torch.Tensor, block_size: int, table: nn.Module | None = None) -> TransientGlobals:
    """The blocks of a batch with padding mask (B, S) bool (True at real tokens), and `table`'s bias of k - block
    (a RelativePositionBias) for every block, once (None without a table)."""
    B, S = mask.shape
    position = torch.arange(S, device=mask.device)
    blocks = torch.where(mask, position // block_size, -1)  # (B, S)
    block_ends = mask & (position % block_size == block_size - 1)
    last = block_ends.sum(-1, keepdim=True) - 1  # (B, 1): the last full block, -1 without one
    blocks = torch.where(blocks < last, blocks, last).where(mask, -1)  # the partial block joins the last full one
    keys = torch.arange(S // block_size, device=mask.device)
    bias = table(torch.arange(-1, len(keys), device=mask.device), keys)[0] if table is not None else None
    return TransientGlobals(blocks, keys[None, :] <= blocks.max(-1, keepdim=True).values, bias)


def block_sums(x: torch.Tensor, blocks: torch.Tensor, count: int) -> torch.Tensor:
    """x (B, S, C), blocks (B, S) (-1: none) -> (B, G, C): each block's sum of x (zero for a block of none)."""
    B, _, C = x.shape
    index = torch.where(blocks >= 0, blocks, count)[:, :, None].expand(-1, -1, C)  # none: an extra row, dropped
    return x.new_zeros(B, count + 1, C).scatter_add(1, index, x)[:, :count]

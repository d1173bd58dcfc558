"""LongT5's transient-global attention (Guo et al. 2022, 3.1.2): besides its local keys, every token attends to
one key per block of `block_size` input tokens, made from the sum of the block's (normed) inputs.

    block of token p:   p // block_size for a real token; a last, partial block joins the full one before it;
                        padding (and a row of fewer real tokens than one block) belongs to none
    global keys:        G = S // block_size of them; key k is real where some token's block reaches k
    which it sees:      a real token every real global key, through a relative bias of k - its block

`TransientGlobals` holds these for one batch, made once per forward (`transient_globals`) and shared by every
layer; each layer's attention sums its own inputs by block (`block_sums`), norms them and projects them into
keys and values beside its local ones. transformers' LongT5 computes the same blocks (its
`_make_global_fixed_block_ids`), so a checkpoint's attention reads the same keys.

Shapes: B batch, S length, G global keys, C model dim, H heads.
"""

from dataclasses import dataclass

import torch


@dataclass
class TransientGlobals:
    blocks: torch.Tensor  # (B, S) long: each token's block, -1 for none
    real: torch.Tensor  # (B, G) bool: which global keys some token's block reaches

    @property
    def count(self) -> int:
        return self.real.shape[1]

    def sees(self, mask: torch.Tensor) -> torch.Tensor:
        """mask (B, S) bool, True at real tokens -> (B, 1, S, G) bool: a real token sees the real global keys (a
        padding token only the others, as transformers' LongT5 masks it; its output is never read)."""
        return (mask[:, :, None] == self.real[:, None, :])[:, None]

    def positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(queries' block (B, S), keys' index (G,)): the positions whose difference the global bias buckets."""
        return self.blocks, torch.arange(self.count, device=self.blocks.device)


def transient_globals(mask: torch.Tensor, block_size: int) -> TransientGlobals:
    """The blocks of a batch with padding mask (B, S) bool (True at real tokens)."""
    B, S = mask.shape
    position = torch.arange(S, device=mask.device)
    blocks = torch.where(mask, position // block_size, -1)  # (B, S)
    block_ends = mask & (position % block_size == block_size - 1)
    last = block_ends.sum(-1, keepdim=True) - 1  # (B, 1): the last full block, -1 without one
    blocks = torch.where(blocks < last, blocks, last).where(mask, -1)  # the partial block joins the last full one
    keys = torch.arange(S // block_size, device=mask.device)
    return TransientGlobals(blocks, keys[None, :] <= blocks.max(-1, keepdim=True).values)


def block_sums(x: torch.Tensor, blocks: torch.Tensor, count: int) -> torch.Tensor:
    """x (B, S, C), blocks (B, S) (-1: none) -> (B, G, C): each block's sum of x (zero for a block of none)."""
    B, _, C = x.shape
    index = torch.where(blocks >= 0, blocks, count)[:, :, None].expand(-1, -1, C)  # none: an extra row, dropped
    return x.new_zeros(B, count + 1, C).scatter_add(1, index, x)[:, :count]

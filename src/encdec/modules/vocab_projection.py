"""The output projection onto the vocabulary, shaped for the way it is called.

Shapes: N rows (batch times positions), C model dim, V vocabulary.
"""

import torch
import torch.nn.functional as F
from torch import nn

FEW_ROWS = 64  # at or below this many rows, decoding on CPU takes the transposed product


def vocab_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """hidden (..., C) times weight (V, C) transposed -> logits (..., V).

    Decoding asks for a handful of rows against a wide matrix (V of 8k-60k). On CPU,
    BLAS runs that product as weight @ hidden^T (V, N) markedly faster than as
    hidden @ weight^T (N, V): about 1.2-2x on 8-32 rows (benchmarks/bench_generate.py
    spends up to a fifth of each step here). Training and long inputs keep F.linear.
    """
    rows = hidden.numel() // hidden.shape[-1]
    if hidden.device.type != "cpu" or rows > FEW_ROWS or hidden.requires_grad:
        return F.linear(hidden, weight)
    flat = hidden.reshape(rows, hidden.shape[-1])  # (N, C)
    return (weight @ flat.T).T.reshape(*hidden.shape[:-1], weight.shape[0])  # (V, N) -> (..., V)


def lm_head(hidden: torch.Tensor, embed: nn.Embedding, head: nn.Linear | None) -> torch.Tensor:
    """hidden (..., C) -> logits (..., V): tied to the token embeddings unless `head` is given."""
    return vocab_logits(hidden, (head if head is not None else embed).weight)

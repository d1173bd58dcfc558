"""The output projection onto the vocabulary, tied to the token embeddings or not.

Decoding asks for a handful of rows against a wide matrix (V of 8k-60k), the largest
product of a decoding step; `decoding_linear` takes it the fast way.

Shapes: N rows (batch times positions), C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.modules.decoding_linear import decoding_linear
from encdec.modules.int8_linear import Int8Linear


def lm_head(hidden: torch.Tensor, embed: nn.Embedding, head: nn.Linear | Int8Linear | None) -> torch.Tensor:
    """hidden (..., C) -> logits (..., V): tied to the token embeddings unless `head` is given
    (an Int8Linear when the model was quantized, tied or not)."""
    if isinstance(head, Int8Linear):
        return head(hidden)
    return decoding_linear(hidden, (head if head is not None else embed).weight)

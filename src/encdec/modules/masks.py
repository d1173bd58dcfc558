"""Padding masks as callers hand them over, made boolean once at a model's public entry points.

Hugging Face tokenizers return 0/1 integer `attention_mask`s; others pass booleans
or 0./1. floats. Every family takes all three and works on booleans inside.

Shapes: B batch, S length.
"""

import torch

from encdec.errors import DataError


def as_bool_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """mask (B, S) bool, integer or float, nonzero at real tokens -> (B, S) bool, True at real tokens.

    Booleans and integers cost nothing. A float mask is checked to hold only 0 and 1,
    one host sync: an additive mask (0 and -inf) would otherwise read as its inverse.
    """
    if mask is None or mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() and not bool(((mask == 0) | (mask == 1)).all()):
        raise DataError("a float attention mask must hold only 0 and 1 (1 at real tokens), not additive values")
    return mask != 0

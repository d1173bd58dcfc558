"""The model dimension of encdec's parameters, for writing a model whose residual stream is reordered.

Permuting the model dimension of every residual-stream weight by the same permutation changes no logit (LayerNorm,
attention and the tied head are all equivariant to it): a model with interleaved sinusoids is written as Marian or
Pegasus with its dimensions reordered sines first (interop/bart/bart_layout.py), and its LoRA adapters alike
(peft_adapter).
"""

import re

import torch

# our parameter name pattern -> the dimension of that tensor that is the model dimension C
MODEL_DIM = [
    (r"((encoder|decoder)\.)?embed\.weight|lm_head\.weight", 1),  # (V, C)
    (r".*_attn\.(q|k|v)\.weight|.*\.ffn\.(wi|wi_0|wi_1)\.weight", 1),  # (out, C): inputs read from the stream
    (r".*_attn\.o\.(weight|bias)|.*\.ffn\.wo\.(weight|bias)", 0),  # (C, in) or (C,): outputs added to it
    (r".*norm\.(weight|bias)", 0),  # (C,)
]


def model_dim(name: str) -> int | None:
    """The dimension of parameter `name` that is the model dimension, None where it has none."""
    return next((d for pattern, d in MODEL_DIM if re.fullmatch(pattern, name)), None)


def halves_order(d_model: int) -> torch.Tensor:
    """(C,) indices: the interleaved layout's sine dimensions 0, 2, 4, ... then its cosine dimensions 1, 3, ..."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_model_dim(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor of `state` with its model dimension reordered by `order`; other tensors as they are."""
    permuted = {}
    for name, tensor in state.items():
        dim = model_dim(name)
        permuted[name] = tensor if dim is None else tensor.index_select(dim, order.to(tensor.device))
    return permuted

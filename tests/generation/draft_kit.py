"""Drafts for the speculative tests of generate and of the server."""

import copy

import torch


def near_copy(model: torch.nn.Module, noise: float = 0.3) -> torch.nn.Module:
    """A draft that agrees with `model` often, not always: its decoder's weights shaken a little."""
    torch.manual_seed(5)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for weight in draft.decoder.parameters():
            weight.add_(noise * weight.std() * torch.randn_like(weight))
    return draft

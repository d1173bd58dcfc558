"""Named model outputs (never positional tuples)."""

from dataclasses import dataclass, field

import torch


@dataclass
class EncoderOutput:
    hidden: torch.Tensor  # (B, S, C)
    mask: torch.Tensor | None  # (B, S) bool, True at real tokens
    router_logits: list[torch.Tensor] = field(default_factory=list)  # one (N, E) per MoE layer


@dataclass
class Seq2SeqOutput:
    logits: torch.Tensor | None  # (B, T, V); None where a training step's loss made them by blocks (chunked_loss)
    loss: torch.Tensor | None = None  # total: cross-entropy plus weighted auxiliary losses
    ce_loss: torch.Tensor | None = None  # cross-entropy alone (what validation reports)
    aux_losses: dict[str, torch.Tensor] = field(default_factory=dict)  # by name, unweighted


@dataclass
class AttentionLayers:
    """The attention modules an encoder-decoder's maps are recorded in (inspection, the server's page)."""

    encoder: list  # each encoder layer's self-attention (modules.Attention)
    cross: list  # each decoder layer's cross-attention, or its merged attention (T5Gemma 2's)

"""What the encoder and the decoder stacks share (models.encoder, models.decoder): the token table and its scale,
absolute positions, the embedding norm, and the relative bias (bidirectional in the encoder, causal in the
decoder); and the RoPE of a stack's global and sliding layers.

Shapes: B batch, T length, C model dim.
"""

import torch
from torch import nn

from encdec.models.components import (
    build_embedding_norm,
    embedding_scale,
)
from encdec.models.model_config import ModelConfig
from encdec.modules import (
    AttentionInputs,
    LearnedPositions,
    PaddedSinusoidalPositions,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositions,
    additive_mask,
)
from encdec.modules.blocks import windowed


def build_absolute_positions(cfg: ModelConfig) -> nn.Module | None:
    if cfg.position == "sinusoidal" and cfg.sinusoidal_layout == "fairseq":
        return PaddedSinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.pad_id)
    if cfg.position == "sinusoidal":
        return SinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.sinusoidal_layout)
    if cfg.position == "learned":
        return LearnedPositions(cfg.max_positions, cfg.d_model, cfg.position_offset)
    return None


class Stack(nn.Module):
    """What the encoder and the decoder share: the (shared) token table and its scale, absolute positions,
    the embedding norm, and the relative bias (bidirectional in the encoder, causal in the decoder): T5's one
    that every layer reads (`position_bias`), or UMT5's one per layer (`layer_biases`)."""

    def __init__(self, cfg: ModelConfig, embed: nn.Embedding, bidirectional: bool):
        super().__init__()
        self.embed = embed
        self.embed_scale = embedding_scale(cfg)
        self.scale_in_dtype = cfg.norm == "gemma_rmsnorm"  # Gemma rounds sqrt(d_model) to the model's dtype first
        self.positions = build_absolute_positions(cfg)
        self.embed_norm = build_embedding_norm(cfg)
        relative = cfg.position == "relative"

        def relative_bias() -> RelativePositionBias:
            return RelativePositionBias(cfg.n_heads, bidirectional, cfg.relative_buckets, cfg.relative_max_distance)

        layers = cfg.n_encoder_layers if bidirectional else cfg.decoder_layers
        self.window = cfg.sliding_window  # Gemma 2's sliding self-attention, in the layers `sliding` names
        self.split_window = cfg.sliding_window_layout == "split"  # T5Gemma 2's encoder window
        self.eoi_id = cfg.eoi_token_id
        self.register_parameter("eoi_embedding", None)  # the model's, where a token has a vector of its own
        self.sliding = [cfg.sliding_layer(i) for i in range(layers)]
        self.causal = not bidirectional
        per_layer = relative and cfg.relative_bias_per_layer
        self.position_bias = relative_bias() if relative and not per_layer else None
        self.layer_biases = nn.ModuleList(relative_bias() for _ in range(layers)) if per_layer else None

    def relative_biases(self) -> list[RelativePositionBias]:
        """The relative biases the layers read, for `for_layer`: T5's one, UMT5's one per layer, or none."""
        if self.layer_biases is not None:
            return list(self.layer_biases)
        return [self.position_bias] if self.position_bias is not None else []

    def bias_masks(self, allowed: torch.Tensor | None, q_pos: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
        """The additive masks of `allowed` with each relative bias of positions q_pos (T,) among themselves,
        (B or 1, H, T, T) for `for_layer`; one mask of `allowed` alone without a bias."""
        biases = [bias(q_pos, q_pos) for bias in self.relative_biases()] or [None]  # each (1, H, T, T)
        return [additive_mask(allowed, bias, dtype) for bias in biases]

    def windowed(
        self, inputs: list[AttentionInputs], allowed: torch.Tensor | None, pos: torch.Tensor, dtype: torch.dtype
    ) -> list[AttentionInputs]:
        """`inputs` (one entry every layer shares) with a sliding window: one entry per layer, the sliding
        layers' seeing only what `allowed` allows within the window of positions pos (T,) or (B, T)."""
        return windowed(inputs, allowed, pos, self.window, self.sliding, dtype, self.causal, self.split_window)

    def embed_tokens(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """ids (B, T) at positions pos (T,) or (B, T) -> (B, T, C): token embeddings plus absolute positions."""
        x = self.embed(ids)
        scale = (
            torch.tensor(self.embed_scale, dtype=x.dtype, device=x.device) if self.scale_in_dtype else self.embed_scale
        )
        x = x * scale  # Gemma rounds the scale to the model dtype first
        if self.eoi_embedding is not None:  # that token's own vector, unscaled (T5Gemma 2)
            x = torch.where((ids == self.eoi_id)[..., None], self.eoi_embedding.to(x.dtype), x)
        if isinstance(self.positions, PaddedSinusoidalPositions):  # pads take no position (fairseq)
            x = x + self.positions(pos, ids)
        elif self.positions is not None:
            x = x + self.positions(pos)
        return self.dropout(self.embed_norm(x))

    def whole_positions(self, ids: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """The positions a whole unpacked sequence ids (B, T) is embedded at: row (T,), or with fairseq's
        positions each token's count among its row's real tokens (B, T)."""
        if isinstance(self.positions, PaddedSinusoidalPositions):
            return self.positions.count_real(ids)
        return row


def rotaries(cfg: ModelConfig) -> tuple[RotaryEmbedding | None, RotaryEmbedding | None]:
    """RoPE of the global layers and of the sliding ones (the global layers' or its own base, Gemma 3's); none
    without RoPE."""
    if cfg.position != "rope":
        return None, None
    rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scale)
    local = RotaryEmbedding(cfg.head_dim, cfg.rope_local_theta) if cfg.rope_local_theta is not None else rotary
    return rotary, local

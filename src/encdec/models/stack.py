"""What the encoder and the decoder stacks share (models.encoder, models.decoder): the token table and its scale,
absolute positions, the embedding norm, and the relative bias (bidirectional in the encoder, causal in the
decoder); and the RoPE of a stack's global and sliding layers.

Shapes: B batch, T length, C model dim.
"""

from collections.abc import Callable

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
)
from encdec.modules.attention_kinds import (
    AttentionKind,
    Band,
    Causal,
    Full,
    GlobalTokenKeys,
    LayerKinds,
    RelativeBias,
    Rope,
    TransientGlobal,
    layer_mask,
    named,
    only_causal,
)
from encdec.modules.blocks import for_layer
from encdec.modules.flex_attention import FlexBatch, FlexMask, uses_flex


def build_absolute_positions(cfg: ModelConfig) -> nn.Module | None:
    if cfg.positions.kind == "sinusoidal" and cfg.positions.sinusoidal_layout == "fairseq":
        return PaddedSinusoidalPositions(cfg.positions.max, cfg.d_model, cfg.pad_id)
    if cfg.positions.kind == "sinusoidal":
        return SinusoidalPositions(cfg.positions.max, cfg.d_model, cfg.positions.sinusoidal_layout)
    if cfg.positions.kind == "learned":
        return LearnedPositions(cfg.positions.max, cfg.d_model, cfg.positions.offset)
    return None


class Stack(nn.Module):
    """What the encoder and the decoder share: the (shared) token table and its scale, absolute positions,
    the embedding norm, and the relative bias (bidirectional in the encoder, causal in the decoder): T5's one
    that every layer reads (`position_bias`), or UMT5's one per layer (`layer_biases`)."""

    def __init__(self, cfg: ModelConfig, embed: nn.Embedding, bidirectional: bool):
        super().__init__()
        self.embed = embed
        self.embed_scale = embedding_scale(cfg)
        self.scale_in_dtype = cfg.norms.kind == "gemma_rmsnorm"  # Gemma rounds sqrt(d_model) to the model's dtype first
        self.positions = build_absolute_positions(cfg)
        self.embed_norm = build_embedding_norm(cfg)
        self.norm_first = not bidirectional and cfg.embeddings.decoder_norm_first  # the norm before the positions
        relative = cfg.positions.kind == "relative"

        def relative_bias() -> RelativePositionBias:
            return RelativePositionBias(
                cfg.n_heads, bidirectional, cfg.positions.relative_buckets, cfg.positions.relative_max_distance
            )

        layers = cfg.n_encoder_layers if bidirectional else cfg.decoder_layers
        self.window = cfg.attention.sliding_window  # Gemma 2's sliding self-attention, in the layers `sliding` names
        self.split_window = cfg.attention.sliding_window_layout == "split"  # T5Gemma 2's encoder window
        self.eoi_id = cfg.image_tokens.eoi_token_id
        self.register_parameter("eoi_embedding", None)  # the model's, where a token has a vector of its own
        self.sliding = [cfg.sliding_layer(i) for i in range(layers)]
        self.local_radius: int | None = None  # LongT5's encoder: keys at most this far (models.encoder)
        self.global_bias: RelativePositionBias | None = None  # and its global keys' bias
        self.global_block_size = cfg.attention.global_block_size
        self.global_rule: str | None = None  # a local-global encoder's rule of its global tokens (models.encoder)
        self.causal = not bidirectional
        self.named_kinds = named(cfg.attention.kinds, cfg.n_heads, self.causal)  # a config's, by KINDS names
        self.implementation = cfg.attention.implementation  # FlexAttention or not (modules.flex_attention)
        per_layer = relative and cfg.positions.relative_per_layer
        self.position_bias = relative_bias() if relative and not per_layer else None
        self.layer_biases = nn.ModuleList(relative_bias() for _ in range(layers)) if per_layer else None

    def relative_biases(self) -> list[RelativePositionBias]:
        """The relative biases the layers read, for `for_layer`: T5's one, UMT5's one per layer, or none."""
        if self.layer_biases is not None:
            return list(self.layer_biases)
        return [self.position_bias] if self.position_bias is not None else []

    def self_kinds(self, layer: int) -> LayerKinds:
        """Layer `layer`'s self-attention as declared kinds (modules.attention_kinds), from what the stack holds:
        causal in the decoder, else every key; LongT5's local band and global keys, Longformer's global tokens (the
        encoder's); a sliding
        window in the layers `sliding` names, with no relative bias beside it, else T5's bias (UMT5's the
        layer's); the layer's RoPE; and the kinds the config names (model.attention.kinds)."""
        kinds: list[AttentionKind] = [Causal() if self.causal else Full()]
        if self.local_radius is not None:  # LongT5: transformers' blocks of local_radius + 1 see these keys
            kinds.append(Band(self.local_radius))
        biases = self.relative_biases()
        if self.window is not None and self.sliding[layer]:
            kinds.append(Band(self.window, self.causal, self.split_window))
        elif biases:  # T5's bias sees only k - q, the same inside a segment counted from its start or the row's
            kinds.append(RelativeBias(for_layer(biases, layer)))
        if self.global_bias is not None:
            kinds.append(TransientGlobal(self.global_block_size, self.global_bias))
        if self.global_rule is not None:  # Longformer's global tokens (LED's)
            kinds.append(GlobalTokenKeys())
        attention = self.blocks[layer].self_attn
        if attention.rotary is not None:
            kinds.append(Rope(attention.rotary))
        return (*kinds, *self.named_kinds)

    def layer_kinds(self) -> list[LayerKinds]:
        """Every layer's self-attention kinds: what the whole-sequence masks fold, and what a decode state folds
        for a step's (DecodeState.attend_as: the rules over the step's query columns and the written keys)."""
        return [self.self_kinds(layer) for layer in range(len(self.blocks))]

    def self_inputs(
        self, allowed: torch.Tensor | None, row: torch.Tensor, pos: torch.Tensor, dtype: torch.dtype, flex=None
    ) -> list[AttentionInputs]:
        """Every layer's self-attention inputs over a whole sequence of row positions row (T,), embedded and
        rotated at pos (T,) or (B, T), under `allowed` (bool (B, 1, T, T); None: all): one entry per layer, the
        layers of one kind sharing theirs; a causal layer's mask-free (SDPA's causal path) where it needs none;
        a layer's FlexMask where `flex` (`flex_masks`) makes one."""
        return kinds_inputs(self.layer_kinds(), allowed, row, pos, dtype, flex)

    def takes_flex(self, x: torch.Tensor, kinds: LayerKinds, masked: bool) -> bool:
        """Whether a whole-sequence attention of `kinds` over x (B, T, C), `masked` by its batch (padding,
        packing), attends through FlexAttention (model.attention.implementation: modules.flex_attention's
        `uses_flex`)."""
        drops = self.training and any(block.self_attn.dropout > 0 for block in self.blocks)
        backward = torch.is_grad_enabled() and x.requires_grad
        return uses_flex(self.implementation, x.device, kinds, masked, drops, backward)

    def flex_masks(
        self, x: torch.Tensor, batch: FlexBatch, masked: bool, S: int | None = None, extra=None
    ) -> Callable[[LayerKinds], FlexMask | None]:
        """The FlexMask of a layer of kinds over x (B, T, C) and S keys (T unless given) under `batch`, or None
        where it takes the dense path (`takes_flex`); `extra(kinds)` gives a layer's extra keys (None: none), the
        same rule for every layer that has them."""
        T, block_masks = x.shape[1], {}  # the layers' block masks, one for those of the same rules

        def made(kinds: LayerKinds) -> FlexMask | None:
            if not self.takes_flex(x, kinds, masked):
                return None
            extra_keys = extra(kinds) if extra is not None else None
            return FlexMask(kinds, batch, T, T if S is None else S, extra_keys, block_masks)

        return made

    def embed_tokens(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """ids (B, T) at positions pos (T,) or (B, T) -> (B, T, C): token embeddings plus absolute positions, then
        the embedding norm; with `norm_first` (a decoder's, BlenderbotSmall's) the norm of the token embeddings,
        then the positions."""
        x = self.embed(ids)
        scale = (
            torch.tensor(self.embed_scale, dtype=x.dtype, device=x.device) if self.scale_in_dtype else self.embed_scale
        )
        x = x * scale  # Gemma rounds the scale to the model dtype first
        if self.eoi_embedding is not None:  # that token's own vector, unscaled (T5Gemma 2)
            x = torch.where((ids == self.eoi_id)[..., None], self.eoi_embedding.to(x.dtype), x)
        x = self.embed_norm(x) if self.norm_first else x
        if isinstance(self.positions, PaddedSinusoidalPositions):  # pads take no position (fairseq)
            x = x + self.positions(pos, ids)
        elif self.positions is not None:
            x = x + self.positions(pos)
        return self.dropout(x if self.norm_first else self.embed_norm(x))

    def whole_positions(self, ids: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """The positions a whole unpacked sequence ids (B, T) is embedded at: row (T,), or with fairseq's
        positions each token's count among its row's real tokens (B, T)."""
        if isinstance(self.positions, PaddedSinusoidalPositions):
            return self.positions.count_real(ids)
        return row


def kinds_inputs(
    layers: list[LayerKinds],
    allowed: torch.Tensor | None,
    row: torch.Tensor,
    pos: torch.Tensor,
    dtype: torch.dtype,
    flex: Callable[[LayerKinds], FlexMask | None] | None = None,
) -> list[AttentionInputs]:
    """The self-attention inputs of layers of kinds `layers` over a whole sequence (Stack.self_inputs; the
    decoder-only's stack): one entry per layer, the layers of one kind sharing theirs; a FlexMask where `flex`
    makes one (Stack.flex_masks), else a causal layer's mask-free (SDPA's causal path) where it needs none."""
    made: dict[LayerKinds, AttentionInputs] = {}
    for kinds in layers:
        if kinds in made:
            continue
        flex_mask = flex(kinds) if flex is not None else None
        if flex_mask is not None:
            made[kinds] = AttentionInputs(flex=flex_mask, q_pos=pos, k_pos=pos)
        elif allowed is None and only_causal(kinds):
            made[kinds] = AttentionInputs(is_causal=True, q_pos=pos, k_pos=pos)
        else:
            made[kinds] = AttentionInputs(mask=layer_mask(kinds, allowed, row, row, dtype), q_pos=pos, k_pos=pos)
    return [made[kinds] for kinds in layers]


def rotaries(cfg: ModelConfig) -> tuple[RotaryEmbedding | None, RotaryEmbedding | None]:
    """RoPE of the global layers and of the sliding ones (the global layers' or its own base, Gemma 3's); none
    without RoPE."""
    if cfg.positions.kind != "rope":
        return None, None
    rotary = RotaryEmbedding(cfg.head_dim, cfg.positions.rope_theta, cfg.positions.rope_scale)
    local = (
        RotaryEmbedding(cfg.head_dim, cfg.positions.rope_local_theta)
        if cfg.positions.rope_local_theta is not None
        else rotary
    )
    return rotary, local

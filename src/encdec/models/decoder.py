"""The encoder-decoder's decoder stack: the whole target at once (training, scoring) or a step of a decode state
(generation), causal self-attention and cross-attention to the memory.

Shapes: B batch, T target length, S source length, C model dim, R decode-state rows.
"""

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from encdec.models.components import (
    build_decoder_block,
    build_final_norm,
)
from encdec.models.model_config import ModelConfig
from encdec.models.outputs import EncoderOutput
from encdec.models.stack import Stack
from encdec.modules import (
    AttentionInputs,
    DecodeState,
    Dropout,
    LayerCache,
    Packing,
    RotaryEmbedding,
    additive_mask,
)
from encdec.modules.attention_kinds import Full, LayerKinds, Merged, find
from encdec.modules.blocks import for_layer
from encdec.modules.flex_attention import EVERY_KEY, ExtraKeys, FlexBatch, FlexMask


class Decoder(Stack):
    def __init__(
        self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None, local_rotary=None
    ) -> None:
        super().__init__(cfg, embed, bidirectional=False)
        cross_rotary = None
        if (
            cfg.cross_attention.rope != "none" and rotary is not None
        ):  # cross heads of their own width rotate by their own table
            width = cfg.cross_head_dim
            cross_rotary = rotary if width == rotary.d_head else RotaryEmbedding(width, cfg.positions.rope_theta)
        self.blocks = nn.ModuleList(
            build_decoder_block(
                cfg, local_rotary if self.sliding[i] else rotary, cross_rotary, sparse=cfg.moe_layer(i, decoder=True)
            )
            for i in range(cfg.decoder_layers)
        )
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rope_cross = cfg.cross_attention.rope

    def forward(
        self, tgt_ids: torch.Tensor, memory: EncoderOutput, packing: Packing | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """tgt_ids (B, T) at positions 0..T-1 -> hidden (B, T, C), router logits (the whole target at once, as
        training reads it; decoding steps through `step`).

        A packed batch is at each example's own positions, and its examples attend only to themselves and
        to their own sources."""
        if packing is not None:
            return self._forward_packed(tgt_ids, memory, packing)
        pos = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)  # (T,)
        x = self.embed_tokens(tgt_ids, self.whole_positions(tgt_ids, pos))
        memory_keys = FlexBatch(key_real=memory.mask) if memory.mask is not None else EVERY_KEY
        S = memory.hidden.shape[1]
        flex = self.self_flex(x, EVERY_KEY, False, memory_keys, S)
        cross_flex = self.flex_masks(x, memory_keys, memory.mask is not None, S)((Full(),))
        cross_inputs = replace(self._cross_inputs(pos, memory, x.dtype), flex=cross_flex)
        return self.run_blocks(x, memory.hidden, self.self_inputs(None, pos, pos, x.dtype, flex), cross_inputs)

    def step(self, tgt_ids: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """tgt_ids (R, t), the next t positions of every row of `state` -> hidden (R, t, C) after the final
        norm; the state's caches take the new positions' keys (the state is not moved on: see
        EncoderDecoder.step)."""
        T = tgt_ids.shape[1]
        pos = state.positions(T)  # (t,) or (R, t)
        x = self.embed_tokens(tgt_ids, pos)
        self_inputs = state.self_attentions(T, pos)
        hidden, _ = self.run_blocks(x, None, self_inputs, state.memory_attention(pos), state.decoder_layers())
        return hidden

    def _forward_packed(
        self, tgt_ids: torch.Tensor, memory: EncoderOutput, packing: Packing
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The whole packed target at once: per-segment positions, causal and same-segment masks."""
        pos, k_pos = packing.tgt_positions, packing.src_positions  # (B, T), (B, S)
        x = self.embed_tokens(tgt_ids, pos)
        row = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)  # masks and T5's bias read rows (Stack.self_kinds)
        S = memory.hidden.shape[1]
        own = FlexBatch(q_segments=packing.tgt_segments, k_segments=packing.tgt_segments)  # a target's own example
        memory_keys = FlexBatch(q_segments=packing.tgt_segments, k_segments=packing.src_segments)  # and its source
        flex = self.self_flex(x, own, True, memory_keys, S)
        self_inputs = self.self_inputs(packing.decoder_allowed(), row, pos, x.dtype, flex)
        q_pos = packing.source_lengths() + pos if self.rope_cross == "prepended" else pos  # (B, T)
        cross_mask = additive_mask(packing.cross_allowed(), None, x.dtype)  # (B, 1, T, S)
        cross_flex = self.flex_masks(x, memory_keys, True, S)((Full(),))
        cross_inputs = AttentionInputs(mask=cross_mask, q_pos=q_pos, k_pos=k_pos, flex=cross_flex)
        return self.run_blocks(x, memory.hidden, self_inputs, cross_inputs)

    def run_blocks(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None,
        self_inputs: list[AttentionInputs],
        cross_inputs: AttentionInputs,
        caches: list[LayerCache] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x (B, T, C), memory (B, S, C) (None: every cross-attention cache holds its keys) -> hidden (B, T, C)
        after the final norm, router logits. `self_inputs` holds one entry all layers share or one per layer."""
        router_logits = []
        for i, block in enumerate(self.blocks):
            cache = caches[i] if caches is not None else None
            x, logits = block(x, memory, for_layer(self_inputs, i), cross_inputs, cache)
            if logits is not None:
                router_logits.append(logits)
        return self.dropout(self.final_norm(x)), router_logits

    def self_kinds(self, layer: int) -> LayerKinds:
        """Stack.self_kinds, and a block without a cross-attention reads the memory in its self-attention
        (T5Gemma 2's merged attention)."""
        kinds = super().self_kinds(layer)
        return kinds + (Merged(),) if self.blocks[layer].cross_attn is None else kinds

    def self_flex(
        self, x: torch.Tensor, own: FlexBatch, masked: bool, memory_keys: FlexBatch, S: int
    ) -> Callable[[LayerKinds], FlexMask | None]:
        """Stack.flex_masks of the self-attention under `own` (`masked`: a batch's packing), a merged layer's
        (T5Gemma 2's) with the S memory keys after its own, seen as `memory_keys` allows."""
        plain = self.flex_masks(x, own, masked)
        merged = self.flex_masks(
            x,
            own,
            masked or memory_keys is not EVERY_KEY,
            extra=lambda kinds: ExtraKeys(S, memory_keys.allows, rows=memory_keys.batch),
        )
        return lambda kinds: merged(kinds) if find(kinds, Merged) is not None else plain(kinds)

    def _cross_inputs(self, pos: torch.Tensor, memory: EncoderOutput, dtype: torch.dtype) -> AttentionInputs:
        """Cross-attention of the whole target, positions pos (T,), to the encoder output."""
        S = memory.hidden.shape[1]
        k_pos = torch.arange(S, device=pos.device)
        q_pos = pos
        if self.rope_cross == "prepended":  # decoder positions continue after each example's source
            src_len = memory.mask.sum(-1) if memory.mask is not None else torch.full_like(pos[:1], S)
            q_pos = src_len[:, None] + pos  # (B, T)
        allowed = memory.mask[:, None, None, :] if memory.mask is not None else None  # (B, 1, 1, S)
        return AttentionInputs(mask=additive_mask(allowed, None, dtype), q_pos=q_pos, k_pos=k_pos)

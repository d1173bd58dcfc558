"""The canonical encoder-decoder: Transformer (Vaswani 2017), T5 (v1.0, v1.1), ROT5, and the
Marian and BART layouts of Hugging Face checkpoints.

    src_ids -> embed (+ positions) -> [EncoderBlock] x N_enc -> norm -> memory
    tgt_ids -> embed (+ positions) -> [DecoderBlock(memory)] x N_dec -> norm -> head -> logits

The variants differ only in what the config selects: position scheme (sinusoidal,
learned, T5 relative bias shared by all layers of a stack, RoPE in self- and
cross-attention), norm and its placement, feed-forward or mixture of experts,
grouped-query attention, and the output head (tied, scaled by d_model^-0.5). Marian
adds sinusoidal positions in halves and a fixed logits bias; BART learned positions
at an offset of 2 and a norm after the embeddings. `start` / `step` are the per-step
interface generation drives (encdec.generation.interface). A packed batch
(objective.pack) passes its segments and positions to forward(); one segment mask per
attention kind (encdec.modules.Packing) keeps its examples apart. Attention, feed-forward or MoE,
norms and head come from encdec.models.components, shared with the causal LMs; the
research families' and the RNN's options (UNUSED) are refused.

Shapes: B batch, S source length, T target length, C model dim, V vocabulary.
"""

from dataclasses import dataclass

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.models.components import (
    build_decoder_block,
    build_embedding_norm,
    build_encoder_block,
    build_final_norm,
    build_lm_head,
    embedding_scale,
    output_scale,
)
from encdec.models.config import ModelConfig, refuse_unused
from encdec.models.fixed_step import FixedSteps
from encdec.models.generation_mixin import GenerationMixin
from encdec.models.loss import with_loss
from encdec.models.moe_losses import moe_losses
from encdec.models.outputs import EncoderOutput, Seq2SeqOutput
from encdec.modules import (
    AttentionInputs,
    DecoderCache,
    Dropout,
    LearnedPositions,
    Packing,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositions,
    additive_mask,
    as_bool_mask,
    causal_mask,
    lm_head,
)


def build_absolute_positions(cfg: ModelConfig) -> nn.Module | None:
    if cfg.position == "sinusoidal":
        return SinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.sinusoidal_layout)
    if cfg.position == "learned":
        return LearnedPositions(cfg.max_positions, cfg.d_model, cfg.position_offset)
    return None


def check_lengths(cfg: ModelConfig, src_len: int, max_new_tokens: int) -> None:
    """Raise ConfigError when absolute position tables are too short for the source or the output."""
    if cfg.position not in ("sinusoidal", "learned"):
        return
    if src_len > cfg.max_positions:
        raise ConfigError(f"the input has {src_len} tokens but this model allows at most {cfg.max_positions}")
    if max_new_tokens > cfg.max_positions:
        raise ConfigError(f"max_new_tokens is {max_new_tokens} but this model decodes at most {cfg.max_positions}")


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None):
        super().__init__()
        self.embed = embed
        self.embed_scale = embedding_scale(cfg)
        self.positions = build_absolute_positions(cfg)
        self.embed_norm = build_embedding_norm(cfg)
        self.position_bias = (
            RelativePositionBias(cfg.n_heads, True, cfg.relative_buckets, cfg.relative_max_distance)
            if cfg.position == "relative"
            else None
        )
        self.blocks = nn.ModuleList(build_encoder_block(cfg, rotary) for _ in range(cfg.n_encoder_layers))
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rotary = rotary

    def forward(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """src_ids (B, S), src_mask (B, S) bool -> memory (B, S, C). A packed batch's examples attend
        within themselves, at positions counted from 0 in each."""
        B, S = src_ids.shape
        row = torch.arange(S, device=src_ids.device)
        pos = packing.src_positions if packing is not None else row  # (B, S) or (S,)
        x = self.embed(src_ids) * self.embed_scale
        if self.positions is not None:
            x = x + self.positions(pos)
        x = self.dropout(self.embed_norm(x))
        # T5's bias sees only k - q, the same inside a segment counted from its start or the row's: one for all rows
        bias = self.position_bias(row, row) if self.position_bias is not None else None  # (1, H, S, S)
        if packing is not None:
            allowed = packing.encoder_allowed()  # (B, 1, S, S)
        else:
            allowed = src_mask[:, None, None, :] if src_mask is not None else None  # (B, 1, 1, S)
        inputs = AttentionInputs(mask=additive_mask(allowed, bias, x.dtype), q_pos=pos, k_pos=pos)
        router_logits = []
        for block in self.blocks:
            x, logits = block(x, inputs)
            if logits is not None:
                router_logits.append(logits)
        return EncoderOutput(self.dropout(self.final_norm(x)), src_mask, router_logits)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None):
        super().__init__()
        self.embed = embed
        self.embed_scale = embedding_scale(cfg)
        self.positions = build_absolute_positions(cfg)
        self.embed_norm = build_embedding_norm(cfg)
        self.position_bias = (
            RelativePositionBias(cfg.n_heads, False, cfg.relative_buckets, cfg.relative_max_distance)
            if cfg.position == "relative"
            else None
        )
        cross_rotary = None
        if cfg.rope_cross != "none" and rotary is not None:  # cross heads of their own width rotate by their own table
            width = cfg.cross_head_dim
            cross_rotary = rotary if width == rotary.d_head else RotaryEmbedding(width, cfg.rope_theta)
        self.blocks = nn.ModuleList(build_decoder_block(cfg, rotary, cross_rotary) for _ in range(cfg.decoder_layers))
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rope_cross = cfg.rope_cross

    def forward(
        self,
        tgt_ids: torch.Tensor,
        memory: EncoderOutput,
        cache: DecoderCache | None = None,
        packing: Packing | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """tgt_ids (B, T) at positions offset..offset+T-1 -> hidden (B, T, C), router logits.

        A packed batch (no cache) is at each example's own positions, and its examples attend only
        to themselves and to their own sources."""
        if packing is not None:
            return self._forward_packed(tgt_ids, memory, packing)
        T = tgt_ids.shape[1]
        offset = cache.offset if cache is not None else 0
        pos = torch.arange(offset, offset + T, device=tgt_ids.device)  # (T,)
        x = self.embed_tokens(tgt_ids, pos)
        self_inputs = self._self_inputs(pos, offset, x.dtype)
        cross_inputs = self._cross_inputs(pos, memory, x.dtype)
        return self.run_blocks(x, memory.hidden, self_inputs, cross_inputs, cache)

    def _forward_packed(
        self, tgt_ids: torch.Tensor, memory: EncoderOutput, packing: Packing
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The whole packed target at once: per-segment positions, causal and same-segment masks."""
        pos, k_pos = packing.tgt_positions, packing.src_positions  # (B, T), (B, S)
        x = self.embed_tokens(tgt_ids, pos)
        row = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)  # T5's bias sees only k - q (see Encoder)
        bias = self.position_bias(row, row) if self.position_bias is not None else None  # (1, H, T, T)
        self_inputs = AttentionInputs(
            mask=additive_mask(packing.decoder_allowed(), bias, x.dtype), q_pos=pos, k_pos=pos
        )
        q_pos = packing.source_lengths() + pos if self.rope_cross == "prepended" else pos  # (B, T)
        cross_mask = additive_mask(packing.cross_allowed(), None, x.dtype)  # (B, 1, T, S)
        cross_inputs = AttentionInputs(mask=cross_mask, q_pos=q_pos, k_pos=k_pos)
        return self.run_blocks(x, memory.hidden, self_inputs, cross_inputs, None)

    def embed_tokens(self, tgt_ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tgt_ids (B, T) at positions pos (T,) -> (B, T, C): token embeddings plus absolute positions."""
        x = self.embed(tgt_ids) * self.embed_scale
        if self.positions is not None:
            x = x + self.positions(pos)
        return self.dropout(self.embed_norm(x))

    def run_blocks(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_inputs: AttentionInputs,
        cross_inputs: AttentionInputs,
        cache: DecoderCache | None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x (B, T, C), memory (B, S, C) -> hidden (B, T, C) after the final norm, router logits."""
        router_logits = []
        for i, block in enumerate(self.blocks):
            layer_cache = cache.layers[i] if cache is not None else None
            x, logits = block(x, memory, self_inputs, cross_inputs, layer_cache)
            if logits is not None:
                router_logits.append(logits)
        return self.dropout(self.final_norm(x)), router_logits

    def _self_inputs(self, pos: torch.Tensor, offset: int, dtype: torch.dtype) -> AttentionInputs:
        T = pos.shape[0]
        keys = torch.arange(offset + T, device=pos.device)
        bias = self.position_bias(pos, keys) if self.position_bias is not None else None  # (1, H, T, offset+T)
        if bias is None and offset == 0:
            return AttentionInputs(is_causal=True, q_pos=pos, k_pos=pos)
        allowed = causal_mask(T, offset + T, offset, pos.device) if T > 1 else None
        return AttentionInputs(mask=additive_mask(allowed, bias, dtype), q_pos=pos, k_pos=pos)

    def _cross_inputs(self, pos: torch.Tensor, memory: EncoderOutput, dtype: torch.dtype) -> AttentionInputs:
        S = memory.hidden.shape[1]
        k_pos = torch.arange(S, device=pos.device)
        q_pos = pos
        if self.rope_cross == "prepended":  # decoder positions continue after each example's source
            src_len = memory.mask.sum(-1) if memory.mask is not None else torch.full_like(pos[:1], S)
            q_pos = src_len[:, None] + pos  # (B, T)
        allowed = memory.mask[:, None, None, :] if memory.mask is not None else None  # (B, 1, 1, S)
        return AttentionInputs(mask=additive_mask(allowed, None, dtype), q_pos=q_pos, k_pos=k_pos)


@dataclass
class EncoderDecoderState:
    """What decoding one batch carries between steps (see encdec.generation.interface).

    The encoder output and the cross-attention keys and values are kept once per
    example; the `beams` rows of one example share them, so only the self-attention
    caches, one per row, differ between beams and are reordered.
    """

    memory: EncoderOutput  # hidden (B, S, C), mask (B, S)
    cache: DecoderCache  # self-attention per row (B*N), cross-attention per example (B)
    beams: int  # N rows per example
    cross_mask: torch.Tensor | None  # additive (B, 1, 1, S), fixed for the whole decode
    self_bias: torch.Tensor | None  # T5's relative bias for positions 0..L-1, (1, H, L, L)
    prepended_offset: torch.Tensor | None  # (B*N, 1) source lengths, for rope_cross="prepended"

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (B*N,); each row must stay within its example's N rows."""
        for layer in self.cache.layers:
            layer.self_attn.reorder(index)


class EncoderDecoder(GenerationMixin, nn.Module):
    """encode() once, decode() as often as needed; forward() does both and the loss.

    start() and step() are the same two stages for generation, with the caches,
    masks and cross-attention keys prepared once and beams sharing their example's.
    """

    UNUSED = frozenset({"research", "rnn_cell", "rnn_attention"})  # the research and RNN families' options

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        refuse_unused(cfg, self.UNUSED)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta) if cfg.position == "rope" else None
        self.encoder = Encoder(cfg, self.embed, rotary)
        self.decoder = Decoder(cfg, self.embed, rotary)
        self.lm_head = build_lm_head(cfg)
        self.output_scale = output_scale(cfg)
        if cfg.final_logits_bias:  # fixed, not trained (as in Marian and BART)
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        else:
            self.final_logits_bias = None

    def encode(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """src_ids (B, S), src_mask (B, S) bool, 0/1 integer or float, nonzero at real tokens -> EncoderOutput
        (whose mask is boolean). `packing` describes a packed batch (see forward)."""
        return self.encoder(src_ids, as_bool_mask(src_mask), packing)

    def decode(
        self,
        tgt_ids: torch.Tensor,
        memory: EncoderOutput,
        cache: DecoderCache | None = None,
        packing: Packing | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """tgt_ids (B, T) -> logits (B, T, V) and the decoder's router logits.

        With a cache, tgt_ids are the next T positions after those already cached.
        """
        hidden, router_logits = self.decoder(tgt_ids, memory, cache, packing)
        return self.head(hidden), router_logits

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden * self.output_scale
        logits = lm_head(hidden, self.embed, self.lm_head)
        return logits + self.final_logits_bias if self.final_logits_bias is not None else logits

    def new_cache(self, max_len: int, beams: int = 1) -> DecoderCache:
        """An empty cache for decoding up to `max_len` target positions (it grows if outgrown), `beams` rows
        per example (their cross-attention keys laid out for it)."""
        return DecoderCache(len(self.decoder.blocks), max_len, cross_transposed=beams > 1)

    @torch.no_grad()
    def start(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1
    ) -> EncoderDecoderState:
        """Encode once and prepare decoding of up to `max_new_tokens` positions for `beams` rows per example.

        src_ids (B, S), src_mask (B, S) as encode() takes it. Cross-attention keys and values are computed
        here, once, from the unexpanded encoder output.
        """
        check_lengths(self.config, src_ids.shape[1], max_new_tokens)
        memory = self.encode(src_ids, src_mask)
        B, S, _ = memory.hidden.shape
        k_pos = torch.arange(S, device=src_ids.device)
        cache = self.new_cache(max_new_tokens + 1, beams)
        for block, layer in zip(self.decoder.blocks, cache.layers):
            layer.cross_attn.append(*block.cross_attn.project_kv(memory.hidden, k_pos))
        mask = memory.mask
        cross_mask = additive_mask(mask[:, None, None, :], None, memory.hidden.dtype) if mask is not None else None
        self_bias = None
        if self.decoder.position_bias is not None:
            pos = torch.arange(max_new_tokens + 1, device=src_ids.device)
            self_bias = self.decoder.position_bias(pos, pos)  # (1, H, L, L)
        offset = None
        if self.decoder.rope_cross == "prepended":
            lengths = mask.sum(-1) if mask is not None else torch.full((B,), S, device=src_ids.device)
            offset = lengths.repeat_interleave(beams)[:, None]  # (B*N, 1)
        return EncoderDecoderState(memory, cache, beams, cross_mask, self_bias, offset)

    steps_last_only = True  # step(..., last_only=True): the vocabulary product on the last position only

    @torch.no_grad()
    def step(self, tgt_ids: torch.Tensor, state: EncoderDecoderState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (B*N, t), the next t positions of every row -> logits (B*N, t, V), or (B*N, 1, V) of the
        last position with last_only (a decoder prefix's: the others are never sampled from)."""
        T = tgt_ids.shape[1]
        offset = state.cache.offset
        pos = torch.arange(offset, offset + T, device=tgt_ids.device)  # (t,)
        x = self.decoder.embed_tokens(tgt_ids, pos)
        if T > 1 or (state.self_bias is not None and offset + T > state.self_bias.shape[-1]):
            self_inputs = self.decoder._self_inputs(pos, offset, x.dtype)
        else:  # one new position sees every cached key: no causal mask, the bias is a slice
            bias = state.self_bias[:, :, offset : offset + 1, : offset + 1] if state.self_bias is not None else None
            self_inputs = AttentionInputs(mask=bias, q_pos=pos, k_pos=pos)
        q_pos = pos if state.prepended_offset is None else state.prepended_offset + pos  # (t,) or (B*N, t)
        cross_inputs = AttentionInputs(mask=state.cross_mask, q_pos=q_pos, query_groups=state.beams)
        hidden, _ = self.decoder.run_blocks(x, state.memory.hidden, self_inputs, cross_inputs, state.cache)
        return self.head(hidden[:, -1:] if last_only else hidden)

    def fixed_steps(self, rows: int, examples: int, length: int, source: int, like: torch.Tensor) -> FixedSteps:
        """Buffers for decoding steps whose shapes never change (generate's compile=True): `rows` rows of
        `examples` examples, `length` positions, `source` source positions, in `like`'s dtype and device."""
        return FixedSteps(self, rows, examples, length, source, like)

    def forward(
        self,
        src_ids: torch.Tensor,
        tgt_ids: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        src_segments: torch.Tensor | None = None,
        tgt_segments: torch.Tensor | None = None,
        src_positions: torch.Tensor | None = None,
        tgt_positions: torch.Tensor | None = None,
    ) -> Seq2SeqOutput:
        """src_ids (B, S), tgt_ids (B, T) decoder input ids, src_mask (B, S) as encode() takes it,
        labels (B, T) with -100 ignored. A packed batch (objective.pack) also gives the segments and
        positions of its examples, (B, S) and (B, T) (see encdec.modules.Packing)."""
        packing = packing_of(src_segments, tgt_segments, src_positions, tgt_positions)
        memory = self.encode(src_ids, src_mask, packing)
        logits, decoder_router_logits = self.decode(tgt_ids, memory, packing=packing)
        return with_loss(logits, moe_losses(memory.router_logits, decoder_router_logits), labels, self.config)


def packing_of(src_segments, tgt_segments, src_positions, tgt_positions) -> Packing | None:
    """The Packing of a packed batch's four (B, S) / (B, T) tensors; None when none is given."""
    given = (src_segments, tgt_segments, src_positions, tgt_positions)
    if all(t is None for t in given):
        return None
    if any(t is None for t in given):
        raise DataError("a packed batch needs src_segments, tgt_segments, src_positions and tgt_positions together")
    return Packing(*given)

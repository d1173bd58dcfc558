"""The canonical encoder-decoder: Transformer (Vaswani 2017), T5 (v1.0, v1.1), ROT5, and the
Marian and BART layouts of Hugging Face checkpoints.

    src_ids -> embed (+ positions) -> [EncoderBlock] x N_enc -> norm -> memory
    tgt_ids -> embed (+ positions) -> [DecoderBlock(memory)] x N_dec -> norm -> head -> logits

The variants differ only in what the config selects: position scheme (sinusoidal,
learned, T5 relative bias shared by all layers of a stack or UMT5's one per layer, RoPE in self- and
cross-attention), norm and its placement, feed-forward or mixture of experts (in every
layer or every moe_every-th, Switch's layout), grouped-query attention, and the output
head (tied, scaled by d_model^-0.5). Gemma 2's layout (T5Gemma) adds its RMSNorm before and after each
sublayer, capped attention scores and logits, sliding-window self-attention in most layers and an encoder
token table of its own. LongT5's encoder attends locally, within local_radius, or also to a key per block
of its input (transient-global, modules.transient_global). Marian
adds sinusoidal positions in halves and a fixed logits bias; BART learned positions
at an offset of 2 and a norm after the embeddings. `start` / `step` are the per-step
interface generation drives (encdec.generation.interface), over a `DecodeState`
(encdec.modules.decode_state) that eager generation, compiled steps and the server share. A packed batch
(objective.pack) passes its segments and positions to forward(); one segment mask per
attention kind (encdec.modules.Packing) keeps its examples apart. Attention, feed-forward or MoE,
norms and head come from encdec.models.components, shared with the causal LMs; the
research families' and the RNN's options (UNUSED) are refused.

Shapes: B batch, S source length, T target length, C model dim, V vocabulary.
"""

from functools import partial

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation.interface import Capabilities
from encdec.models.components import (
    build_decoder_block,
    build_embedding_norm,
    build_encoder_block,
    build_final_norm,
    build_lm_head,
    embedding_scale,
    output_scale,
)
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.generation_mixin import GenerationMixin
from encdec.models.loss import with_loss
from encdec.models.model_config import ModelConfig
from encdec.models.moe_losses import moe_losses
from encdec.models.outputs import AttentionLayers, EncoderOutput, Seq2SeqOutput
from encdec.modules import (
    AttentionInputs,
    DecodeState,
    Dropout,
    LayerCache,
    LearnedPositions,
    Packing,
    PaddedSinusoidalPositions,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositions,
    additive_mask,
    as_bool_mask,
    causal_mask,
    lm_head,
    within_window,
)
from encdec.modules.attention import soft_cap
from encdec.modules.blocks import for_layer, windowed
from encdec.modules.chunked_attention import LazyMask, chunk_scores
from encdec.modules.decoding_linear import new_pass
from encdec.modules.masks import same_segment
from encdec.modules.transient_global import transient_globals


def build_absolute_positions(cfg: ModelConfig) -> nn.Module | None:
    if cfg.position == "sinusoidal" and cfg.sinusoidal_layout == "fairseq":
        return PaddedSinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.pad_id)
    if cfg.position == "sinusoidal":
        return SinusoidalPositions(cfg.max_positions, cfg.d_model, cfg.sinusoidal_layout)
    if cfg.position == "learned":
        return LearnedPositions(cfg.max_positions, cfg.d_model, cfg.position_offset)
    return None


def table_rows(cfg: ModelConfig) -> int | None:
    """The rows of the model's absolute position table (sinusoidal or learned), the most positions a stack
    reads; None where positions are relative or rotary (any length)."""
    return cfg.max_positions if cfg.position in ("sinusoidal", "learned") else None


def check_lengths(cfg: ModelConfig, src_len: int, max_new_tokens: int) -> None:
    """Raise ConfigError when absolute position tables are too short for the source or the output."""
    rows = table_rows(cfg)
    if rows is not None and src_len > rows:
        raise ConfigError(f"the input has {src_len} tokens but this model allows at most {rows}")
    if rows is not None and max_new_tokens > rows:
        raise ConfigError(f"max_new_tokens is {max_new_tokens} but this model decodes at most {rows}")


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


class Encoder(Stack):
    def __init__(
        self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None, local_rotary=None
    ) -> None:
        super().__init__(cfg, embed, bidirectional=True)
        self.image_token_id = cfg.image_token_id
        self.local_radius = cfg.local_radius if cfg.encoder_attention != "full" else None
        self.global_block_size = cfg.global_block_size
        self.global_bias = None  # the transient-global keys' relative bias, every layer reads (as T5's own)
        self.long_scores = LONG_SCORES
        if cfg.encoder_attention == "transient_global":
            buckets, distance = cfg.relative_buckets, cfg.relative_max_distance
            self.global_bias = RelativePositionBias(cfg.n_heads, True, buckets, distance)
        self.blocks = nn.ModuleList(
            build_encoder_block(cfg, local_rotary if self.sliding[i] else rotary, sparse=cfg.moe_layer(i))
            for i in range(cfg.n_encoder_layers)
        )
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rotary = rotary

    def forward(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """src_ids (B, S), src_mask (B, S) bool -> memory (B, S, C). A packed batch's examples attend
        within themselves, at positions counted from 0 in each."""
        B, S = src_ids.shape
        if self.image_token_id is not None and bool((src_ids == self.image_token_id).any()):
            raise DataError(
                f"the input holds the image token (id {self.image_token_id}); encdec reads this model's text alone, "
                "without its vision tower"
            )
        row = torch.arange(S, device=src_ids.device)
        pos = packing.src_positions if packing is not None else row  # (B, S) or (S,)
        x = self.embed_tokens(src_ids, pos if packing is not None else self.whole_positions(src_ids, row))
        inputs = self.attention_inputs(SelfMasks(self, src_mask, packing, row, pos, x))
        router_logits = []
        for i, block in enumerate(self.blocks):
            x, logits = block(x, for_layer(inputs, i))
            if logits is not None:
                router_logits.append(logits)
        return EncoderOutput(self.dropout(self.final_norm(x)), src_mask, router_logits)

    def attention_inputs(self, masks: "SelfMasks") -> list[AttentionInputs]:
        """Each layer's self-attention inputs: its mask whole, one tensor for the layers that read the same (T5's
        bias, a window), or a LazyMask that makes the part a chunk of queries reads (modules.chunked_attention),
        memory linear in the input: where the scores of a layer would hold LONG_SCORES or more numbers, and for a
        layer whose keys lie within a band (LongT5's local attention, a sliding window) where the band's keys are
        at most an eighth of them, compute linear in the input too."""
        B, S = masks.x.shape[:2]
        heads = self.blocks[0].self_attn.n_heads
        extra = {}
        G = masks.globals.count if masks.globals is not None else 0
        if masks.globals is not None:
            extra = {"global_blocks": masks.globals.blocks, "n_globals": G}
        made, by_kind = [], {}
        for i in range(len(self.blocks)):
            band = masks.band(i)
            if self.by_chunks(B * heads, S, band, G):
                made.append(LazyMask(partial(masks.rows, i), S, band, G))
                continue
            if masks.kind(i) not in by_kind:
                by_kind[masks.kind(i)] = masks.rows(i, 0, S, 0, S)
            made.append(by_kind[masks.kind(i)])
        return [AttentionInputs(mask=m, q_pos=masks.pos, k_pos=masks.pos, **extra) for m in made]

    def by_chunks(self, heads: int, S: int, band: int | None, G: int) -> bool:
        """Whether a layer attends by chunks of queries: for `heads` (B x H) over S tokens and G global keys, its
        scores would hold long_scores numbers or more, or its keys lie within a band of at most 1 / BAND_SHARE."""
        return heads * S * (S + G) >= self.long_scores or (band is not None and S >= BAND_SHARE * (2 * band + 1))

    def score_numbers(self, batch: int, S: int) -> int:
        """The most numbers of attention scores one layer holds at once for `batch` inputs of S tokens, by the
        path each layer takes (`by_chunks`): the whole scores, or one chunk's; what a generation's fit check
        counts for the encoder."""
        heads = batch * self.blocks[0].self_attn.n_heads if len(self.blocks) else 0
        G = -(-S // self.global_block_size) if self.global_bias is not None else 0
        peaks = [0]
        for i in range(len(self.blocks)):
            band = self.band(i)
            peaks.append(chunk_scores(heads, S, band, G) if self.by_chunks(heads, S, band, G) else heads * S * (S + G))
        return max(peaks)

    def band(self, layer: int) -> int | None:
        """How far from itself a query of layer `layer` may see a key, at most: LongT5's radius, a sliding
        window's width (in rows: a window counts positions inside one packed example); None: anywhere."""
        bands = [self.local_radius] if self.local_radius is not None else []
        if self.window is not None and self.sliding[layer]:
            bands.append(self.window)
        return min(bands) if bands else None


LONG_SCORES = 1 << 27  # numbers in a layer's scores (512 MiB in float32) from which the encoder attends by chunks
BAND_SHARE = 8  # a banded layer attends by chunks of its band where the band holds at most 1 / BAND_SHARE of the keys


class SelfMasks:
    """The encoder's self-attention masks of one batch, by layer and by rows of queries: padding or packing,
    LongT5's local band, T5's relative bias (UMT5's a layer), Gemma's sliding window, LongT5's global keys."""

    def __init__(
        self,
        encoder: "Encoder",
        src_mask: torch.Tensor | None,
        packing: Packing | None,
        row: torch.Tensor,
        pos: torch.Tensor,
        x: torch.Tensor,
    ):
        self.encoder, self.src_mask, self.packing, self.row, self.pos, self.x = encoder, src_mask, packing, row, pos, x
        self.globals = None
        if encoder.global_bias is not None:
            if packing is not None:
                raise ConfigError(
                    "a transient-global encoder cannot read a packed batch: its blocks would span examples"
                )
            B, S = x.shape[:2]
            self.real = src_mask if src_mask is not None else torch.ones(B, S, dtype=torch.bool, device=x.device)
            self.globals = transient_globals(self.real, encoder.global_block_size)

    def kind(self, layer: int) -> tuple:
        """What decides a layer's mask: a window, or which relative bias it reads (layers of one kind share it)."""
        encoder = self.encoder
        if encoder.window is not None and encoder.sliding[layer]:
            return ("window",)
        return ("bias", layer if encoder.layer_biases is not None else 0)

    def band(self, layer: int) -> int | None:
        """The encoder's band for layer `layer`, narrowed by a packed batch's longest source (a token sees only
        its own source's, none farther than that away), so that many sources packed end to end (the server's
        joins) attend by chunks of their band, not with the whole square of the row."""
        bands = [self.encoder.band(layer)]
        if self.packing is not None and self.packing.src_longest is not None:
            bands.append(self.packing.src_longest - 1)
        bands = [band for band in bands if band is not None]
        return min(bands) if bands else None

    def rows(self, layer: int, t0: int, t1: int, k0: int, k1: int) -> torch.Tensor | None:
        """Layer `layer`'s additive mask for query rows t0..t1 over keys k0..k1: (B or 1, H or 1, t1 - t0,
        k1 - k0), with every global key's column after them (B, H, t1 - t0, k1 - k0 + G); None where nothing is
        masked."""
        encoder, q_row, k_row = self.encoder, self.row[t0:t1], self.row[k0:k1]
        if self.packing is not None:  # a token sees its own example's
            segments = self.packing.src_segments
            allowed = same_segment(segments[:, t0:t1], segments[:, k0:k1])  # (B, 1, rows, keys)
        else:
            allowed = self.src_mask[:, None, None, k0:k1] if self.src_mask is not None else None  # (B, 1, 1, keys)
        if encoder.local_radius is not None:  # LongT5: transformers' blocks of local_radius + 1 see these keys
            near = within_window(q_row, k_row, encoder.local_radius, causal=False)
            allowed = near if allowed is None else allowed & near
        if encoder.window is not None and encoder.sliding[layer]:  # no relative bias beside a window
            pos = self.pos
            near = within_window(pos[..., t0:t1], pos[..., k0:k1], encoder.window, encoder.causal, encoder.split_window)
            mask = additive_mask(near if allowed is None else allowed & near, None, self.x.dtype)
        else:  # T5's bias sees only k - q, the same inside a segment counted from its start or the row's
            biases = encoder.relative_biases()
            bias = for_layer(biases, layer)(q_row, k_row) if biases else None  # (1, H, rows, keys)
            mask = additive_mask(allowed, bias, self.x.dtype)
        if self.globals is None:
            return mask
        blocks, keys = self.globals.positions()
        sees = (self.real[:, t0:t1, None] == self.globals.real[:, None, :])[:, None]  # (B, 1, rows, G)
        side = additive_mask(sees, encoder.global_bias(blocks[:, t0:t1], keys), self.x.dtype)  # (B, H, rows, G)
        return torch.cat([mask.expand(*side.shape[:3], mask.shape[-1]), side], dim=-1)


class Decoder(Stack):
    def __init__(
        self, cfg: ModelConfig, embed: nn.Embedding, rotary: RotaryEmbedding | None, local_rotary=None
    ) -> None:
        super().__init__(cfg, embed, bidirectional=False)
        cross_rotary = None
        if cfg.rope_cross != "none" and rotary is not None:  # cross heads of their own width rotate by their own table
            width = cfg.cross_head_dim
            cross_rotary = rotary if width == rotary.d_head else RotaryEmbedding(width, cfg.rope_theta)
        self.blocks = nn.ModuleList(
            build_decoder_block(
                cfg, local_rotary if self.sliding[i] else rotary, cross_rotary, sparse=cfg.moe_layer(i, decoder=True)
            )
            for i in range(cfg.decoder_layers)
        )
        self.final_norm = build_final_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.rope_cross = cfg.rope_cross

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
        return self.run_blocks(
            x, memory.hidden, self._self_inputs(pos, x.dtype), self._cross_inputs(pos, memory, x.dtype)
        )

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
        row = torch.arange(tgt_ids.shape[1], device=tgt_ids.device)  # T5's bias sees only k - q (see Encoder)
        allowed = packing.decoder_allowed()
        self_inputs = [
            AttentionInputs(mask=mask, q_pos=pos, k_pos=pos) for mask in self.bias_masks(allowed, row, x.dtype)
        ]
        self_inputs = self.windowed(self_inputs, allowed, pos, x.dtype)
        q_pos = packing.source_lengths() + pos if self.rope_cross == "prepended" else pos  # (B, T)
        cross_mask = additive_mask(packing.cross_allowed(), None, x.dtype)  # (B, 1, T, S)
        cross_inputs = AttentionInputs(mask=cross_mask, q_pos=q_pos, k_pos=k_pos)
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

    def _self_inputs(self, pos: torch.Tensor, dtype: torch.dtype) -> list[AttentionInputs]:
        """Causal self-attention over the whole target, positions pos (T,): one entry all layers share or one
        per layer (see run_blocks)."""
        allowed = causal_mask(pos.shape[0], pos.shape[0], 0, pos.device)
        if not self.relative_biases():
            return self.windowed([AttentionInputs(is_causal=True, q_pos=pos, k_pos=pos)], allowed, pos, dtype)
        return [AttentionInputs(mask=mask, q_pos=pos, k_pos=pos) for mask in self.bias_masks(allowed, pos, dtype)]

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


def rotaries(cfg: ModelConfig) -> tuple[RotaryEmbedding | None, RotaryEmbedding | None]:
    """RoPE of the global layers and of the sliding ones (the global layers' or its own base, Gemma 3's); none
    without RoPE."""
    if cfg.position != "rope":
        return None, None
    rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.rope_scale)
    local = RotaryEmbedding(cfg.head_dim, cfg.rope_local_theta) if cfg.rope_local_theta is not None else rotary
    return rotary, local


class EncoderDecoder(GenerationMixin, nn.Module):
    """encode() once, decode() as often as needed; forward() does both and the loss.

    start() and step() are the same two stages for generation, over a DecodeState: the caches, masks
    and cross-attention keys prepared once, beams sharing their example's.
    """

    UNUSED = UNUSED_BY_FAMILY["encoder_decoder"]  # the research and RNN families' options

    @staticmethod
    def position_limits(cfg: ModelConfig) -> tuple[int | None, int | None]:
        """(source, target): the most positions each stack reads, its absolute table's rows (None: any)."""
        return table_rows(cfg), table_rows(cfg)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_family(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # the encoder's token table: the decoder's, or one of its own (T5Gemma's), as encoder.embed; an encoder of
        # other widths (encoder_d_model, ...) is built from its own config, with its own RoPE where its heads differ
        encoder_cfg = cfg.encoder_config()
        encoder_embed = self.embed if cfg.shared_embeddings else nn.Embedding(cfg.vocab_size, encoder_cfg.d_model)
        rotary, local_rotary = rotaries(cfg)
        encoder_rotary = (rotary, local_rotary) if encoder_cfg.head_dim == cfg.head_dim else rotaries(encoder_cfg)
        self.encoder = Encoder(encoder_cfg, encoder_embed, *encoder_rotary)
        self.decoder = Decoder(cfg, self.embed, rotary, local_rotary)
        if cfg.eoi_token_id is not None:  # one vector both stacks read for that token (T5Gemma 2's end-of-image)
            self.eoi_embedding = nn.Parameter(torch.zeros(cfg.d_model))
            self.encoder.eoi_embedding = self.decoder.eoi_embedding = self.eoi_embedding
        self.lm_head = build_lm_head(cfg)
        self.output_scale = output_scale(cfg)
        if cfg.final_logits_bias:  # fixed, not trained (as in Marian and BART)
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        else:
            self.final_logits_bias = None

    def attention_scores(self, batch: int, source_len: int) -> int:
        """The most numbers of attention scores encoding `batch` inputs of `source_len` tokens holds at once."""
        return self.encoder.score_numbers(batch, source_len)

    def encode(
        self, src_ids: torch.Tensor, src_mask: torch.Tensor | None = None, packing: Packing | None = None
    ) -> EncoderOutput:
        """src_ids (B, S), src_mask (B, S) bool, 0/1 integer or float, nonzero at real tokens -> EncoderOutput
        (whose mask is boolean). `packing` describes a packed batch (see forward)."""
        new_pass()  # every forward and generate call encodes first: its CPU weight copies are checked once
        return self.encoder(src_ids, as_bool_mask(src_mask), packing)

    def decode(
        self, tgt_ids: torch.Tensor, memory: EncoderOutput, packing: Packing | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """tgt_ids (B, T) -> logits (B, T, V) and the decoder's router logits (the whole target at once)."""
        hidden, router_logits = self.decoder(tgt_ids, memory, packing)
        return self.head(hidden), router_logits

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden * self.output_scale
        logits = lm_head(hidden, self.embed, self.lm_head)
        if self.config.logit_softcap is not None:
            logits = soft_cap(logits, self.config.logit_softcap)
        return logits + self.final_logits_bias if self.final_logits_bias is not None else logits

    @property
    def capabilities(self) -> Capabilities:
        """Steps on the last position alone, rows that join a running batch, attention maps, and sources packed
        end to end in one row (start(..., packed=True)) but where a transient-global encoder's blocks would
        span them."""
        packs = self.encoder.global_bias is None
        return Capabilities(steps_last_only=True, continuous_batching=True, packs_sources=packs, attention_maps=True)

    def attention_layers(self) -> AttentionLayers:
        """The attention modules whose probabilities are the model's maps: each encoder layer's self-attention,
        each decoder layer's cross-attention (a merged attention's one module, T5Gemma 2's)."""
        return AttentionLayers(
            [block.self_attn for block in self.encoder.blocks],
            [block.cross_attn or block.self_attn for block in self.decoder.blocks],
        )

    @torch.no_grad()
    def start(
        self,
        src_ids: torch.Tensor,
        src_mask: torch.Tensor | None,
        max_new_tokens: int,
        beams: int = 1,
        packed: bool = False,
    ) -> DecodeState:
        """Encode once and prepare decoding of up to `max_new_tokens` positions for `beams` rows per example.

        src_ids (B, S), src_mask (B, S) as encode() takes it. Cross-attention keys and values are computed
        here, once, from the unexpanded encoder output: the beams of an example share them. With `packed`,
        the sources' real tokens are encoded end to end in one row (`encode_packed`), no padding computed.
        """
        check_lengths(self.config, src_ids.shape[1], max_new_tokens)
        memory = self.encode_packed(src_ids, src_mask) if packed else self.encode(src_ids, src_mask)
        B, S, _ = memory.hidden.shape
        state = DecodeState(B * beams, max_new_tokens + 1, src_ids.device, memory.hidden.dtype)
        attention = self.decoder.blocks[0].self_attn
        state.new_caches(len(self.decoder.blocks), attention.n_kv_heads, attention.d_head)
        k_pos = torch.arange(S, device=src_ids.device)
        state.set_memory([block.memory_kv(memory.hidden, k_pos) for block in self.decoder.blocks], memory.mask)
        state.biases = self.decoder.relative_biases()  # T5's relative bias, UMT5's per layer, or none
        state.window, state.sliding = self.decoder.window, self.decoder.sliding
        if self.decoder.rope_cross == "prepended":  # decoder positions continue after each example's source
            lengths = memory.mask.sum(-1) if memory.mask is not None else torch.full((B,), S, device=src_ids.device)
            state.source_lengths = lengths.repeat_interleave(beams)  # (B*N,)
        return state

    @torch.no_grad()
    def encode_packed(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, bucket: int = 16) -> EncoderOutput:
        """The encoder output of src_ids (B, S) (real tokens: src_mask, as encode() takes it) computed in one
        packed row: the sources lie end to end, each attending within itself at positions counted from its
        start (the encoder's packed path, as training's objective.pack uses it), so four sources of 14 tokens
        cost 56 token rows, not the 4 x 32 of a padded batch; the row is padded to a multiple of `bucket`
        tokens so that few distinct shapes reach the kernels. Returned in the padded (B, S, C) layout,
        padding positions holding a copy of their row's last real one (masked)."""
        mask = as_bool_mask(src_mask) if src_mask is not None else torch.ones_like(src_ids, dtype=torch.bool)
        device, (B, S) = src_ids.device, src_ids.shape
        lengths = mask.sum(-1)  # (B,)
        total = int(lengths.sum())
        width = -(-total // bucket) * bucket
        ids = torch.full((1, width), self.config.pad_id, dtype=torch.long, device=device)
        ids[0, :total] = src_ids[mask]  # each row's real tokens, in order (left or right padding alike)
        example = torch.repeat_interleave(torch.arange(B, device=device), lengths)  # (total,) each token's row
        starts = torch.cumsum(lengths, 0) - lengths  # (B,)
        positions = torch.zeros(1, width, dtype=torch.long, device=device)
        positions[0, :total] = torch.arange(total, device=device) - starts[example]
        segments = torch.zeros(1, width, dtype=torch.long, device=device)
        segments[0, :total] = example + 1
        nothing = segments.new_zeros(1, 0)
        new_pass()  # a generate call's encoder, as encode's
        packing = Packing(segments, nothing, positions, nothing, src_longest=S)  # no source is longer than S
        packed = self.encoder(ids, None, packing).hidden[0]  # (width, C)
        k = torch.arange(S, device=device)
        at = starts[:, None] + torch.minimum(k[None, :], (lengths[:, None] - 1).clamp(min=0))  # (B, S)
        real = k[None, :] < lengths[:, None]  # (B, S): real tokens first, in the padded layout
        return EncoderOutput(packed[at], real, [])

    @torch.no_grad()
    def step(self, tgt_ids: torch.Tensor, state: DecodeState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (R, t), the next t positions of every row -> logits (R, t, V), or (R, 1, V) of the last
        position with last_only (a decoder prefix's: the others are never sampled from)."""
        T = tgt_ids.shape[1]
        state.ensure(T)
        logits = self.step_logits(tgt_ids, state, last_only)
        state.advance(T)
        return logits

    def step_logits(self, tgt_ids: torch.Tensor, state: DecodeState, last_only: bool = False) -> torch.Tensor:
        """`step` without moving the state on: what a fixed-shape (compiled, CUDA-graphed) step runs, the
        state's position advanced apart (encdec.generation.compiled)."""
        hidden = self.decoder.step(tgt_ids, state)
        return self.head(hidden[:, -1:] if last_only else hidden)

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
        logits, decoder_router_logits = self.decode(tgt_ids, memory, packing)
        return with_loss(logits, moe_losses(memory.router_logits, decoder_router_logits), labels, self.config)


def packing_of(src_segments, tgt_segments, src_positions, tgt_positions) -> Packing | None:
    """The Packing of a packed batch's four (B, S) / (B, T) tensors; None when none is given."""
    given = (src_segments, tgt_segments, src_positions, tgt_positions)
    if all(t is None for t in given):
        return None
    if any(t is None for t in given):
        raise DataError("a packed batch needs src_segments, tgt_segments, src_positions and tgt_positions together")
    return Packing(*given)

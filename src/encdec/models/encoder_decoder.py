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
of its input (transient-global, modules.transient_global); LED's within its window and to chosen global tokens
(local-global, modules.global_tokens). Each layer's self-attention is a tuple of declared
kinds (modules.attention_kinds, Stack.self_kinds) that its masks fold. The stacks are models.encoder and
models.decoder (over models.stack's Stack); this file joins them. Marian
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

import torch
from torch import nn

from encdec.data.bins import first_fit
from encdec.errors import ConfigError, DataError
from encdec.generation.interface import Capabilities
from encdec.models.components import (
    build_lm_head,
    output_scale,
)
from encdec.models.decoder import Decoder
from encdec.models.encoder import Encoder
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.generation_mixin import GenerationMixin
from encdec.models.loss import LinearHead, linear_head, with_loss
from encdec.models.model_config import ModelConfig
from encdec.models.moe_losses import moe_losses
from encdec.models.outputs import AttentionLayers, EncoderOutput, Seq2SeqOutput
from encdec.models.stack import rotaries
from encdec.modules import (
    DecodeState,
    Packing,
    as_bool_mask,
    lm_head,
)
from encdec.modules.attention import soft_cap
from encdec.modules.decoding_linear import new_pass


def table_rows(cfg: ModelConfig) -> int | None:
    """The rows of the model's absolute position table (sinusoidal or learned), the most positions a stack
    reads; None where positions are relative or rotary (any length)."""
    return cfg.positions.max if cfg.positions.kind in ("sinusoidal", "learned") else None


def check_lengths(cfg: ModelConfig, src_len: int, max_new_tokens: int) -> None:
    """Raise ConfigError when absolute position tables are too short for the source (the encoder's own table,
    model.encoder.max_positions, where it has one) or the output."""
    source, rows = table_rows(cfg.encoder_config()), table_rows(cfg)
    if source is not None and src_len > source:
        raise ConfigError(f"the input has {src_len} tokens but this model allows at most {source}")
    if rows is not None and max_new_tokens > rows:
        raise ConfigError(f"max_new_tokens is {max_new_tokens} but this model decodes at most {rows}")


class EncoderDecoder(GenerationMixin, nn.Module):
    """encode() once, decode() as often as needed; forward() does both and the loss.

    start() and step() are the same two stages for generation, over a DecodeState: the caches, masks
    and cross-attention keys prepared once, beams sharing their example's.
    """

    UNUSED = UNUSED_BY_FAMILY["encoder_decoder"]  # the research and RNN families' options

    @staticmethod
    def position_limits(cfg: ModelConfig) -> tuple[int | None, int | None]:
        """(source, target): the most positions each stack reads, its absolute table's rows (None: any)."""
        return table_rows(cfg.encoder_config()), table_rows(cfg)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_family(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        rotary, local_rotary = rotaries(cfg)
        self.encoder = self.build_encoder(cfg, rotary, local_rotary)
        self.decoder = Decoder(cfg, self.embed, rotary, local_rotary)
        if (
            cfg.image_tokens.eoi_token_id is not None
        ):  # one vector both stacks read for that token (T5Gemma 2's end-of-image)
            self.eoi_embedding = nn.Parameter(torch.zeros(cfg.d_model))
            self.encoder.eoi_embedding = self.decoder.eoi_embedding = self.eoi_embedding
        self.lm_head = build_lm_head(cfg)
        self.output_scale = output_scale(cfg)
        if cfg.output.logits_bias:  # fixed, not trained (as in Marian and BART)
            self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        else:
            self.final_logits_bias = None

    def build_encoder(self, cfg: ModelConfig, rotary, local_rotary) -> Encoder:
        """The encoder over a token table: the decoder's, or one of its own (T5Gemma's; FSMT's of its own
        vocabulary, encoder.vocab_size), as encoder.embed; an encoder of other widths (encoder.d_model, ...) is
        built from its own config, with its own RoPE where its heads differ (models.whisper's reads features)."""
        encoder_cfg = cfg.encoder_config()
        encoder_embed = self.embed
        if not cfg.embeddings.shared:
            encoder_embed = nn.Embedding(cfg.source_vocab_size, encoder_cfg.d_model)
        encoder_rotary = (rotary, local_rotary) if encoder_cfg.head_dim == cfg.head_dim else rotaries(encoder_cfg)
        return Encoder(encoder_cfg, encoder_embed, *encoder_rotary)

    def check_lengths(self, src_ids: torch.Tensor, max_new_tokens: int) -> None:
        """ConfigError where the source or the output reaches past the position tables (check_lengths)."""
        check_lengths(self.config, src_ids.shape[1], max_new_tokens)

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

    def linear_head(self) -> LinearHead | None:
        """The head as one product where it is one (models.loss.linear_head): chunked_loss's faster path."""
        return linear_head(
            self.embed, self.lm_head, self.output_scale, self.config.output.softcap, self.final_logits_bias
        )

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden * self.output_scale
        logits = lm_head(hidden, self.embed, self.lm_head)
        if self.config.output.softcap is not None:
            logits = soft_cap(logits, self.config.output.softcap)
        return logits + self.final_logits_bias if self.final_logits_bias is not None else logits

    @property
    def capabilities(self) -> Capabilities:
        """Steps on the last position alone, rows that join a running batch, attention maps, speculative decoding
        (begin, DecodeState.truncate), and sources packed end to end in rows (start(..., packed=True)) but
        where a transient-global encoder's blocks would span them or an encoder's global tokens would be the row's."""
        packs = self.encoder.global_bias is None and self.encoder.global_rule is None
        return Capabilities(
            steps_last_only=True, continuous_batching=True, packs_sources=packs, attention_maps=True, speculates=True
        )

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
        the sources' real tokens are encoded end to end in packed rows (`encode_packed`), no padding computed.
        """
        self.check_lengths(src_ids, max_new_tokens)
        memory = self.encode_packed(src_ids, src_mask) if packed else self.encode(src_ids, src_mask)
        return self.begin(memory, max_new_tokens, beams)

    @torch.no_grad()
    def begin(self, memory: EncoderOutput, max_new_tokens: int, beams: int = 1) -> DecodeState:
        """`start` from an encoder output (B, S, C) already computed: this model's, or another's of the same
        width whose output this decoder reads (a speculative draft over its target's encoder, generation's
        speculative.py). Its cross-attention keys and values are this decoder's own, made here."""
        B, S, _ = memory.hidden.shape
        device = memory.hidden.device
        state = DecodeState(B * beams, max_new_tokens + 1, device, memory.hidden.dtype)
        attention = self.decoder.blocks[0].self_attn
        state.new_caches(len(self.decoder.blocks), attention.n_kv_heads, attention.d_head)
        k_pos = torch.arange(S, device=device)
        state.set_memory([block.memory_kv(memory.hidden, k_pos) for block in self.decoder.blocks], memory.mask)
        state.attend_as(self.decoder.layer_kinds())  # the step masks' rules and biases
        if self.decoder.rope_cross == "prepended":  # decoder positions continue after each example's source
            lengths = memory.mask.sum(-1) if memory.mask is not None else torch.full((B,), S, device=device)
            state.source_lengths = lengths.repeat_interleave(beams)  # (B*N,)
        return state

    @torch.no_grad()
    def encode_packed(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, bucket: int = 16) -> EncoderOutput:
        """The encoder output of src_ids (B, S) (real tokens: src_mask, as encode() takes it) computed over packed
        rows: the sources lie end to end in rows as wide as the longest (rounded up to `bucket` tokens, so that
        few distinct shapes reach the kernels), placed by first fit decreasing (data.bins), each attending
        within itself at positions counted from its start (the encoder's packed path, as training's
        objective.pack uses it). Four sources of 14 tokens cost one row of 64 token rows, not the 4 x 32 of a
        padded batch, and a row's scores are at most a padded source's (one row of the whole join held the
        square of all its tokens: a join of 18 sentences of 20 tokens took 5.3 against 3.7 ms padded, at d_model
        64). Returned in the padded (B, S, C) layout, padding positions holding a copy of their row's last real
        one (masked)."""
        mask = as_bool_mask(src_mask) if src_mask is not None else torch.ones_like(src_ids, dtype=torch.bool)
        device, (B, S) = src_ids.device, src_ids.shape
        lengths = mask.sum(-1)  # (B,)
        sizes = lengths.tolist()  # the host places the sources (one wait, before the encoder pass)
        width = max(1, -(-max(sizes, default=1) // bucket)) * bucket
        place = [0] * B  # each source's first token in the rows laid end to end
        rows = first_fit([(n,) for n in sizes], (width,))
        for r, members in enumerate(rows):
            at = r * width
            for b in members:
                place[b], at = at, at + sizes[b]
        first = torch.tensor(place, device=device)  # (B,)
        example = torch.repeat_interleave(torch.arange(B, device=device), lengths)  # (total,) each token's source
        within = torch.arange(example.shape[0], device=device) - (torch.cumsum(lengths, 0) - lengths)[example]
        to = first[example] + within  # (total,) each real token's place in the rows
        cells = len(rows) * width
        ids = torch.full((cells,), self.config.pad_id, dtype=torch.long, device=device)
        ids[to] = src_ids[mask]  # each source's real tokens, in order (left or right padding alike)
        positions, segments = torch.zeros(cells, dtype=torch.long, device=device), ids.new_zeros(cells)
        positions[to], segments[to] = within, example + 1
        nothing = segments.new_zeros(len(rows), 0)
        new_pass()  # a generate call's encoder, as encode's
        packing = Packing(segments.view(-1, width), nothing, positions.view(-1, width), nothing, src_longest=width)
        packed = self.encoder(ids.view(-1, width), None, packing).hidden.flatten(0, 1)  # (rows x width, C)
        k = torch.arange(S, device=device)
        at = first[:, None] + torch.minimum(k[None, :], (lengths[:, None] - 1).clamp(min=0))  # (B, S)
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
        hidden, losses = self.features(src_ids, tgt_ids, src_mask, packing)
        return with_loss(self.head(hidden), losses, labels, self.config)

    def features(
        self, src_ids: torch.Tensor, tgt_ids: torch.Tensor, src_mask: torch.Tensor | None, packing: Packing | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """forward's decoder hidden states (B, T, C), before the head, and its auxiliary terms: what a loss
        over a wide vocabulary takes to make the logits a block of rows at a time (models.loss.chunked_loss)."""
        memory = self.encode(src_ids, src_mask, packing)
        hidden, decoder_router_logits = self.decoder(tgt_ids, memory, packing)
        balance = self.config.experts.balance_args(memory.mask)
        rows = memory.mask.any(dim=1) if memory.mask is not None else None  # a row of padding alone: no MoE term
        return hidden, moe_losses(memory.router_logits, decoder_router_logits, *balance, rows=rows)


def packing_of(src_segments, tgt_segments, src_positions, tgt_positions) -> Packing | None:
    """The Packing of a packed batch's four (B, S) / (B, T) tensors; None when none is given."""
    given = (src_segments, tgt_segments, src_positions, tgt_positions)
    if all(t is None for t in given):
        return None
    if any(t is None for t in given):
        raise DataError("a packed batch needs src_segments, tgt_segments, src_positions and tgt_positions together")
    return Packing(*given)

"""What the three causal-LM families share: nanoGPT-style parts and prompt-then-step decoding.

`decoder_only`, `ar_encdec` and `parallel_encdec` are language models over one
token stream: in training `tgt_ids` is the window x and `labels` its next tokens
(src_ids is None and ignored). Every part of them is causal, so decoding with
caches computes exactly what the full forward computes at each position.

Generation (encdec.generation.interface) runs over a `DecodeState` (encdec.modules.decode_state),
as the encoder-decoder's does, so the server batches these families too: `start(src_ids, ...)`
runs all but the last token of the prompt src_ids through the model once, filling every cache,
and keeps that last token as each row's `next_input`. `encdec.generate` then feeds the decoder-
start token: `step` decodes the prompt's last token in place of that first placeholder, so its
logits are the prompt's last position's and row r of generate's output is [decoder_start_id,
continuation of prompt r ...]; drop the first column. With `src_ids=None`, `start` prefills
nothing and every token given to `step` is real (LM use with a BOS prompt in tgt_ids). The
context is max_positions: prompt plus generated tokens must fit in it. A sliding window (decoder_only's
alone, Gemma 2's and Gemma 3's) keeps every key in the cache and masks those sliding_window or more
columns behind the query (DecodeState's window, as the encoder-decoder's decoder steps), so a cached step
still equals the full forward; a cache that dropped old keys would not.

Prompts of different lengths come padded on the left, as Hugging Face's decoder-only
`generate` takes them: each row counts positions from its first real token, and its
padded keys stay masked, in self- and cross-attention, at every later step, so a row
of a batch gets the tokens it would get alone.

Their parts come from encdec.models.components, so they honour what the encoder-decoder
does: n_kv_heads (GQA, MQA), d_head, scale_attention, norm, norm_eps, norm_position,
experts (whose aux and z losses join the loss), embeddings (scale, norm, tie),
output.scale, bias, dropout, output.softcap (decoder_only's). A family refuses, in one
sentence, any setting it has no use for (family_rules.UNUSED_BY_FAMILY: LM_UNUSED plus its own).

Positions are learned (nanoGPT: a table added to the token embeddings) or rope (Su et al.
2021: queries and keys of every self-attention rotated by their stream positions, and of
cross-attention too unless cross_attention.rope is none; the input holds token embeddings alone).
Encoder and decoder read the same positions, so cross-attention's RoPE is cross_attention.rope
relative; prepended (decoder positions after the source's) has no meaning here and is
refused. With rope, a research model that adds or subtracts the positions 1..T
(add_pos_embed_to_decoder, sub_pos_embed) keeps a learned table of max_positions + 1 rows
for that alone. Keys are cached rotated, so a cached step equals the full forward.

Shapes: B batch, R rows (B * beams), T new positions, C model dim, V vocabulary.
"""

import abc
from dataclasses import dataclass

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation.interface import Capabilities
from encdec.models import components as parts
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.generation_mixin import GenerationMixin
from encdec.models.loss import with_loss
from encdec.models.model_config import ModelConfig
from encdec.models.moe_losses import moe_losses
from encdec.models.outputs import Seq2SeqOutput
from encdec.models.research_losses import build_embedding_loss
from encdec.modules import (
    AttentionInputs,
    DecoderBlock,
    DecodeState,
    Dropout,
    EncoderBlock,
    LearnedPositions,
    RotaryEmbedding,
    as_bool_mask,
    lm_head,
)
from encdec.modules.attention import soft_cap
from encdec.modules.decoding_linear import new_pass


def build_causal_block(cfg: ModelConfig, rotary: RotaryEmbedding | None = None) -> EncoderBlock:
    """A GPT block, x += attn(ln1(x)); x += mlp(ln2(x)) (post-norm: a norm after each addition), causal
    through its inputs. The MLP's only dropout is the block's residual one, as in nanoGPT."""
    return parts.build_encoder_block(cfg, rotary, ffn_dropout=0.0)


def build_rotaries(cfg: ModelConfig, cross: bool = True) -> tuple[RotaryEmbedding | None, RotaryEmbedding | None]:
    """With position rope, the rotation of self-attention's heads and of cross-attention's (None without
    `cross` or with cross_attention.rope none; the same module when both are as wide); (None, None) with learned
    positions. Self-attention's positions are scaled by rope_scale (linear RoPE scaling, Gemma 3's global layers).
    ModelConfig has checked both widths are even."""
    if cfg.positions.kind != "rope":
        return None, None
    rotary = RotaryEmbedding(
        cfg.head_dim, cfg.positions.rope_theta, cfg.positions.rope_scale
    )  # rope_scale: decoder_only's alone
    if not cross or cfg.cross_attention.rope == "none":
        return rotary, None
    width = cfg.cross_head_dim
    return rotary, rotary if width == cfg.head_dim else RotaryEmbedding(width, cfg.positions.rope_theta)


def build_cross_block(
    cfg: ModelConfig, rotary: RotaryEmbedding | None = None, cross_rotary: RotaryEmbedding | None = None
) -> DecoderBlock:
    """Self-attention, causal cross-attention (cross_attention.n_heads, default 2 x n_heads) with its own
    norm of the memory, and MLP; research.order_type ALT puts cross-attention first."""
    return parts.build_decoder_block(  # family_rules.check_cross_heads has checked the heads split d_model
        cfg,
        rotary,
        cross_rotary,
        cross_heads=cfg.cross_heads,
        ffn_dropout=0.0,
        cross_first=cfg.research.order_type == "ALT",
        memory_norm=True,
    )


def left_padding(mask: torch.Tensor) -> torch.Tensor | None:
    """mask (B, S) bool -> each row's leading padded columns (B,), or None when no row is padded.

    Refuses padding anywhere but before a row's first real token; the check is one host sync.
    """
    left_only = (mask[:, 1:] >= mask[:, :-1]).all() & mask[:, -1].all()  # zeros, then ones, in every row
    padded = ~mask.all()
    left_only, padded = torch.stack((left_only, padded)).tolist()
    if not left_only:
        raise DataError(
            "prompts of different lengths must be padded on the left (mask zeros only before "
            "each row's first real token), not on the right or inside"
        )
    return (~mask).sum(-1) if padded else None


@dataclass
class StreamColumns:
    """T new columns of the token stream, embedded: what every causal stack starts from."""

    positions: torch.Tensor  # (T,), or (R, T) counted from each row's first real token
    embeddings: torch.Tensor  # E (B, T, C)
    attention: AttentionInputs  # causal over every column so far, a left-padded row's pad keys masked


@dataclass
class StackOutput:
    """One run of the model over positions offset..offset+T-1."""

    hidden: torch.Tensor  # (B, T, C) before the head
    embeddings: torch.Tensor  # E (B, T, C)
    encoder_out: torch.Tensor  # (B, T, C)
    encoder_router_logits: list[torch.Tensor]  # one (N, E) per MoE layer
    decoder_router_logits: list[torch.Tensor]


class PromptedLM(GenerationMixin, abc.ABC):
    """Input embeddings, output head and start/step of a causal LM; the class calls `build_embeddings`
    and implements `new_caches(state)` and `advance(ids, state)`."""

    config: ModelConfig
    capabilities = Capabilities(steps_last_only=True, continuous_batching=True, pads_left=True)

    @staticmethod
    def position_limits(cfg: ModelConfig) -> tuple[int | None, int | None]:
        """(source, target): no source; a stream of at most the context, max_positions (check_positions)."""
        return None, cfg.positions.max

    def build_embeddings(self, cfg: ModelConfig, next_positions: bool = False, scale_in_dtype: bool = False) -> None:
        """Token table, dropout, embedding norm, scales, and the learned position table: max_positions rows,
        one more when `next_positions` (1..T) are looked up; with position rope, only for those, else None.
        With `scale_in_dtype` the embedding scale is rounded to the model's dtype first, as Gemma's is."""
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.scale_in_dtype = scale_in_dtype
        rows = cfg.positions.max + int(next_positions)
        self.positions = (
            LearnedPositions(rows, cfg.d_model) if cfg.positions.kind == "learned" or next_positions else None
        )
        self.dropout = Dropout(cfg.dropout)
        self.embed_norm = parts.build_embedding_norm(cfg)
        self.embed_scale, self.output_scale = parts.embedding_scale(cfg), parts.output_scale(cfg)

    def embed_tokens(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """ids (B, T) at positions pos (T,) or (B, T) -> E (B, T, C) = dropout(norm?(token * scale + position)),
        without the position under RoPE (it rotates queries and keys instead)."""
        x = self.embed(ids)
        scale = self.embed_scale
        if self.scale_in_dtype:
            scale = torch.tensor(scale, dtype=x.dtype, device=x.device)
        x = x * scale
        if self.config.positions.kind == "learned":
            x = x + self.positions(pos)
        return self.dropout(self.embed_norm(x))

    def embed_columns(self, ids: torch.Tensor, state: DecodeState | None = None) -> StreamColumns:
        """ids (B, T), the whole window (no state) or each row's next T columns of `state` -> their positions,
        embeddings and causal attention inputs; left-padded rows count positions from their first real token."""
        T = ids.shape[1]
        if state is None:
            self.check_positions(T)
            pos = torch.arange(T, device=ids.device)  # (T,)
            return StreamColumns(
                pos, self.embed_tokens(ids, pos), AttentionInputs(is_causal=True, q_pos=pos, k_pos=pos)
            )
        self.check_positions(state.columns + T)
        pos = state.positions(T)  # (T,) or (R, T)
        return StreamColumns(pos, self.embed_tokens(ids, pos), state.self_attention(T, pos))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) -> logits (B, T, V), through the tied head unless lm_head is set, capped at
        output.softcap where it is set (Gemma's final_logit_softcapping)."""
        logits = lm_head(hidden * self.output_scale, self.embed, self.lm_head)
        cap = self.config.output.softcap
        return logits if cap is None else soft_cap(logits, cap)

    def forward(
        self,
        src_ids: torch.Tensor | None,
        tgt_ids: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqOutput:
        """tgt_ids (B, T) the window, labels (B, T) its next tokens; src_ids and src_mask are ignored. The
        loss weighs what `window` gives beside the cross-entropy (encdec.models.loss)."""
        new_pass()  # its CPU weight copies are checked once a call (modules/decoding_linear.py)
        logits, aux = self.window(tgt_ids)
        return with_loss(logits, aux, labels, self.config)

    @abc.abstractmethod
    def window(self, tgt_ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """tgt_ids (B, T), a whole window -> logits (B, T, V) and the auxiliary loss terms, unweighted."""

    @abc.abstractmethod
    def new_caches(self, state: DecodeState) -> None:
        """The step caches of every attention layer, in the order `advance` reads them."""

    @abc.abstractmethod
    def advance(self, ids: torch.Tensor, state: DecodeState, last_only: bool = False) -> torch.Tensor | None:
        """ids (R, T), each row's next T columns of `state` -> logits (R, T, V), caches written (the state is
        not moved on); with last_only, those of the last position alone (R, 1, V); with last_only None, no
        logits (a prefill's)."""

    def check_positions(self, length: int) -> None:
        if length > self.config.positions.max:
            raise ConfigError(
                f"the sequence reaches {length} tokens but this model's context is "
                f"{self.config.positions.max} (model.positions.max)"
            )

    @torch.no_grad()
    def start(
        self, src_ids: torch.Tensor | None, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1
    ) -> DecodeState:
        """Prefill the prompt src_ids (B, S) for B * beams rows; None starts from nothing.

        src_mask (B, S) bool, 0/1 integer or float, nonzero at real tokens: prompts of different lengths
        are padded on the left (checked here, one host sync). All but the prompt's last token run once per
        example, with no vocabulary product; the caches are then copied to the example's beams (as
        CTranslate2 expands the batch only after the first step), not computed `beams` times; the last token
        is each row's first step (`DecodeState.next_input`).
        """
        new_pass()  # a generate call: its CPU weight copies are checked once (modules/decoding_linear.py)
        prompt_len = 0 if src_ids is None else src_ids.shape[1]
        self.check_positions(prompt_len + max(max_new_tokens - 1, 0))
        dtype, device = self.embed.weight.dtype, self.embed.weight.device
        B = 0 if src_ids is None else src_ids.shape[0]  # without a prompt: sized by the first step
        state = DecodeState(B, prompt_len + max_new_tokens + 1, device if src_ids is None else src_ids.device, dtype)
        self.new_caches(state)
        if src_ids is None:
            return state
        src_mask = as_bool_mask(src_mask)
        state.pad = left_padding(src_mask) if src_mask is not None else None  # (B,)
        if prompt_len > 1:
            self.advance(src_ids[:, :-1], state, last_only=None)
            state.advance(prompt_len - 1)
        state.next_input = src_ids[:, -1]  # (B,)
        state.substitute = torch.ones(B, dtype=torch.bool, device=src_ids.device)
        if beams > 1:
            state.repeat(beams)
        return state

    @torch.no_grad()
    def step(self, tgt_ids: torch.Tensor, state: DecodeState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (R, t) -> logits (R, t, V), or (R, 1, V) of the last position with last_only. After a
        prompt, the first token given is generate's decoder-start placeholder: the prompt's last token is
        decoded in its place, so its logits are those of the prompt's last position."""
        if state.rows == 0:  # started without a prompt
            state.resize_rows(tgt_ids.shape[0])
        tgt_ids = state.first_inputs(tgt_ids)
        T = tgt_ids.shape[1]
        state.ensure(T)
        logits = self.advance(tgt_ids, state, last_only)
        state.advance(T)
        return logits


class ResearchLM(PromptedLM):
    """What the auto-regressive and parallel encoder-decoders share around their own `run`: the
    decoder's input and the output norms (both built and applied here), next-token positions, the
    loss with its extra (embedding or encoder) term, and decoding.

    A subclass sets `extra_loss_name` to the attribute holding its loss module (or None).
    """

    extra_loss_name = "embedding_loss"
    UNUSED = UNUSED_BY_FAMILY["ar_encdec"]  # and parallel_encdec's, the same

    def build_input(self, cfg: ModelConfig) -> None:
        """What both families build first: the config's checks, the embeddings (a position table one row
        longer when positions 1..T are added or subtracted), the decoder's input layers."""
        check_family(cfg)
        self.config = cfg
        self.build_embeddings(cfg, next_positions=cfg.research.extra_position)

    def build_output(self, cfg: ModelConfig) -> None:
        """What both families build last: the output norms, the extra loss (under extra_loss_name), the head."""
        self.build_output_norms(cfg)
        setattr(self, self.extra_loss_name, build_embedding_loss(cfg))
        self.lm_head = parts.build_lm_head(cfg)

    @abc.abstractmethod
    def run(self, ids: torch.Tensor, state: DecodeState | None = None) -> StackOutput:
        """ids (B, T), the whole window or each row's next T columns of `state` -> StackOutput; the state's
        caches take the new columns' keys."""

    def build_decoder_input(self, cfg: ModelConfig) -> None:
        """The Linear(C, C) that makes the decoder's input, with a LayerNorm before it if add_ln_before_decoder_ff."""
        self.decoder_in_norm = parts.norm_factory(cfg)() if cfg.research.add_ln_before_decoder_ff else None
        self.decoder_in = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def build_output_norms(self, cfg: ModelConfig) -> None:
        """The final norm, and the LayerNorm after subtracting positions if sub_pos_embed is YES_LN."""
        self.final_norm = parts.build_final_norm(cfg)
        self.post_sub_norm = parts.norm_factory(cfg)() if cfg.research.sub_pos_embed == "YES_LN" else None

    def next_positions(self, pos: torch.Tensor) -> torch.Tensor:
        """The position embeddings of the tokens after those at `pos` (T,) or (R, T): (T, C) or (R, T, C)."""
        return self.positions(pos + 1)

    def decoder_input(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> the decoder's input (B, T, C): Linear(LN?(x)), plus positions 1..T if
        add_pos_embed_to_decoder."""
        d = self.decoder_in(self.decoder_in_norm(x) if self.decoder_in_norm is not None else x)
        if self.config.research.add_pos_embed_to_decoder:
            d = d + self.next_positions(pos)
        return d

    def output_hidden(self, d: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The decoder's output d (B, T, C) -> the hidden states before the head: LN(d), less positions
        1..T unless sub_pos_embed is NO, then LN again if YES_LN."""
        out = self.final_norm(d)
        if self.config.research.sub_pos_embed != "NO":
            out = out - self.next_positions(pos)
            if self.post_sub_norm is not None:
                out = self.post_sub_norm(out)
        return out

    def window(self, tgt_ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """In training the terms hold the extra one under extra_loss_name, beside any experts' terms;
        encdec.models.loss weighs them (loss = CE + coeff * extra + the MoE terms)."""
        run = self.run(tgt_ids)
        extra_loss = getattr(self, self.extra_loss_name)
        aux = {}
        if self.training and extra_loss is not None:
            aux[self.extra_loss_name] = extra_loss(run.embeddings, run.encoder_out)
        aux.update(moe_losses(run.encoder_router_logits, run.decoder_router_logits))
        return self.logits(run.hidden), aux

    def advance(self, ids: torch.Tensor, state: DecodeState, last_only: bool | None = False) -> torch.Tensor | None:
        run = self.run(ids, state)
        if last_only is None:
            return None
        return self.logits(run.hidden[:, -1:] if last_only else run.hidden)

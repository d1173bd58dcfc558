"""The decoder-only baseline of seeds 000 and 001 (SEEDS.md section 5): nanoGPT's GPT.

    x -> token + learned position -> dropout -> [causal block] x n_encoder_layers -> LayerNorm -> tied head

With position rope there is no position table: every self-attention rotates its queries and
keys by their positions (causal_lm) and the input is the token embedding alone.

The depth is n_encoder_layers (the seeds' n_layer; n_decoder_layers is refused: there is
one stack); the MLP is C -> d_ff -> C with exact GELU; no biases with bias false. The
settings the causal LMs share (GQA, experts, norm position, ...) are honoured as
encdec.models.causal_lm_shared lists; with experts the loss adds their aux and z terms under
moe_aux_decoder and moe_z_decoder. Generation prefills the prompt (see causal_lm).

With position rope, norm rmsnorm and activation swiglu it is Llama's layout, which Hugging Face's Llama, Qwen2
and Qwen3 checkpoints load into (encdec.interop.llama); this family alone also takes Qwen2's biases on q, k
and v (attention_bias) and Qwen3's norms of each head's queries and keys (qk_norm). With Gemma's RMSNorm before
and after each sublayer it is Gemma 2's and Gemma 3's (encdec.interop.gemma): a sliding window in every layer
but each global_every-th, whose RoPE may have a base of its own (rope_local_theta) beside the global layers'
scaled one (rope_scale), capped logits (output.softcap), the embedding scale rounded to the model's dtype. The
window masks keys, in the full forward and in a step alike (the decode state keeps every key), so cached
decoding equals the full forward.

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models.causal_lm_shared import PromptedLM, StreamColumns, build_causal_block, build_rotaries
from encdec.models.components import build_final_norm, build_lm_head
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.loss import LinearHead, linear_head
from encdec.models.model_config import ModelConfig
from encdec.models.moe_losses import moe_losses
from encdec.models.stack import kinds_inputs
from encdec.modules import AttentionInputs, DecodeState, RotaryEmbedding
from encdec.modules.attention_kinds import Band, Causal, LayerKinds, Rope
from encdec.modules.blocks import for_layer


class DecoderOnly(PromptedLM, nn.Module):
    UNUSED = UNUSED_BY_FAMILY["decoder_only"]  # one stack: no decoder depth, cross-attention or research options

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_family(cfg)
        self.config = cfg
        self.build_embeddings(cfg, scale_in_dtype=cfg.norms.kind == "gemma_rmsnorm")  # Gemma rounds sqrt(d_model)
        self.sliding_window = (
            cfg.attention.sliding_window
        )  # Gemma's sliding self-attention, in the layers `sliding` names
        self.sliding = [cfg.sliding_layer(i) for i in range(cfg.n_encoder_layers)]
        rotary, _ = build_rotaries(cfg, cross=False)
        local_rotary = rotary  # the sliding layers' RoPE: the global layers' or its own base (Gemma 3's)
        if cfg.positions.rope_local_theta is not None:
            local_rotary = RotaryEmbedding(cfg.head_dim, cfg.positions.rope_local_theta)
        self.blocks = nn.ModuleList(
            build_causal_block(cfg, local_rotary if slides else rotary) for slides in self.sliding
        )
        self.final_norm = build_final_norm(cfg)
        self.lm_head = build_lm_head(cfg)

    def hidden(self, ids: torch.Tensor, state: DecodeState | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids (B, T), the whole window or each row's next T columns of `state` -> final hidden states (B, T, C)
        and router logits; left-padded rows count positions from their first real token."""
        columns = self.embed_columns(ids, state)
        inputs = self.self_attentions(columns, state)
        x, router_logits = columns.embeddings, []  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x, logits = block(x, for_layer(inputs, i), state.caches[i] if state is not None else None)
            if logits is not None:
                router_logits.append(logits)
        return self.final_norm(x), router_logits

    def self_attentions(self, columns: StreamColumns, state: DecodeState | None) -> list[AttentionInputs]:
        """The layers' self-attention inputs: the columns' causal ones that every layer shares, or with a sliding
        window one per layer, from the layers' kinds (a step's from the decode state, a whole window's as the
        encoder-decoder's stacks make theirs)."""
        if self.sliding_window is None:
            return [columns.attention]
        pos = columns.positions  # (T,), or (R, T) in a step
        if state is not None:
            return state.self_attentions(pos.shape[-1], pos)
        return kinds_inputs(self.layer_kinds(), None, pos, pos, columns.embeddings.dtype)

    def layer_kinds(self) -> list[LayerKinds]:
        """Every block's self-attention as declared kinds (modules.attention_kinds): causal; a sliding block's
        keys fewer than sliding_window columns behind the query (Gemma's); its RoPE."""
        layers = []
        for slides, block in zip(self.sliding, self.blocks):
            kinds = [Causal()]
            if self.sliding_window is not None and slides:
                kinds.append(Band(self.sliding_window, causal=True))
            if block.self_attn.rotary is not None:
                kinds.append(Rope(block.self_attn.rotary))
            layers.append(tuple(kinds))
        return layers

    def window(self, tgt_ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hidden, aux = self.features(None, tgt_ids, None, None)
        return self.head(hidden), aux

    def features(
        self, src_ids: torch.Tensor | None, tgt_ids: torch.Tensor, src_mask: torch.Tensor | None, packing: None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The window's final hidden states (B, T, C), before the head, and its auxiliary terms (the encoder-
        decoder's signature, whose source a causal LM does not read): what a loss over a wide vocabulary takes
        (models.loss.chunked_loss)."""
        hidden, router_logits = self.hidden(tgt_ids)
        return hidden, moe_losses([], router_logits)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) or (N, C) -> logits, as the encoder-decoder's head names it."""
        return self.logits(hidden)

    def linear_head(self) -> LinearHead | None:
        """The head as one product where it is one (models.loss.linear_head): chunked_loss's faster path."""
        return linear_head(self.embed, self.lm_head, self.output_scale, self.config.output.softcap)

    def new_caches(self, state: DecodeState) -> None:
        """A step cache per block, and the kinds its blocks' step masks read."""
        state.new_caches(len(self.blocks))
        state.attend_as(self.layer_kinds())

    def advance(self, ids: torch.Tensor, state: DecodeState, last_only: bool | None = False) -> torch.Tensor | None:
        hidden, _ = self.hidden(ids, state)
        if last_only is None:
            return None
        return self.logits(hidden[:, -1:] if last_only else hidden)

"""The auto-regressive encoder-decoder of seed 000 (SEEDS.md section 3), a causal LM.

    E    = dropout(token + position[0..T-1])             token alone with position rope
    enc  = [causal block] x N_enc (E)                   no final norm
    d    = Linear(C, C)(LN?(enc)) (+ position[1..T])     add_ln_before_decoder_ff, add_pos_embed_to_decoder
    d    = [decoder block(d, enc)] x N_dec               self-attn, causal cross-attn, MLP (ALT: cross first)
    out  = LN(d) (- position[1..T]) (-> LN)              sub_pos_embed NO / YES_NO_LN / YES_LN
    loss = CE(head(out)) + coeff * embedding_loss(E, enc)   training only

N_enc is n_encoder_layers and N_dec is n_decoder_layers (default N_enc: the seed's n_layer is
the depth of each side). The seed describes the model as a decoder-only stack whose last N_dec
layers also cross-attend to the output of its first N_enc, so unequal depths are simply the
two stack sizes (the seed's "next step"). Every decoder block cross-attends to the same
encoder output through its own LayerNorm of it; decoder position t sees encoder positions <= t,
so a cached step runs one more encoder position and appends it to growing cross-attention
caches. The position table has max_positions + 1 rows when positions 1..T are added or
subtracted (with position rope it is kept for that alone: see causal_lm). The settings the
causal LMs share (GQA, experts, RoPE, ...) are honoured as encdec.models.causal_lm_shared lists;
expert losses are reported per side (moe_aux_encoder, ...).

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models import causal_lm_shared as lm
from encdec.models.model_config import ModelConfig
from encdec.modules import DecodeState, LayerCache


class AREncoderDecoder(lm.ResearchLM, nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.build_input(cfg)
        rotary, cross_rotary = lm.build_rotaries(cfg)
        self.encoder_blocks = nn.ModuleList(lm.build_causal_block(cfg, rotary) for _ in range(cfg.n_encoder_layers))
        self.build_decoder_input(cfg)
        self.decoder_blocks = nn.ModuleList(
            lm.build_cross_block(cfg, rotary, cross_rotary) for _ in range(cfg.decoder_layers)
        )
        self.build_output(cfg)

    def run(self, ids: torch.Tensor, state: DecodeState | None = None) -> lm.StackOutput:
        """ids (B, T), the whole window or each row's next T columns of `state` -> StackOutput; the state's
        caches take the new columns' keys."""
        columns = self.embed_columns(ids, state)
        inputs = columns.attention  # self- and cross-attention alike
        caches = (
            state.caches if state is not None else None
        )  # the encoder layers', then (self, cross) per decoder layer
        n = len(self.encoder_blocks)
        enc, encoder_logits, decoder_logits = columns.embeddings, [], []  # router logits of MoE layers, per side
        for i, block in enumerate(self.encoder_blocks):
            enc, logits = block(enc, inputs, caches[i] if caches is not None else None)
            if logits is not None:
                encoder_logits.append(logits)
        d = self.decoder_input(enc, columns.positions)
        for i, block in enumerate(self.decoder_blocks):
            layer_cache = LayerCache(caches[n + 2 * i], caches[n + 2 * i + 1]) if caches is not None else None
            d, logits = block(d, enc, inputs, inputs, layer_cache)
            if logits is not None:
                decoder_logits.append(logits)
        return lm.StackOutput(
            self.output_hidden(d, columns.positions), columns.embeddings, enc, encoder_logits, decoder_logits
        )

    def new_caches(self, state: DecodeState) -> None:
        state.new_caches(len(self.encoder_blocks) + 2 * len(self.decoder_blocks))

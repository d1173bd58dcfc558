"""The parallel encoder-decoder of seed 001 (SEEDS.md section 4), a causal LM.

    enc_0 = E = dropout(token + position[0..T-1])          token alone with position rope
    dec_0 = Linear(C, C)(LN?(E)) (+ position[1..T])        add_pos_embed_to_decoder
    layer l:  enc_l = causal block(enc_{l-1})                self-attn, MLP
              dec_l = decoder block(dec_{l-1}, enc_l)        self-attn, causal cross-attn to THIS
                                                             layer's updated enc_l, MLP (ALT: cross first)
    out   = LN(dec) (- position[1..T]) (-> LN)              sub_pos_embed, as in section 3
    loss  = CE + coeff * encoder_loss(E, enc_N)              the embedding loss construction, training only

N is n_encoder_layers, the number of layers. Layer l pairs encoder block l with a decoder
block, so the decoder cannot be deeper than the encoder: n_decoder_layers (default N) may
be smaller, and then the decoder starts late, as the seed's next step proposes ("at which
layer should the decoder start (the encoder should always start from the beginning)"):
the first N - n_decoder_layers layers hold an encoder block only, dec_0 still comes from
E, and decoder block j pairs with encoder block N - n_decoder_layers + j. A cached step
runs one more position through every layer, appending each paired layer's encoder
position to its decoder block's growing cross-attention cache. The settings the causal
LMs share (GQA, experts, ...) are honoured as encdec.models.causal_lm_shared lists.

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models import causal_lm_shared as lm
from encdec.models.model_config import ModelConfig
from encdec.modules import AttentionInputs, DecodeState, LayerCache, SelfAttentionCache


class ParallelLayer(nn.Module):
    """One layer: the encoder block, then (from the layer where the decoder starts) the decoder block
    attending to its output."""

    def __init__(self, cfg: ModelConfig, with_decoder: bool = True, rotaries: tuple = (None, None)):
        super().__init__()
        rotary, cross_rotary = rotaries  # RoPE's rotations (position rope), shared by every layer
        self.encoder_block = lm.build_causal_block(cfg, rotary)
        self.decoder_block = lm.build_cross_block(cfg, rotary, cross_rotary) if with_decoder else None

    def forward(
        self,
        enc: torch.Tensor,
        dec: torch.Tensor,
        inputs: AttentionInputs,
        encoder_cache: SelfAttentionCache | None = None,
        decoder_cache: LayerCache | None = None,
    ):
        """enc, dec (B, T, C) -> updated enc, dec (B, T, C), and the router logits of each block (or None)."""
        enc, encoder_logits = self.encoder_block(enc, inputs, encoder_cache)
        if self.decoder_block is None:
            return enc, dec, encoder_logits, None
        dec, decoder_logits = self.decoder_block(dec, enc, inputs, inputs, decoder_cache)
        return enc, dec, encoder_logits, decoder_logits


class ParallelEncoderDecoder(lm.ResearchLM, nn.Module):
    extra_loss_name = "encoder_loss"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.build_input(cfg)  # refuses a decoder deeper than the encoder (family_rules)
        self.build_decoder_input(cfg)
        self.decoder_start = cfg.n_encoder_layers - cfg.decoder_layers  # layers before it hold no decoder block
        rotaries = lm.build_rotaries(cfg)
        self.layers = nn.ModuleList(
            ParallelLayer(cfg, i >= self.decoder_start, rotaries) for i in range(cfg.n_encoder_layers)
        )
        self.build_output(cfg)

    def run(self, ids: torch.Tensor, state: DecodeState | None = None) -> lm.StackOutput:
        """ids (B, T), the whole window or each row's next T columns of `state` -> StackOutput; the state's
        caches take the new columns' keys."""
        columns = self.embed_columns(ids, state)
        dec = self.decoder_input(columns.embeddings, columns.positions)
        caches = state.caches if state is not None else None  # the encoder layers', then (self, cross) per decoder
        n = len(self.layers)
        enc, encoder_logits, decoder_logits = columns.embeddings, [], []  # router logits of MoE layers, per side
        for i, layer in enumerate(self.layers):
            encoder_cache = decoder_cache = None
            if caches is not None:
                encoder_cache = caches[i]
                j = i - self.decoder_start
                decoder_cache = LayerCache(caches[n + 2 * j], caches[n + 2 * j + 1]) if j >= 0 else None
            enc, dec, enc_logits, dec_logits = layer(enc, dec, columns.attention, encoder_cache, decoder_cache)
            if enc_logits is not None:
                encoder_logits.append(enc_logits)
            if dec_logits is not None:
                decoder_logits.append(dec_logits)
        return lm.StackOutput(
            self.output_hidden(dec, columns.positions), columns.embeddings, enc, encoder_logits, decoder_logits
        )

    def new_caches(self, state: DecodeState) -> None:
        state.new_caches(len(self.layers) + 2 * (len(self.layers) - self.decoder_start))

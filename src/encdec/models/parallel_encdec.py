"""The parallel encoder-decoder of seed 001 (SEEDS.md section 4), a causal LM.

    enc_0 = E = dropout(token + position[0..T-1])
    dec_0 = Linear(C, C)(LN?(E)) (+ position[1..T])        add_pos_embed_to_decoder
    layer l:  enc_l = causal block(enc_{l-1})                self-attn, MLP
              dec_l = decoder block(dec_{l-1}, enc_l)        self-attn, causal cross-attn to THIS
                                                             layer's updated enc_l, MLP (ALT: cross first)
    out   = LN(dec_N) (- position[1..T]) (-> LN)            sub_pos_embed, as in section 3
    loss  = CE + coeff * encoder_loss(E, enc_N)              the embedding loss construction, training only

N is n_encoder_layers (layers holding both sides). A cached step runs one more
position through every layer, appending each layer's encoder position to that
layer's growing cross-attention cache.

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models.causal_lm import (
    LMState,
    ResearchLM,
    StackOutput,
    build_causal_block,
    build_cross_block,
    causal_inputs,
    stream_positions,
    check_lm_config,
    new_kv_caches,
    norm_factory,
)
from encdec.models.config import ModelConfig
from encdec.models.research_losses import build_embedding_loss
from encdec.modules import DecoderCache, Dropout, LearnedPositions


class ParallelLayer(nn.Module):
    """One layer of both sides: the encoder block, then the decoder block attending to its output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder_block = build_causal_block(cfg)
        self.decoder_block = build_cross_block(cfg)

    def forward(self, enc, dec, inputs, encoder_cache=None, decoder_cache=None):
        """enc, dec (B, T, C) -> updated enc, dec (B, T, C)."""
        enc, _ = self.encoder_block(enc, inputs, encoder_cache)
        dec, _ = self.decoder_block(dec, enc, inputs, inputs, decoder_cache)
        return enc, dec


class ParallelEncoderDecoder(ResearchLM, nn.Module):
    extra_loss_name = "encoder_loss"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_lm_config(cfg)
        self.config = cfg
        r = cfg.research
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = LearnedPositions(cfg.max_positions + int(r.extra_position), cfg.d_model)
        self.dropout = Dropout(cfg.dropout)
        self.decoder_in_norm = norm_factory(cfg)() if r.add_ln_before_decoder_ff else None
        self.decoder_in = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.layers = nn.ModuleList(ParallelLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = norm_factory(cfg)()
        self.post_sub_norm = norm_factory(cfg)() if r.sub_pos_embed == "YES_LN" else None
        self.encoder_loss = build_embedding_loss(cfg)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def run(self, ids: torch.Tensor, offset: int = 0, state: LMState | None = None) -> StackOutput:
        """ids (B, T) at positions offset..offset+T-1 -> StackOutput; a state's caches are extended."""
        r = self.config.research
        T = ids.shape[1]
        self.check_positions(offset + T)
        pad = state.pad if state is not None else None  # left padding of a prompted batch
        pos = stream_positions(offset, T, ids.device, pad)  # (T,) or (B, T)
        E = self.dropout(self.embed(ids) + self.positions(pos))  # (B, T, C)
        inputs = causal_inputs(offset, T, ids.device, E.dtype, pad)
        dec = self.decoder_in(self.decoder_in_norm(E) if self.decoder_in_norm is not None else E)
        if r.add_pos_embed_to_decoder:
            dec = dec + self.next_positions(pos)
        caches = state.caches if state is not None else None  # encoder KVCaches, then the DecoderCache
        enc = E
        for i, layer in enumerate(self.layers):
            if caches is None:
                enc, dec = layer(enc, dec, inputs)
            else:
                enc, dec = layer(enc, dec, inputs, caches[i], caches[-1].layers[i])
        out = self.final_norm(dec)
        if r.sub_pos_embed != "NO":
            out = out - self.next_positions(pos)
            if self.post_sub_norm is not None:
                out = self.post_sub_norm(out)
        return StackOutput(out, E, enc)

    def new_state(self, max_len: int) -> LMState:
        n = len(self.layers)
        return LMState([*new_kv_caches(n, max_len), DecoderCache(n, max_len, growing_cross=True)])

"""The decoder-only baseline of seeds 000 and 001 (SEEDS.md section 5): nanoGPT's GPT.

    x -> token + learned position -> dropout -> [causal block] x n_layers -> LayerNorm -> tied head

n_layers is `decoder_layers` (n_decoder_layers, else n_encoder_layers: the seeds'
n_layer); the MLP is C -> d_ff -> C with exact GELU; no biases with bias false.
Generation prefills the prompt (see encdec.models.causal_lm).

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models.causal_lm import (
    LMState,
    PromptedLM,
    build_causal_block,
    causal_inputs,
    check_lm_config,
    cross_entropy,
    new_kv_caches,
    norm_factory,
    stream_positions,
)
from encdec.models.config import ModelConfig
from encdec.models.outputs import Seq2SeqOutput
from encdec.modules import Dropout, KVCache, LearnedPositions, lm_head


class DecoderOnly(PromptedLM, nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_lm_config(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = LearnedPositions(cfg.max_positions, cfg.d_model)
        self.dropout = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(build_causal_block(cfg) for _ in range(cfg.decoder_layers))
        self.final_norm = norm_factory(cfg)()
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def hidden(self, ids: torch.Tensor, offset: int = 0, caches: list[KVCache] | None = None,
               pad: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """ids (B, T) at columns offset..offset+T-1 -> final hidden states (B, T, C); rows left-padded
        by pad (B,) columns count positions from their first real token."""
        T = ids.shape[1]
        self.check_positions(offset + T)
        pos = stream_positions(offset, T, ids.device, pad)  # (T,) or (B, T)
        x = self.dropout(self.embed(ids) + self.positions(pos))  # (B, T, C)
        inputs = causal_inputs(offset, T, ids.device, x.dtype, pad)
        for i, block in enumerate(self.blocks):
            x, _ = block(x, inputs, caches[i] if caches is not None else None)
        return self.final_norm(x)

    def forward(
        self,
        src_ids: torch.Tensor | None,
        tgt_ids: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> Seq2SeqOutput:
        """tgt_ids (B, T) the window, labels (B, T) its next tokens; src_ids and src_mask are ignored."""
        logits = lm_head(self.hidden(tgt_ids), self.embed, self.lm_head)
        if labels is None:
            return Seq2SeqOutput(logits)
        ce = cross_entropy(logits, labels)
        return Seq2SeqOutput(logits, ce, ce)

    def new_state(self, max_len: int) -> LMState:
        return LMState(new_kv_caches(len(self.blocks), max_len))

    def advance(self, ids: torch.Tensor, state: LMState) -> torch.Tensor:
        hidden = self.hidden(ids, state.offset, state.caches, state.pad)
        state.offset += ids.shape[1]
        return lm_head(hidden, self.embed, self.lm_head)

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
and Qwen3 checkpoints load into (encdec.interop.hf_llama); this family alone also takes Qwen2's biases on q, k
and v (attention_bias) and Qwen3's norms of each head's queries and keys (qk_norm).

Shapes: B batch, T length, C model dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.models.causal_lm_shared import PromptedLM, build_causal_block, build_rotaries
from encdec.models.components import build_final_norm, build_lm_head
from encdec.models.family_rules import UNUSED_BY_FAMILY, check_family
from encdec.models.model_config import ModelConfig
from encdec.models.moe_losses import moe_losses
from encdec.modules import DecodeState


class DecoderOnly(PromptedLM, nn.Module):
    UNUSED = UNUSED_BY_FAMILY["decoder_only"]  # one stack: no decoder depth, cross-attention or research options

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        check_family(cfg)
        self.config = cfg
        self.build_embeddings(cfg)
        rotary, _ = build_rotaries(cfg, cross=False)
        self.blocks = nn.ModuleList(build_causal_block(cfg, rotary) for _ in range(cfg.n_encoder_layers))
        self.final_norm = build_final_norm(cfg)
        self.lm_head = build_lm_head(cfg)

    def hidden(self, ids: torch.Tensor, state: DecodeState | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """ids (B, T), the whole window or each row's next T columns of `state` -> final hidden states (B, T, C)
        and router logits; left-padded rows count positions from their first real token."""
        columns = self.embed_columns(ids, state)
        x, router_logits = columns.embeddings, []  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x, logits = block(x, columns.attention, state.caches[i] if state is not None else None)
            if logits is not None:
                router_logits.append(logits)
        return self.final_norm(x), router_logits

    def window(self, tgt_ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hidden, router_logits = self.hidden(tgt_ids)
        return self.logits(hidden), moe_losses([], router_logits)

    def new_caches(self, state: DecodeState) -> None:
        state.new_caches(len(self.blocks))

    def advance(self, ids: torch.Tensor, state: DecodeState, last_only: bool | None = False) -> torch.Tensor | None:
        hidden, _ = self.hidden(ids, state)
        if last_only is None:
            return None
        return self.logits(hidden[:, -1:] if last_only else hidden)

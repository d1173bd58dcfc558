"""The component builders every transformer family is built from: the one place that reads
a ModelConfig into attention, feed-forward, norms, blocks and the output head.

    attention   n_heads query heads over n_kv_heads key/value heads (MHA, GQA, MQA), d_head wide,
                scores scaled by 1/sqrt(d_head) (or of attention_scale_dim) or not (scale_attention),
                capped (attention_softcap), each head's queries and keys normed (qk_norm), bias (or on the
                projections alone: attention_bias; qvo: none on the keys, Whisper's), dropout;
                in the decoder self- and cross-attention merged (cross_attention.merged); in the encoder local or
                transient-global
                (encoder_attention, LongT5's: the masks are encoder_decoder.py's, the global keys' norm here) or
                local-global (Longformer's: its global tokens' own projections here)
    ffn         MoE(...) in a sparse layer (n_experts > 1, every moe_every-th) else FeedForward(...)
    norms       norm (rmsnorm, gemma_rmsnorm, layernorm), norm_eps, bias; placed before (pre) or after (post)
                each sublayer, with a final norm closing a pre-norm stack; post_norms: also one of each
                pre-norm sublayer's output (Gemma 2)
    head        tied to the token embeddings or its own Linear; output scaled by d_model^-0.5 or not

The encoder-decoder (encoder_decoder.py) and the causal LMs (causal_lm.py) take every part
from here, so a setting means the same thing in every family that uses it.
"""

import math

from torch import nn

from encdec.models.model_config import ModelConfig
from encdec.modules import (
    Attention,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    MoE,
    RotaryEmbedding,
    Routing,
    build_norm,
)


def norm_factory(cfg: ModelConfig):
    """A function making one norm of the configured kind."""
    return lambda: build_norm(cfg.norms.kind, cfg.d_model, cfg.norms.eps, cfg.bias)


def build_final_norm(cfg: ModelConfig) -> nn.Module:
    """The norm closing a pre-norm stack; a post-norm stack ends normalised already."""
    return norm_factory(cfg)() if cfg.norms.position == "pre" else nn.Identity()


def build_embedding_norm(cfg: ModelConfig) -> nn.Module:
    """BART normalises token + position embeddings before the first block; others do not."""
    return norm_factory(cfg)() if cfg.embeddings.norm else nn.Identity()


def embedding_scale(cfg: ModelConfig) -> float:
    """Token embeddings times sqrt(d_model) (Vaswani et al. 2017, 3.4) or 1."""
    return math.sqrt(cfg.d_model) if cfg.embeddings.scale else 1.0


def output_scale(cfg: ModelConfig) -> float:
    """The final hidden states times d_model^-0.5 before the head (T5 v1.0, tied) or 1."""
    return cfg.d_model**-0.5 if cfg.output.scale else 1.0


def build_attention(
    cfg: ModelConfig,
    n_heads: int,
    n_kv_heads: int | None,
    rotary: RotaryEmbedding | None = None,
    d_source: int | None = None,
    global_tokens: bool = False,
) -> Attention:
    """n_heads query heads over n_kv_heads key/value heads, keys and values read from d_source wide states
    (None: d_model). Heads are d_head wide when they are the model's n_heads; an attention with its own head
    count (cross_attention.n_heads) splits d_model among them."""
    d_head = cfg.head_dim if n_heads == cfg.n_heads else cfg.d_model // n_heads
    return Attention(
        cfg.d_model,
        n_heads,
        n_kv_heads,
        d_head,
        d_source,
        bias=cfg.bias or cfg.attention.bias in ("qkvo", "qvo"),
        scale=cfg.attention.scale,
        dropout=cfg.dropout,
        rotary=rotary,
        scale_dim=cfg.attention.scale_dim,
        softcap=cfg.attention.softcap,
        qk_norm=(lambda width: build_norm(cfg.norms.kind, width, cfg.norms.eps, cfg.bias))
        if cfg.attention.qk_norm
        else None,
        qkv_bias=cfg.bias or cfg.attention.bias != "none",
        global_tokens=global_tokens,
        k_bias=(cfg.bias or cfg.attention.bias != "none") and cfg.attention.bias != "qvo",
    )


def build_self_attention(cfg: ModelConfig, rotary: RotaryEmbedding | None = None) -> Attention:
    return build_attention(cfg, cfg.n_heads, cfg.n_kv_heads, rotary)


def build_cross_attention(
    cfg: ModelConfig, rotary: RotaryEmbedding | None = None, n_heads: int | None = None
) -> Attention:
    """cross_attention.n_heads heads (else `n_heads`, else the model's) over its n_kv_heads (else n_kv_heads), reading
    the encoder's states (of its own width where it has one)."""
    cross = cfg.cross_attention
    return build_attention(
        cfg, cross.n_heads or n_heads or cfg.n_heads, cross.n_kv_heads or cfg.n_kv_heads, rotary, cfg.encoder_width
    )


def build_ffn(cfg: ModelConfig, dropout: float, sparse: bool = True) -> nn.Module:
    """A mixture of experts when n_experts > 1 and the layer is `sparse` (ModelConfig.moe_layer), else a
    feed-forward; `dropout` acts between its two projections (the encoder-decoder's cfg.dropout; 0 for
    nanoGPT's MLP)."""
    experts = cfg.experts
    if experts.count > 1 and sparse:
        routing = Routing(
            experts.capacity,
            experts.eval_capacity_fraction,
            experts.second_expert_policy,
            experts.normalize_before_dropping,
            experts.batch_prioritized,
            experts.token_dropout,
            experts.route_padding,
        )
        args = (experts.count, experts.top_k, experts.renormalize, experts.activation, cfg.bias, dropout, routing)
        return MoE(cfg.d_model, cfg.d_ff, *args)
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.bias, dropout)


def build_encoder_block(
    cfg: ModelConfig, rotary: RotaryEmbedding | None = None, ffn_dropout: float | None = None, sparse: bool = True
) -> EncoderBlock:
    """Self-attention then feed-forward (experts where `sparse`): an encoder layer, or a GPT block when its
    inputs are causal. A transient-global encoder's attention norms its block sums (LongT5), a local-global one has
    its global tokens' projections (Longformer's)."""
    local_global = cfg.attention.encoder == "local_global"
    attention = build_attention(cfg, cfg.n_heads, cfg.n_kv_heads, rotary, global_tokens=local_global)
    if cfg.attention.encoder == "transient_global":
        attention.global_norm = norm_factory(cfg)()
    ffn = build_ffn(cfg, cfg.dropout if ffn_dropout is None else ffn_dropout, sparse)
    pre_norm = cfg.norms.position == "pre"
    return EncoderBlock(attention, ffn, norm_factory(cfg), cfg.dropout, pre_norm, cfg.norms.post)


def build_decoder_block(
    cfg: ModelConfig,
    rotary: RotaryEmbedding | None = None,
    cross_rotary: RotaryEmbedding | None = None,
    cross_heads: int | None = None,
    ffn_dropout: float | None = None,
    cross_first: bool = False,
    memory_norm: bool = False,
    sparse: bool = True,
) -> DecoderBlock:
    """Causal self-attention, cross-attention (`cross_heads` unless cross_attention.n_heads is set) and feed-forward
    (experts where `sparse`); `cross_first` and `memory_norm` (a norm of the memory in every block) serve the
    research families."""
    norm = norm_factory(cfg)
    self_attn = build_self_attention(cfg, rotary)
    # a merged attention reads the encoder through the self-attention's projections (T5Gemma 2): no cross-attention
    cross_attn = None if cfg.cross_attention.merged else build_cross_attention(cfg, cross_rotary, cross_heads)
    ffn = build_ffn(cfg, cfg.dropout if ffn_dropout is None else ffn_dropout, sparse)
    return DecoderBlock(
        self_attn,
        cross_attn,
        ffn,
        norm,
        cfg.dropout,
        cfg.norms.position == "pre",
        cross_first=cross_first,
        memory_norm=norm() if memory_norm else None,
        post_norms=cfg.norms.post,
    )


def build_lm_head(cfg: ModelConfig) -> nn.Linear | None:
    """None when the head is tied to the token embeddings (see encdec.modules.lm_head)."""
    return None if cfg.embeddings.tie else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

"""A model's parameters counted from its ModelConfig alone, without torch or building it: what `encdec size`
prints, in a fraction of a second for any size.

Each count is, to the parameter, what `count_parameters` gives of the model the config builds
(tests/models/test_parameter_count.py holds the two equal on every preset and on drawn configs of every
family): a shared tensor once (a tied head is the token table; the encoder and decoder share it), buffers
(sinusoidal tables, RoPE's frequencies, a fixed logits bias) not at all. "Without positions" leaves out
the learned absolute position tables and T5's relative bias, as `count_parameters(exclude_positions=True)`
and the seeds count. Whether the family accepts the config is `family_rules.check_family`'s to say.
"""

from dataclasses import dataclass

from encdec.models.model_config import ModelConfig

GATED_ACTIVATIONS = ("gated_gelu", "swiglu")  # two input projections (modules.feed_forward.GATED)


@dataclass(frozen=True)
class ParameterCount:
    total: int
    positions: int  # of `total`: learned absolute position tables and T5's relative bias

    @property
    def without_positions(self) -> int:
        return self.total - self.positions


def count_parameters_of(cfg: ModelConfig) -> ParameterCount:
    """The parameters of the model `cfg` describes, counted from its fields."""
    return COUNTERS[cfg.family](cfg)


def linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def norm(cfg: ModelConfig) -> int:
    """RMSNorm: a gain; LayerNorm: a gain, and a bias with model.bias."""
    return cfg.d_model * (2 if cfg.norms.kind == "layernorm" and cfg.bias else 1)


def attention(cfg: ModelConfig, n_heads: int, n_kv_heads: int | None, d_source: int | None = None) -> int:
    """q, k, v and o, biased as bias and attention_bias say, and each head's query and key norms with qk_norm
    (components.build_attention: heads d_head wide when they are the model's n_heads, else d_model split among
    them; keys and values read from d_source wide states, else d_model)."""
    d, d_head = cfg.d_model, cfg.head_dim if n_heads == cfg.n_heads else cfg.d_model // n_heads
    kv = n_kv_heads or n_heads
    qk_norms = 2 * d_head * (2 if cfg.norms.kind == "layernorm" and cfg.bias else 1) if cfg.attention.qk_norm else 0
    qkv_bias, o_bias = cfg.bias or cfg.attention.bias != "none", cfg.bias or cfg.attention.bias == "qkvo"
    return (
        linear(d, n_heads * d_head, qkv_bias)
        + 2 * linear(d_source or d, kv * d_head, qkv_bias)
        + linear(n_heads * d_head, d, o_bias)
        + qk_norms
    )


def feed_forward(cfg: ModelConfig, activation: str) -> int:
    inputs = 2 if activation in GATED_ACTIVATIONS else 1
    return inputs * linear(cfg.d_model, cfg.d_ff, cfg.bias) + linear(cfg.d_ff, cfg.d_model, cfg.bias)


def ffn(cfg: ModelConfig, sparse: bool = True) -> int:
    """A feed-forward, or in a sparse layer with experts a bias-free router and n_experts feed-forwards."""
    if cfg.experts.count > 1 and sparse:
        return cfg.d_model * cfg.experts.count + cfg.experts.count * feed_forward(cfg, cfg.experts.activation)
    return feed_forward(cfg, cfg.activation)


def sublayer_norms(cfg: ModelConfig) -> int:
    """A sublayer's norm, and with post_norms the norm of its output (Gemma 2's)."""
    return norm(cfg) * (2 if cfg.norms.post else 1)


def encoder_block(cfg: ModelConfig, sparse: bool = True) -> int:
    """Self-attention and feed-forward (experts where `sparse`), their norms (an encoder layer, or a GPT block)."""
    return attention(cfg, cfg.n_heads, cfg.n_kv_heads) + ffn(cfg, sparse) + 2 * sublayer_norms(cfg)


def decoder_block(cfg: ModelConfig, memory_norm: bool = False, sparse: bool = True) -> int:
    """Self-attention, cross-attention (cross heads over cross_attention.n_kv_heads, else n_kv_heads) and feed-forward,
    their norms, and with `memory_norm` one of the memory (the research families')."""
    if cfg.cross_attention.merged:  # the self-attention reads the memory too (T5Gemma 2)
        return encoder_block(cfg, sparse)
    cross = attention(cfg, cfg.cross_heads, cfg.cross_attention.n_kv_heads or cfg.n_kv_heads, cfg.encoder_width)
    return encoder_block(cfg, sparse) + cross + sublayer_norms(cfg) + (norm(cfg) if memory_norm else 0)


def token_tables(cfg: ModelConfig) -> int:
    """The token table, the head when it is not tied to it, the encoder's own table where it has one
    (shared_embeddings false, T5Gemma's), and the end-of-image token's vector (T5Gemma 2's)."""
    tables = cfg.vocab_size * (
        cfg.d_model * (1 + (not cfg.embeddings.tie)) + cfg.encoder_width * (not cfg.embeddings.shared)
    )
    return tables + (
        cfg.d_model if cfg.image_tokens.eoi_token_id is not None else 0
    )  # a token's own vector (T5Gemma 2)


def stack_norms(cfg: ModelConfig) -> int:
    """A stack's norm after its embeddings (BART's) and its final norm (pre-norm: post-norm ends normalised)."""
    return (norm(cfg) if cfg.embeddings.norm else 0) + (norm(cfg) if cfg.norms.position == "pre" else 0)


def stack_positions(cfg: ModelConfig, layers: int) -> int:
    """One stack's learned position table, or its relative bias (T5's one, UMT5's one per layer)."""
    if cfg.positions.kind == "learned":
        return (cfg.positions.max + cfg.positions.offset) * cfg.d_model
    if cfg.positions.kind == "relative":
        return cfg.positions.relative_buckets * cfg.n_heads * (layers if cfg.positions.relative_per_layer else 1)
    return 0  # sinusoidal (a buffer) or rope (rotations)


def encoder_decoder(cfg: ModelConfig) -> ParameterCount:
    """Two stacks over one token table (or the encoder over its own), each with its own position table or
    relative bias and norms, and experts in the layers ModelConfig.moe_layer names; the encoder of its own
    widths where it has them (ModelConfig.encoder_config)."""
    enc = cfg.encoder_config()
    positions = stack_positions(enc, cfg.n_encoder_layers) + stack_positions(cfg, cfg.decoder_layers)
    if cfg.attention.encoder == "transient_global":  # its keys' bias in the encoder, a norm of them per layer
        positions += cfg.positions.relative_buckets * enc.n_heads
    layers = sum(encoder_block(enc, cfg.moe_layer(i)) for i in range(cfg.n_encoder_layers))
    layers += cfg.n_encoder_layers * norm(enc) if cfg.attention.encoder == "transient_global" else 0
    layers += sum(decoder_block(cfg, sparse=cfg.moe_layer(i, decoder=True)) for i in range(cfg.decoder_layers))
    norms = stack_norms(enc) + stack_norms(cfg)
    return ParameterCount(token_tables(cfg) + norms + positions + layers, positions)


def causal_positions(cfg: ModelConfig, next_positions: bool) -> int:
    """The learned table (causal_lm_shared.PromptedLM.build_embeddings): max_positions rows, one more when
    positions 1..T are looked up; with rope, kept for those alone."""
    if cfg.positions.kind == "learned" or next_positions:
        return (cfg.positions.max + int(next_positions)) * cfg.d_model
    return 0


def decoder_only(cfg: ModelConfig) -> ParameterCount:
    positions = causal_positions(cfg, next_positions=False)
    blocks = cfg.n_encoder_layers * encoder_block(cfg)
    return ParameterCount(token_tables(cfg) + stack_norms(cfg) + positions + blocks, positions)


def research_lm(cfg: ModelConfig) -> ParameterCount:
    """ar_encdec and parallel_encdec hold the same parts, arranged differently: causal encoder blocks, the
    decoder's input layer (and its norm), decoder blocks with a norm of the memory each, the norm after
    subtracting positions (YES_LN) and the embedding or encoder loss's own parameters."""
    r = cfg.research
    positions = causal_positions(cfg, next_positions=r.extra_position)
    decoder_input = linear(cfg.d_model, cfg.d_model, cfg.bias) + (norm(cfg) if r.add_ln_before_decoder_ff else 0)
    blocks = cfg.n_encoder_layers * encoder_block(cfg) + cfg.decoder_layers * decoder_block(cfg, memory_norm=True)
    post_sub_norm = norm(cfg) if r.sub_pos_embed == "YES_LN" else 0
    own = decoder_input + blocks + post_sub_norm + embedding_loss(cfg)
    total = token_tables(cfg) + stack_norms(cfg) + positions + own
    return ParameterCount(total, positions)


def embedding_loss(cfg: ModelConfig) -> int:
    """research_losses.EmbeddingLoss: its LayerNorms (a gain and a bias each when affine, whatever model.bias
    says) and the MATMUL aggregation's max_positions^2 mixing matrix; nothing without a loss."""
    r = cfg.research
    if r.embedding_loss == "NONE":
        return 0
    layer_norm = 2 * cfg.d_model if r.embedding_norm_affine else 0
    norms = layer_norm * ((r.embedding_ln_type != "NONE") + bool(r.use_ln_on_encoder_out))
    return norms + (cfg.positions.max**2 if r.embedding_aggregation == "MATMUL" else 0)


def rnn_seq2seq(cfg: ModelConfig) -> ParameterCount:
    """A GRU (3 gates) or LSTM (4) encoder and decoder, d_model wide at every layer, and Luong attention."""
    d, gates = cfg.d_model, 3 if cfg.rnn.cell == "gru" else 4
    layer = gates * (2 * d * d + (2 * d if cfg.bias else 0))  # input and hidden weights (and biases)
    attention = d * d + linear(2 * d, d, cfg.bias) if cfg.rnn.attention else 0  # score, combine
    return ParameterCount(token_tables(cfg) + 2 * cfg.n_encoder_layers * layer + attention, 0)


COUNTERS = {
    "encoder_decoder": encoder_decoder,
    "ar_encdec": research_lm,
    "parallel_encdec": research_lm,
    "decoder_only": decoder_only,
    "rnn_seq2seq": rnn_seq2seq,
}

"""What each family refuses, decided from a ModelConfig alone, without torch: the fields it does not use
(`UNUSED_BY_FAMILY`, each class's `UNUSED`) and the settings it cannot honour, each in one sentence.

The family classes refuse through `check_family` before they build anything; a config loader asks
`check_fields` (the unused fields alone), and a parameter count (`encdec size`) asks `check_family` before it
builds smaller models of the config.
"""

from encdec.errors import ConfigError
from encdec.models.config_specs import AttentionSpec, CrossAttention, Positions
from encdec.models.model_config import CAUSAL_LMS, ModelConfig, refuse_unused

DEFAULT = ModelConfig()  # every setting at its default, which a setting that acts only beside another keeps

# What no causal LM uses: other position schemes (position must be learned or rope), Marian and
# BART's checkpoint details, Switch's layout of sparse layers (every feed-forward is one with experts),
# the RNN's options. Each family adds its own to these.
LM_UNUSED = frozenset(
    {
        "experts.every",
        "experts.decoder_every",
        "experts.place",
        "experts.balance",  # over an encoder's real tokens (NLLB-MoE's): the causal LMs count first choices
        "positions.sinusoidal_layout",
        "positions.offset",
        "positions.relative_buckets",
        "positions.relative_max_distance",
        "positions.relative_per_layer",  # UMT5's
        "output.logits_bias",
        "hf_model_type",  # the Hugging Face family an encoder-decoder exports as
        "attention.sliding_window",  # Gemma 2's, as T5Gemma's encoder-decoder has it
        "attention.global_every",
        "attention.encoder",  # LongT5's, and its two settings
        "attention.sliding_window_layout",  # T5Gemma 2's, with its RoPE, norms, merged attention and tokens
        "positions.rope_local_theta",
        "positions.rope_scale",
        "attention.qk_norm",  # T5Gemma 2's and, in the decoder-only family, Qwen3's
        "attention.bias",  # Qwen2's biases on q, k and v alone, the decoder-only family's
        "cross_attention.merged",
        "image_tokens",
        "attention.local_radius",
        "attention.global_block_size",
        "attention.global_tokens",
        "attention.kinds",  # kinds by name: the encoder-decoder's stacks (models.stack) add them
        "attention.implementation",  # FlexAttention or not: the encoder-decoder's stacks (models.stack) choose
        "output.softcap",
        "embeddings.shared",  # one stack, one token table
        "embeddings.decoder_norm_first",  # the encoder-decoder's decoder (BlenderbotSmall's)
        "encoder",  # an encoder of its own widths, the transformer encoder-decoder's alone (T5Gemma's)
        "rnn",
        "audio",  # the whisper family's log-mel input
    }
)
# the settings of the Hugging Face decoder-only families that decoder_only takes and the research LMs do not: Qwen2's
# q, k and v biases, Qwen3's and Gemma 3's norms of each head's queries and keys, Gemma 2's and Gemma 3's sliding
# window (a cache that keeps every key and masks by the window decodes it exactly), Gemma 3's RoPE of the sliding
# layers and scaling of the global ones, Gemma's cap of the logits
DECODER_ONLY_OWN = frozenset(
    {
        "attention.qk_norm",
        "attention.bias",
        "attention.sliding_window",
        "attention.global_every",
        "positions.rope_local_theta",
        "positions.rope_scale",
        "output.softcap",
    }
)

# What the whisper family's encoder, which reads log-mel features through its convolutional stem at its own sinusoidal
# positions with every frame a key, does not take: a token table of its own, other widths, experts, images, the
# encoder attentions and windows, named kinds, positions other than the decoder's learned ones, an embedding norm
WHISPER_UNUSED = frozenset(
    {
        "research",
        "rnn",
        "encoder",
        "image_tokens",
        "experts",
        "cross_attention.rope",
        "cross_attention.merged",
        "attention.encoder",
        "attention.local_radius",
        "attention.global_block_size",
        "attention.global_tokens",
        "attention.sliding_window",
        "attention.global_every",
        "attention.sliding_window_layout",
        "attention.kinds",
        "positions.sinusoidal_layout",
        "positions.relative_buckets",
        "positions.relative_max_distance",
        "positions.relative_per_layer",
        "positions.rope_theta",
        "positions.rope_local_theta",
        "positions.rope_scale",
        "embeddings.shared",
        "embeddings.norm",  # BART's norm of the embeddings, which the stem's output never takes
        "embeddings.decoder_norm_first",
    }
)

# family -> the fields it refuses away from their defaults (its class's UNUSED)
UNUSED_BY_FAMILY = {
    # the research and RNN families', the decoder-only family's attention biases (no encoder-decoder of tokens has
    # them) and the whisper family's audio input
    "encoder_decoder": frozenset({"research", "rnn", "attention.bias", "audio"}),
    "whisper": WHISPER_UNUSED,
    "ar_encdec": LM_UNUSED,
    "parallel_encdec": LM_UNUSED,
    # one stack: no decoder depth, cross-attention or research options
    "decoder_only": (LM_UNUSED - DECODER_ONLY_OWN) | {"n_decoder_layers", "cross_attention", "research"},
    # the transformer's settings: attention, feed-forward, norms, positions, experts, head scaling
    "rnn_seq2seq": frozenset(
        {
            "encoder",
            "n_heads",
            "n_kv_heads",
            "d_head",
            "d_ff",
            "cross_attention",
            "activation",
            "norms",
            "attention",
            "positions",
            "embeddings.norm",
            "embeddings.scale",
            "output",
            "embeddings.decoder_norm_first",
            "experts",
            "hf_model_type",
            "research",
            "image_tokens",
            "embeddings.shared",
            "audio",
        }
    ),
}


def check_fields(cfg: ModelConfig) -> None:
    """A field of `cfg` its family does not use, set away from its default: ConfigError, one sentence."""
    refuse_unused(cfg, UNUSED_BY_FAMILY[cfg.family])


def check_family(cfg: ModelConfig) -> None:
    """Everything building `cfg`'s family refuses, without building it: an unused field, then the family's
    own rules."""
    check_fields(cfg)
    if cfg.family in CAUSAL_LMS:
        check_lm_config(cfg)
    if cfg.family in ("ar_encdec", "parallel_encdec"):
        check_cross_heads(cfg)
    if cfg.family == "parallel_encdec" and cfg.decoder_layers > cfg.n_encoder_layers:
        raise ConfigError(
            f"model.n_decoder_layers ({cfg.decoder_layers}) exceeds model.n_encoder_layers "
            f"({cfg.n_encoder_layers}): the parallel_encdec family pairs every decoder block "
            "with an encoder block, so its decoder may start late but not early"
        )
    if cfg.attention.bias in ("qkv", "qkvo") and cfg.bias:
        raise ConfigError(
            f"model.attention.bias {cfg.attention.bias} acts only with model.bias false, which puts a bias on every "
            "projection (qvo leaves out the keys')"
        )
    if cfg.attention.scale_dim is not None and not cfg.attention.scale:
        raise ConfigError("model.attention.scale_dim acts only with model.attention.scale true")
    if cfg.embeddings.decoder_norm_first and not cfg.embeddings.norm:
        raise ConfigError(
            "model.embeddings.decoder_norm_first places the embedding norm: set model.embeddings.norm true"
        )
    if cfg.positions.relative_per_layer and cfg.positions.kind != "relative":
        raise ConfigError(
            f"model.positions.relative_per_layer acts only with model.positions.kind relative, got {cfg.positions.kind!r}"
        )
    if cfg.family == "rnn_seq2seq" and cfg.decoder_layers != cfg.n_encoder_layers:
        raise ConfigError("rnn_seq2seq needs model.n_decoder_layers equal to model.n_encoder_layers (or unset)")
    if cfg.family == "encoder_decoder":
        check_moe_layout(cfg)
        check_sliding_window(cfg)
        check_encoder_attention(cfg)
        check_gemma3_fields(cfg)
    if cfg.family == "decoder_only":  # Gemma 2's and Gemma 3's window and RoPE, as the encoder-decoder has them
        check_sliding_window(cfg)
        check_gemma3_fields(cfg)
    if cfg.family == "whisper":
        check_whisper(cfg)


def check_whisper(cfg: ModelConfig) -> None:
    """The whisper family's decoder reads learned positions, and its encoder's sinusoids (Whisper's `sinusoids`:
    sines then cosines of d_model / 2 - 1 steps of timescale) need an even width of 4 or more."""
    if cfg.positions.kind != "learned":
        raise ConfigError(
            f"model.family whisper has learned decoder positions (model.positions.kind learned), got {cfg.positions.kind!r}"
        )
    if cfg.d_model < 4 or cfg.d_model % 2:
        raise ConfigError(
            f"model.family whisper's sinusoidal encoder positions need an even model.d_model of 4 or more, got {cfg.d_model}"
        )


def check_gemma3_fields(cfg: ModelConfig) -> None:
    """Gemma 3's (and T5Gemma 2's) settings that mean something only beside another: a window's layout, RoPE's
    bases and scaling, merged attention's one set of projections (RoPE in self-attention alone, cross heads the
    same)."""
    if (
        cfg.attention.sliding_window is None
        and cfg.attention.sliding_window_layout != AttentionSpec.sliding_window_layout
    ):
        raise ConfigError(
            "model.attention.sliding_window_layout acts only with model.attention.sliding_window; remove it"
        )
    for key in ("positions.rope_local_theta", "positions.rope_scale"):
        if cfg.setting(key) != DEFAULT.setting(key) and cfg.positions.kind != "rope":
            raise ConfigError(f"model.{key} acts only with model.positions.kind rope; remove it")
    if cfg.positions.rope_local_theta is not None and cfg.attention.sliding_window is None:
        raise ConfigError(
            "model.positions.rope_local_theta acts only with model.attention.sliding_window, in the sliding layers"
        )
    cross = cfg.cross_attention
    if cross.merged:
        if cfg.positions.kind == "rope" and cross.rope != "none":
            raise ConfigError(
                "model.cross_attention.merged needs model.cross_attention.rope none: the encoder's keys are not rotated"
            )
        if cross.n_heads not in (None, cfg.n_heads) or cross.n_kv_heads not in (None, cfg.n_kv_heads):
            raise ConfigError(
                "model.cross_attention.merged reads the encoder through the self-attention's heads; "
                "remove model.cross_attention.n_heads and n_kv_heads"
            )


def check_encoder_attention(cfg: ModelConfig) -> None:
    """LongT5's radius and blocks mean something only with its attention; a transient-global attention's bias of
    the block keys is a relative one, kept once per stack as T5's."""
    full = cfg.attention.encoder == "full"
    for key in ("attention.local_radius", "attention.global_block_size"):
        unused = full or (key == "attention.global_block_size" and cfg.attention.encoder != "transient_global")
        if unused and cfg.setting(key) != DEFAULT.setting(key):
            also = " or local_global" if key == "attention.local_radius" else ""
            raise ConfigError(f"model.{key} acts only with model.attention.encoder local or transient_global{also}")
    if cfg.attention.global_tokens != "none" and cfg.attention.encoder != "local_global":
        raise ConfigError("model.attention.global_tokens acts only with model.attention.encoder local_global")
    if cfg.attention.encoder == "transient_global" and (
        cfg.positions.kind != "relative" or cfg.positions.relative_per_layer
    ):
        raise ConfigError(
            "model.attention.encoder transient_global needs model.positions.kind relative with one bias per stack (T5's)"
        )


def check_sliding_window(cfg: ModelConfig) -> None:
    """A sliding window needs positions no relative bias carries; global_every means nothing without one."""
    if cfg.attention.sliding_window is None and cfg.attention.global_every != AttentionSpec.global_every:
        raise ConfigError("model.attention.global_every acts only with model.attention.sliding_window; remove it")
    if cfg.attention.sliding_window is not None and cfg.positions.kind == "relative":
        raise ConfigError(
            "model.attention.sliding_window does not combine with model.positions.kind relative; use rope"
        )


def check_moe_layout(cfg: ModelConfig) -> None:
    """A step of sparse layers needs experts and must fit its stack, which so keeps at least one sparse layer."""
    experts = cfg.experts
    decoder_key = "decoder_every" if experts.decoder_every is not None else "every"
    for key, side, layers in (("every", "encoder", cfg.n_encoder_layers), (decoder_key, "decoder", cfg.decoder_layers)):
        step = experts.step(side == "decoder")
        if experts.count == 1 and (step != 1 or key == "decoder_every"):
            raise ConfigError(f"model.experts.{key} acts only with model.experts.count above 1; remove it")
        if step > layers:
            hint = "; set model.experts.decoder_every" if side == "decoder" and key == "every" else ""
            plural = "s" if layers > 1 else ""
            raise ConfigError(f"model.experts.{key} ({step}) exceeds the {side}'s {layers} layer{plural}{hint}")


def check_lm_config(cfg: ModelConfig) -> None:
    """Refuse the position settings a causal LM cannot honour, each in one sentence."""
    if cfg.positions.kind not in ("learned", "rope"):
        raise ConfigError(
            f"model.family {cfg.family} needs model.positions.kind learned or rope, got {cfg.positions.kind!r}"
        )
    rope = cfg.cross_attention.rope
    if cfg.positions.kind == "learned":
        for key, value, default in (
            ("positions.rope_theta", cfg.positions.rope_theta, Positions.rope_theta),
            ("cross_attention.rope", rope, CrossAttention.rope),
        ):
            if value != default:
                raise ConfigError(f"model.{key} acts only with model.positions.kind rope; remove it")
    elif rope == "prepended":
        raise ConfigError(
            f"model.cross_attention.rope prepended does not apply to the {cfg.family} family, whose encoder and decoder "
            "read the same positions; use relative or none"
        )


def check_cross_heads(cfg: ModelConfig) -> None:
    """The research encoder-decoders' cross-attention heads of their own count split d_model among them."""
    heads = cfg.cross_heads
    if heads != cfg.n_heads and cfg.d_model % heads:
        raise ConfigError(f"model.cross_attention.n_heads ({heads}) must divide model.d_model ({cfg.d_model})")

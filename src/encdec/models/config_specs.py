"""The parts of a ModelConfig that belong together, each a spec of its own (`model.experts.count`), and the
one table that reads the flat keys written before them (`MOVED`).

    model:
      encoder: {d_model: 256, n_heads: 4}                  the encoder's own widths, where not the decoder's
      cross_attention: {n_heads: 16, rope: none}           the decoder's attention over the encoder
      experts: {count: 8, top_k: 1, renormalize: true}     a mixture of experts in every feed-forward
      rnn: {cell: lstm}                                     the RNN encoder-decoder's (family rnn_seq2seq)
      image_tokens: {eoi_token_id: 256000}                  T5Gemma 2's (read from its checkpoints)
      audio: {n_mels: 128, max_source_positions: 1500}      the whisper family's log-mel input (its alone)
      attention: {scale: true, sliding_window: 4096}        scaling, caps, biases, windows, LongT5's kinds
      positions: {kind: rope, rope_theta: 1.0e+6}          how positions enter, and each kind's settings
      norms: {kind: layernorm, eps: 1.0e-5, position: post}  every norm of the stacks
      embeddings: {scale: true, tie: false}                the token tables: scale, norm, tied head, shared
      output: {scale: false, softcap: 30.0}                 the logits' scale, fixed bias and cap

Each spec's fields are checked by their declarations (encdec.schema), named by their full dotted key. A
config written flat (`n_experts: 8`, a checkpoint's model.json or config.yaml from before the specs, a
`--set model.n_experts=8`) is read through MOVED: each old key to its place in its spec.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from encdec.errors import ConfigError
from encdec.schema import Count, Positive, Range, TokenId, check, short

MAX_LAYERS = 4096  # per stack; the deepest trained transformers have a few hundred
MAX_EXPERTS = 4096  # Switch-C has 2048; each expert is its own modules in every layer
MAX_COEF = 1e6  # a loss coefficient: the auxiliary losses' are 1e-3 to 1e-2
Layers = Annotated[int, Range(1, MAX_LAYERS)]
Softcap = Annotated[float, Range(0, 1e6, above=True)]  # c in c * tanh(x / c); Gemma 2's are 50 and 30


@dataclass
class Experts:
    """Feed-forwards that are mixtures of experts (Switch Transformers, ROT5, NLLB-MoE): `count` above 1 makes
    every `every`-th feed-forward one (the decoder's every `decoder_every`-th), routed to `top_k` experts a token.
    Every token is routed unless a capacity is set (modules.moe.Routing: GShard's and NLLB-MoE's top-2 gating,
    transformers' NllbMoeTop2Router, whose config.json names the fields from `capacity` on)."""

    count: Annotated[int, Range(1, MAX_EXPERTS)] = 1  # 1: dense feed-forwards
    every: Layers = 1  # every n-th feed-forward is one, from a stack's second (see layer)
    decoder_every: Layers | None = None  # None: every (Switch's configs set each stack's)
    place: Literal["second", "last"] = "second"  # each step's sparse layer: Switch's second, NLLB-MoE's last
    top_k: Positive = 1
    renormalize: bool = False  # gates renormalised over top-k (ROT5) or raw (Switch, default)
    activation: Literal["relu", "gelu", "gelu_tanh", "gated_gelu", "swiglu"] = "gelu"
    aux_loss_coef: Annotated[float, Range(0, MAX_COEF)] = 0.001  # load balance, each stack
    z_loss_coef: Annotated[float, Range(0, MAX_COEF)] = 0.001  # router z-loss, each stack
    balance: Literal["first", "all"] = "first"  # the load balance counts: first choices, or all over real tokens
    capacity: Positive | None = None  # tokens an expert takes a training forward (expert_capacity); None: all
    eval_capacity_fraction: Annotated[float, Range(0, 1)] = 0.0  # evaluation's: ceil(it * tokens); 0: capacity's
    second_expert_policy: Literal["all", "random", "sampling"] = "all"  # the later choices: kept, kept at random
    normalize_before_dropping: bool = False  # renormalised gates computed before the capacity drops any
    batch_prioritized: bool = False  # the capacity is filled by tokens in order of top probability, not position
    token_dropout: Annotated[float, Range(0, 1, below=True)] = 0.0  # of the experts' outputs (moe_token_dropout)
    route_padding: bool = True  # false: padding takes no expert (NLLB-MoE's router_ignore_padding_tokens false)

    def __post_init__(self):
        check(self, "model.experts.")

    def check_top_k(self) -> None:
        """Top-k among the experts there are (ModelConfig's check: an overlay's spec may set top_k alone)."""
        if self.top_k > self.count:
            raise ConfigError(f"model.experts.top_k ({self.top_k}) exceeds model.experts.count ({self.count})")

    def balance_args(self, encoder_real: Any) -> tuple[int, Any]:
        """moe_losses' top_k and encoder_real (the encoder's (B, S) mask, or None) for the load balance `balance`
        names."""
        return (self.top_k, encoder_real) if self.balance == "all" else (1, None)

    def step(self, decoder: bool = False) -> int:
        """The step of sparse layers in the encoder, or the decoder."""
        return (self.decoder_every or self.every) if decoder else self.every

    def layer(self, layer: int, decoder: bool = False) -> bool:
        """Whether a stack's feed-forward `layer` (from 0) is a mixture of experts: with count > 1, every one when
        its step is 1, else layers 1, 1 + step, 1 + 2 step, ... as Switch Transformers lay them out
        (transformers: `i % sparse_step == 1`; a step of 2 is every other one), or with `place` last layers
        step - 1, 2 step - 1, ... as NLLB-MoE does (`(i + 1) % sparse_step == 0`)."""
        step = self.step(decoder)
        return self.count > 1 and layer % step == (1 % step if self.place == "second" else step - 1)


@dataclass
class EncoderWidths:
    """An encoder of other widths than the decoder (T5Gemma's unbalanced 9B-2B, ModelConfig.encoder_config), or
    with a token table of another size (FSMT's source vocabulary): the transformer encoder-decoder's alone. Each
    unset one is the decoder's."""

    vocab_size: Positive | None = None  # the encoder's own token table's rows (FSMT's src_vocab_size)
    d_model: Positive | None = None
    d_ff: Positive | None = None
    n_heads: Positive | None = None
    n_kv_heads: Positive | None = None
    d_head: Positive | None = None
    max_positions: Positive | None = None  # its position table's rows (LED's 16,384 beside the decoder's 1,024)

    def __post_init__(self):
        check(self, "model.encoder.")


@dataclass
class CrossAttention:
    """The decoder's attention over the encoder's states: its heads (the self-attention's unless set), whether
    RoPE rotates its queries and keys, or whether it is one softmax with the self-attention (T5Gemma 2)."""

    n_heads: Positive | None = None  # None: model.n_heads (ar_encdec, parallel_encdec: 2 * n_heads)
    n_kv_heads: Positive | None = None  # None: model.n_kv_heads
    rope: Literal["relative", "prepended", "none"] = "relative"  # with RoPE: i and j from 0, encoder first, or none
    merged: bool = False  # the decoder's self- and cross-attention one softmax over both keys, one set of projections

    def __post_init__(self):
        check(self, "model.cross_attention.")


@dataclass
class Rnn:
    """The RNN encoder-decoder's own settings (rnn_seq2seq, Luong et al.); every other family refuses them."""

    cell: Literal["gru", "lstm"] = "gru"
    attention: bool = True  # the decoder attends to the encoder states (Luong)

    def __post_init__(self):
        check(self, "model.rnn.")


@dataclass
class ImageTokens:
    """T5Gemma 2's tokens of images, which encdec reads without the vision tower that makes them: the
    encoder-decoder's alone. Each id below vocab_size (schema.InVocabulary), checked with the config's."""

    eoi_token_id: TokenId | None = None  # end-of-image: a token whose embedding is a vector of its own, unscaled
    image_token_id: TokenId | None = None  # a token that stands for an image, which a text model refuses

    def __post_init__(self):
        check(self, "model.image_tokens.")


@dataclass
class Audio:
    """The whisper family's input: log-mel features (B, n_mels, frames) read by its convolutional stem, whose second
    convolution halves the frames, at most max_source_positions after it (the rows of its fixed sinusoidal table:
    1500, 30 s at 10 ms a frame); every other family refuses these."""

    n_mels: Annotated[int, Range(1, 1024)] = 80  # Whisper's 80 bins; large-v3's 128
    max_source_positions: Annotated[int, Range(1, 1 << 20)] = 1500
    # the weight of a CTC loss on the encoder's output through the tied head (models.whisper, "CTC"), in training
    # alone; 0: none, as Whisper trains. A model's shape and its exported checkpoint are the same either way.
    ctc_weight: Annotated[float, Range(0, 10)] = 0.0

    def __post_init__(self):
        check(self, "model.audio.")


@dataclass
class AttentionSpec:
    """Self-attention's settings (and, where they apply, cross-attention's): its biases and scaling, caps, per-head
    norms, a sliding window in some layers, and LongT5's encoder attention."""

    # with model.bias false, biases on the attention's projections alone: q, k and v (Qwen2) or all four (Llama's and
    # Qwen3's attention_bias); model.bias true has them on every projection already, or with qvo on all but the
    # keys' (Whisper's, whose key bias the softmax cancels)
    bias: Literal["none", "qkv", "qkvo", "qvo"] = "none"
    scale: bool | None = None  # divide scores by sqrt(d_head); None: the family's (T5 no, GPT yes)
    scale_dim: Positive | None = None  # with scale, sqrt of this, not of d_head (Gemma's query_pre_attn_scalar)
    softcap: Softcap | None = None  # scores capped c * tanh(s / c) before the mask (Gemma 2)
    qk_norm: bool = False  # each head's queries and keys normed (RMS) before RoPE (Gemma 3, Qwen3)
    sliding_window: Positive | None = None  # self-attention of most layers sees keys this near (global_every)
    global_every: Layers = 2  # with sliding_window, layers i with (i + 1) % global_every == 0 see every key
    # the encoder's window: keys at most sliding_window away on each side (T5Gemma), or sliding_window keys in all,
    # (w + 1) // 2 back counting the query's own and w // 2 ahead (T5Gemma 2)
    sliding_window_layout: Literal["each_side", "split"] = "each_side"
    # the encoder's self-attention (LongT5): every key; "local": keys at most local_radius away; "transient_global":
    # those and, per global_block_size-token block of the input, one key of the block's summed states, normed
    # "local_global": Longformer's (LED's): keys at most local_radius away, and the global tokens `global_tokens`
    # picks, each attending to every key through q, k and v of its own and seen by every token beside its band
    encoder: Literal["full", "local", "transient_global", "local_global"] = "full"
    local_radius: Positive = 127
    global_block_size: Positive = 16
    # local_global's global tokens: none (a band alone, as transformers' LED without a global_attention_mask), or
    # each input's first real token (LED's summarization examples)
    global_tokens: Literal["none", "first"] = "none"
    # kinds every self-attention layer adds, by their name in modules.attention_kinds.KINDS, each with its own
    # settings: {alibi: {}}, {dilated_band: {width: 4, dilation: 2}} (checked by the kind's declaration when built)
    kinds: dict[str, dict[str, int | float | bool]] = dataclasses.field(default_factory=dict)
    # how a whole sequence's attention is computed (modules.flex_attention): auto, FlexAttention on CUDA for every
    # masked or biased attention, and the dense and chunked paths elsewhere; dense, those alone; flex, FlexAttention
    # on any device (on the CPU forward alone, eager: to check it)
    implementation: Literal["auto", "dense", "flex"] = "auto"

    def __post_init__(self):
        check(self, "model.attention.")


@dataclass
class Positions:
    """How a token's position enters: its kind and the settings of each kind (tables, relative buckets, RoPE)."""

    kind: Literal["sinusoidal", "learned", "relative", "rope"] = "relative"
    max: Positive = 512  # rows of sinusoidal / learned tables
    # sin/cos interleaved (Vaswani), sin then cos halves (Marian), or fairseq's (M2M100, NLLB): halves of other
    # frequencies, position p at table row pad_id + 1 + p, counted over real tokens, pads a zero vector
    sinusoidal_layout: Literal["interleaved", "halves", "fairseq"] = "interleaved"
    offset: Count = 0  # learned table index of position 0 (BART: 2)
    relative_buckets: Annotated[int, Range(4)] = 32
    relative_max_distance: Positive = 128
    relative_per_layer: bool = False  # every layer its own relative bias (UMT5), not the stack's first's (T5)
    rope_theta: Annotated[float, Range(0, 1e12, above=True)] = 10000.0  # Llama 3 uses 500,000
    # the sliding layers' (Gemma 3's 10,000 beside its global layers' 1,000,000); None: rope_theta
    rope_local_theta: Annotated[float, Range(0, 1e12, above=True)] | None = None
    rope_scale: Annotated[float, Range(1, 1e6)] = 1.0  # the global layers' positions divided by it (linear
    # RoPE scaling, Gemma 3's factor 8)

    def __post_init__(self):
        check(self, "model.positions.")

    def check_relative(self) -> None:
        """Buckets of exact distances below the largest (ModelConfig's check: an overlay's spec may set one)."""
        if self.relative_max_distance <= self.relative_buckets // 2:
            raise ConfigError(
                f"model.positions.relative_max_distance ({self.relative_max_distance}) must exceed half of "
                f"model.positions.relative_buckets ({self.relative_buckets}), which count exact distances"
            )


@dataclass
class Norms:
    """Every norm of the transformer stacks: its kind and epsilon, before or after each sublayer, or both."""

    # gemma_rmsnorm: Gemma's x * (1 + weight), in float32, and its embedding scale rounded to the model's dtype
    kind: Literal["rmsnorm", "layernorm", "gemma_rmsnorm"] = "rmsnorm"
    eps: Annotated[float, Range(0, 1, above=True)] = 1e-6
    position: Literal["pre", "post"] = "pre"
    post: bool = False  # pre-norm sublayers' outputs normalised too before the residual (Gemma 2)

    def __post_init__(self):
        check(self, "model.norms.")


@dataclass
class Embeddings:
    """The token embeddings: their scale and norm, and which tables the head and the encoder read."""

    scale: bool = False  # token embeddings times sqrt(d_model) (Vaswani)
    norm: bool = False  # a norm after token + position embeddings (BART's layernorm_embedding)
    tie: bool = True  # the LM head shares the token embedding matrix
    shared: bool = True  # the encoder reads the decoder's token table; false: its own (T5Gemma)
    # the decoder's embedding norm on its token embeddings, before positions are added (ParlAI's "xlm" variant,
    # BlenderbotSmall's decoder: norm(scale * tokens) + positions); the encoder's stays after them
    decoder_norm_first: bool = False

    def __post_init__(self):
        check(self, "model.embeddings.")


@dataclass
class Output:
    """What the decoder's last states go through to become logits: a scale, a fixed bias, a cap."""

    scale: bool | None = None  # output times d_model^-0.5 before the head; None: the family's (T5 v1.0 yes)
    logits_bias: bool = False  # a fixed bias added to the logits (Marian, BART's final_logits_bias)
    softcap: Softcap | None = None  # logits capped c * tanh(l / c) (Gemma 2's final_logit_softcapping)

    def __post_init__(self):
        check(self, "model.output.")


# ModelConfig's fields that are specs: name -> class
SPECS = {
    "encoder": EncoderWidths,
    "cross_attention": CrossAttention,
    "experts": Experts,
    "rnn": Rnn,
    "image_tokens": ImageTokens,
    "audio": Audio,
    "output": Output,
    "embeddings": Embeddings,
    "norms": Norms,
    "positions": Positions,
    "attention": AttentionSpec,
}

# Every key that moved into a spec: its flat name, as configs and checkpoints before the specs wrote it -> its place
MOVED = {
    "encoder_d_model": "encoder.d_model",
    "encoder_d_ff": "encoder.d_ff",
    "encoder_n_heads": "encoder.n_heads",
    "encoder_n_kv_heads": "encoder.n_kv_heads",
    "encoder_d_head": "encoder.d_head",
    "cross_n_heads": "cross_attention.n_heads",
    "cross_n_kv_heads": "cross_attention.n_kv_heads",
    "rope_cross": "cross_attention.rope",
    "merged_cross_attention": "cross_attention.merged",
    "n_experts": "experts.count",
    "moe_every": "experts.every",
    "decoder_moe_every": "experts.decoder_every",
    "moe_top_k": "experts.top_k",
    "moe_renormalize": "experts.renormalize",
    "moe_activation": "experts.activation",
    "aux_loss_coef": "experts.aux_loss_coef",
    "z_loss_coef": "experts.z_loss_coef",
    "rnn_cell": "rnn.cell",
    "rnn_attention": "rnn.attention",
    "eoi_token_id": "image_tokens.eoi_token_id",
    "image_token_id": "image_tokens.image_token_id",
    "scale_output": "output.scale",
    "final_logits_bias": "output.logits_bias",
    "logit_softcap": "output.softcap",
    "scale_embeddings": "embeddings.scale",
    "embedding_norm": "embeddings.norm",
    "tie_embeddings": "embeddings.tie",
    "shared_embeddings": "embeddings.shared",
    "norm": "norms.kind",
    "norm_eps": "norms.eps",
    "norm_position": "norms.position",
    "post_norms": "norms.post",
    "position": "positions.kind",
    "max_positions": "positions.max",
    "sinusoidal_layout": "positions.sinusoidal_layout",
    "position_offset": "positions.offset",
    "relative_buckets": "positions.relative_buckets",
    "relative_max_distance": "positions.relative_max_distance",
    "relative_bias_per_layer": "positions.relative_per_layer",
    "rope_theta": "positions.rope_theta",
    "rope_local_theta": "positions.rope_local_theta",
    "rope_scale": "positions.rope_scale",
    "attention_bias": "attention.bias",
    "scale_attention": "attention.scale",
    "attention_scale_dim": "attention.scale_dim",
    "attention_softcap": "attention.softcap",
    "qk_norm": "attention.qk_norm",
    "sliding_window": "attention.sliding_window",
    "global_every": "attention.global_every",
    "sliding_window_layout": "attention.sliding_window_layout",
    "encoder_attention": "attention.encoder",
    "local_radius": "attention.local_radius",
    "global_block_size": "attention.global_block_size",
    "global_tokens": "attention.global_tokens",
}


def moved_to_specs(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` (a model section, a model.json) with each flat key of MOVED in its spec. A key set both ways to
    two values is one ConfigError; a spec given as other than a mapping is left for its check to refuse."""
    moved = {key: value for key, value in values.items() if key not in MOVED}
    for old, place in MOVED.items():
        if old not in values:
            continue
        spec, key = place.split(".")
        nested = moved.get(spec)
        nested = spec_values(nested) if nested is None or dataclasses.is_dataclass(nested) else nested
        if not isinstance(nested, dict):
            raise ConfigError(f"model.{spec} must be a mapping, got {short(nested)}")
        if key in nested and nested[key] != values[old]:
            raise ConfigError(
                f"model.{old} ({short(values[old])}) is the old name of model.{place} ({short(nested[key])}); "
                "set one of them"
            )
        moved[spec] = {**nested, key: values[old]}
    return moved


def overlaid(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over`'s keys on top of `base`'s (a preset's, a pretrained model's section), either shape: a spec's keys on
    top of the base's spec (`experts: {top_k: 2}` or `moe_top_k: 2` keeps the base's count)."""
    base, over = moved_to_specs(base), moved_to_specs(over)
    specs = {
        name: {**spec_values(base.get(name)), **over[name]}
        for name in SPECS
        if isinstance(over.get(name), dict) and isinstance(base.get(name) or {}, dict | SPECS[name])
    }
    return {**base, **over, **specs}


def spec_values(spec: Any) -> dict:
    """A spec's values as a mapping (a spec built already, or none)."""
    return dataclasses.asdict(spec) if dataclasses.is_dataclass(spec) else dict(spec or {})

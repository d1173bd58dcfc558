"""The typed model configuration every family is built from.

Checked when constructed: a wrong value raises `ConfigError` naming the key and
what it allows. Run-time state (step, RNG, data position) never lives here.
A family declares the fields it does not use (its class's `UNUSED`); building it
with one of them set away from its default is refused (`refuse_unused`): a field, a
spec's field ("experts.every") or a whole spec ("rnn").

Settings that belong together are specs of their own (models/config_specs.py: `attention`, `positions`,
`norms`, `embeddings`, `output`, `encoder`, `cross_attention`, `experts`, `rnn`, `image_tokens`, `audio`); configs and
checkpoints written flat before them are read through its one table, MOVED (`from_dict`, a run config's model
section, a model.json, `--set model.rope_theta=`). `cfg.setting("positions.rope_theta")` reads a dotted key,
`cfg.updated(rope_theta=...)` or `cfg.updated(positions={...})` changes one.
"""

from dataclasses import MISSING, Field, asdict, dataclass, field, fields, replace
from typing import Annotated, Literal

from encdec.errors import ConfigError, refuse_unknown_keys
from encdec.models.config_specs import (
    SPECS,
    AttentionSpec,
    Audio,
    CrossAttention,
    Embeddings,
    EncoderWidths,
    Experts,
    ImageTokens,
    Layers,
    Norms,
    Output,
    Positions,
    Rnn,
    moved_to_specs,
    overlaid,
)
from encdec.models.research_config import ResearchOptions
from encdec.schema import Positive, Range, TokenId, check, check_vocabulary, read

# Settings whose default depends on the family: None takes the family's value (T5's for the
# encoder-decoder, nanoGPT's for the causal LMs); a family without an entry does not use the setting.
CAUSAL_LMS = ("ar_encdec", "parallel_encdec", "decoder_only")
SPEECH_FAMILIES = ("whisper",)  # the families whose encoder reads log-mel features, not token ids
FAMILY_DEFAULTS = {
    "attention.scale": {"encoder_decoder": False, "whisper": True, **dict.fromkeys(CAUSAL_LMS, True)},
    "output.scale": {"encoder_decoder": True, "whisper": False, **dict.fromkeys(CAUSAL_LMS, False)},
    "init": {
        "encoder_decoder": "t5",
        "whisper": "normal",
        **dict.fromkeys(CAUSAL_LMS, "normal"),
        "rnn_seq2seq": "normal",
    },
}


# what model.encoder may set apart: its widths (encoder_config) and its vocabulary (source_vocab_size)
ENCODER_WIDTHS = tuple(f.name for f in fields(EncoderWidths) if f.name != "vocab_size")
# Each field's type, allowed values and bounds are declared on it (encdec.schema) and checked when a config
# is made (from YAML, a config.json or Python): a zero or negative size is one sentence, not a traceback or
# a model missing a stack. Counts of modules are bounded here (a million layers of width 16 would take
# minutes to build); how many parameters a model may have is the memory estimate's to say
# (models/weights_memory.py), against what the device has free.


@dataclass
class ModelConfig:
    # whisper: the encoder-decoder reading log-mel features through a convolutional stem (models.whisper)
    family: Literal["encoder_decoder", "ar_encdec", "parallel_encdec", "decoder_only", "rnn_seq2seq", "whisper"] = (
        "encoder_decoder"
    )
    vocab_size: Positive = 32128
    d_model: Positive = 512
    n_heads: Positive = 8
    n_kv_heads: Positive | None = None  # None: n_heads (MHA); 1: MQA; in between: GQA
    d_head: Positive | None = None  # None: d_model // n_heads (T5's d_kv may differ)
    d_ff: Positive = 2048
    n_encoder_layers: Layers = 6
    n_decoder_layers: Layers | None = None  # None: n_encoder_layers (decoder_only: its depth is n_encoder_layers)
    # an encoder of other widths than the decoder (T5Gemma's unbalanced 9B-2B, encoder_config()) or of its own
    # vocabulary (FSMT's); unset: the decoder's
    encoder: EncoderWidths = field(default_factory=EncoderWidths)
    cross_attention: CrossAttention = field(default_factory=CrossAttention)  # its heads, RoPE, or merged
    activation: Literal["relu", "gelu", "gelu_tanh", "silu", "gated_gelu", "swiglu"] = "relu"
    attention: AttentionSpec = field(default_factory=AttentionSpec)  # scaling, caps, biases, windows, LongT5's kinds
    norms: Norms = field(default_factory=Norms)  # their kind and epsilon, before or after each sublayer, or both
    bias: bool = False  # biases in linear layers and LayerNorms
    positions: Positions = field(default_factory=Positions)  # how positions enter: tables, relative bias, RoPE
    embeddings: Embeddings = field(default_factory=Embeddings)  # their scale and norm, tied head, shared table
    output: Output = field(default_factory=Output)  # the logits' scale, fixed bias and cap
    dropout: Annotated[float, Range(0, 1, below=True)] = 0.1
    experts: Experts = field(default_factory=Experts)  # mixtures of experts in place of feed-forwards
    init: Literal["t5", "normal"] | None = None  # "t5": HF T5's scheme; "normal": N(0, 0.02), residuals scaled;
    # None: the family's (T5's for the encoder-decoder, nanoGPT's normal for the causal LMs and the RNN)
    # the Hugging Face model_type an export writes where layouts coincide (mT5's is T5 v1.1's, PLBart's and MVP's
    # BART's): a family of interop.families' registry, which family_for checks; None: the layout's
    hf_model_type: str | None = None
    image_tokens: ImageTokens = field(default_factory=ImageTokens)  # T5Gemma 2's end-of-image and image tokens
    audio: Audio = field(default_factory=Audio)  # the whisper family's log-mel input: mel bins, encoder positions
    # token ids, each below vocab_size (schema.InVocabulary), wherever the config is read from
    pad_id: TokenId = 0
    eos_id: TokenId = 1
    decoder_start_id: TokenId = 0
    research: ResearchOptions = field(default_factory=ResearchOptions)  # ar_encdec, parallel_encdec (SEEDS.md 3-4)
    rnn: Rnn = field(default_factory=Rnn)  # rnn_seq2seq's cell and attention

    def __post_init__(self):
        if isinstance(self.research, dict):
            self.research = ResearchOptions.from_dict(self.research)
        for name, spec in SPECS.items():  # a spec written as a mapping (YAML, JSON, from_dict)
            if isinstance(getattr(self, name), dict):
                setattr(self, name, read(spec, getattr(self, name), f"model.{name}."))
        check(self, "model.")
        for key, by_family in FAMILY_DEFAULTS.items():  # a top-level field ("init") or a spec's ("output.scale")
            spec, _, name = key.rpartition(".")
            owner = getattr(self, spec) if spec else self
            if getattr(owner, name) is None and self.family in by_family:
                value = by_family[self.family]
                if spec:  # a spec of its own, not one another config shares (replace keeps the specs)
                    setattr(self, spec, replace(owner, **{name: value}))
                else:
                    setattr(self, name, value)
        check_vocabulary(ModelConfig, vars(self), self.vocab_size, "model.")
        for name, spec in SPECS.items():
            check_vocabulary(spec, vars(getattr(self, name)), self.vocab_size, f"model.{name}.")
        self.positions.check_relative()
        self.experts.check_top_k()
        if self.family != "rnn_seq2seq":  # the only family without attention
            self._check_heads()
        positions = self.positions
        if positions.kind == "sinusoidal" and positions.sinusoidal_layout == "fairseq" and self.d_model < 4:
            raise ConfigError(
                f"model.positions.sinusoidal_layout fairseq needs d_model of 4 or more, got {self.d_model}"
            )
        if self.family == "encoder_decoder":  # the other families refuse model.encoder (family_rules)
            self._check_encoder_widths()

    def _check_encoder_widths(self) -> None:
        """An encoder of its own widths: a consistent encoder config, a token table of its own where it is of
        another width, and cross-attention apart from self-attention (which reads the decoder's width)."""
        try:
            self.encoder_config()
        except ConfigError as error:
            raise ConfigError(f"the encoder's own widths (model.encoder) do not fit: {error}") from None
        if self.encoder_width != self.d_model and self.embeddings.shared:
            raise ConfigError(
                f"an encoder of width {self.encoder_width} cannot read the decoder's token table of width "
                f"{self.d_model}; set model.embeddings.shared false"
            )
        if self.source_vocab_size != self.vocab_size and self.embeddings.shared:
            raise ConfigError(
                f"an encoder of {self.source_vocab_size} tokens (model.encoder.vocab_size) cannot read the decoder's "
                f"token table of {self.vocab_size}; set model.embeddings.shared false"
            )
        for key in ("pad_id", "eos_id"):  # ids every source may hold
            if getattr(self, key) >= self.source_vocab_size:
                raise ConfigError(
                    f"model.{key} must be below model.encoder.vocab_size ({self.source_vocab_size}), got "
                    f"{getattr(self, key)}: sources hold it"
                )
        one_width = {"cross_attention.merged": self.cross_attention.merged}  # T5Gemma 2's: both stacks read it
        one_width["image_tokens.eoi_token_id"] = self.image_tokens.eoi_token_id
        for key, value in one_width.items():
            if self.encoder_width != self.d_model and value not in (False, None):
                raise ConfigError(f"model.{key} needs an encoder as wide as the decoder (model.encoder.d_model)")

    def _check_heads(self) -> None:
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError(
                f"model.n_heads ({self.n_heads}) must divide model.d_model ({self.d_model}), or set model.d_head"
            )
        cross = self.cross_attention
        for heads, kv, h, k in (
            ("n_heads", "n_kv_heads", self.n_heads, self.n_kv_heads or self.n_heads),
            ("cross_attention.n_heads", "cross_attention.n_kv_heads", self.cross_heads, self.cross_kv_heads),
        ):
            if h % k:
                raise ConfigError(f"model.{kv} ({k}) must divide model.{heads} ({h})")
        if self.cross_heads != self.n_heads and self.d_model % self.cross_heads:  # their own width, d_model split
            raise ConfigError(
                f"model.cross_attention.n_heads ({self.cross_heads}) must divide model.d_model ({self.d_model})"
            )
        if self.positions.kind == "rope" and self.head_dim % 2:
            raise ConfigError(f"RoPE needs an even head dimension, got d_head {self.head_dim}")
        if self.positions.kind == "rope" and cross.rope != "none" and self.cross_head_dim % 2:
            raise ConfigError(
                f"RoPE in cross-attention needs an even head width, got d_model / cross heads = {self.cross_head_dim}; "
                "set model.cross_attention.rope none or other model.cross_attention.n_heads"
            )

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d_model // self.n_heads

    @property
    def encoder_width(self) -> int:
        """The encoder's hidden width: what cross-attention reads its keys and values from."""
        return self.encoder.d_model or self.d_model

    @property
    def source_vocab_size(self) -> int:
        """The encoder's token table's rows, which source ids lie below: its own (FSMT's source vocabulary), else
        the decoder's vocab_size."""
        return self.encoder.vocab_size or self.vocab_size

    def encoder_config(self) -> "ModelConfig":
        """The config the encoder stack is built from: this one with the encoder's own widths (ENCODER_WIDTHS)
        in place of the decoder's, or this one where it sets none. Its token ids are the decoder's: the encoder's
        own vocabulary is source_vocab_size, which its token table alone reads."""
        own = {key: getattr(self.encoder, key) for key in ENCODER_WIDTHS}
        if all(value is None for value in own.values()):
            return self
        changed = {key: value for key, value in own.items() if value is not None}
        if "max_positions" in changed:  # its own position table (LED's), the positions spec's rows
            changed["positions"] = replace(self.positions, max=changed.pop("max_positions"))
        return replace(self, **changed, encoder=EncoderWidths())

    @property
    def cross_heads(self) -> int:
        """Cross-attention's query heads: cross_attention.n_heads, else the family's default (the research
        encoder-decoders' 2 x n_heads, as the seeds' code; n_heads for the others)."""
        default = 2 * self.n_heads if self.family in ("ar_encdec", "parallel_encdec") else self.n_heads
        return self.cross_attention.n_heads or default

    @property
    def cross_kv_heads(self) -> int:
        """Cross-attention's key and value heads: cross_attention.n_kv_heads, else n_kv_heads, else its queries'."""
        return self.cross_attention.n_kv_heads or self.n_kv_heads or self.cross_heads

    @property
    def cross_head_dim(self) -> int:
        """A cross-attention head's width: head_dim, or d_model split among cross heads of their own
        (components.build_attention)."""
        heads = self.cross_heads
        return self.head_dim if heads == self.n_heads else self.d_model // heads

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers or self.n_encoder_layers

    def sliding_layer(self, layer: int) -> bool:
        """Whether a stack's self-attention `layer` (from 0) sees only keys within attention.sliding_window of its
        query: with a window, every layer but each attention.global_every-th (Gemma 2's step 2: layers 0, 2, 4, ...)."""
        attention = self.attention
        return attention.sliding_window is not None and (layer + 1) % attention.global_every != 0

    def setting(self, key: str):
        """A field's value by its dotted name, as refusals and family maps name it: "d_model", "norms.eps"."""
        spec, _, name = key.rpartition(".")
        return getattr(getattr(self, spec) if spec else self, name)

    def moe_layer(self, layer: int, decoder: bool = False) -> bool:
        """Whether a stack's feed-forward `layer` (from 0) is a mixture of experts (Experts.layer)."""
        return self.experts.layer(layer, decoder)

    def updated(self, **changes) -> "ModelConfig":
        """This config with `changes` set, in either shape: a spec's keys over its own (`positions={"rope_scale":
        4.0}` or `rope_scale=4.0` keeps the other positions settings)."""
        return ModelConfig.from_dict(overlaid(self.to_dict(), changes))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        """The config of a mapping, in the specs' shape or the flat one written before them (MOVED)."""
        values = moved_to_specs(values)
        refuse_unknown_keys(values, (f.name for f in fields(cls)), "unknown model key {key!r}")
        return cls(**values)


def default_of(f: Field):
    return f.default_factory() if f.default is MISSING else f.default


def refuse_unused(cfg: ModelConfig, unused: frozenset[str]) -> None:
    """Raise ConfigError, in one sentence, for the first of `unused` that `cfg` sets away from its default: a
    field ("experts", a whole spec) or a spec's field ("experts.every")."""
    for name in sorted(unused, key=ORDER.index):
        spec, _, key = name.rpartition(".")
        owner = getattr(cfg, spec) if spec else cfg
        if getattr(owner, key) != default_of(owner.__dataclass_fields__[key]):
            raise ConfigError(f"model.{name} is not used by the {cfg.family} family; remove it")


# every field and spec field as refuse_unused names them, in declaration order (the first refused is the first)
ORDER = [
    name
    for f in fields(ModelConfig)
    for name in (f.name, *(f"{f.name}.{g.name}" for g in (fields(SPECS[f.name]) if f.name in SPECS else ())))
]

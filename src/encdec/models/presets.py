"""Named model presets: `preset("t5-small")`, `preset("rot5-mini", n_experts=8)`.

A preset is a family (its architecture choices) and a size (its widths and depths).
    transformer  Vaswani et al. 2017: sinusoidal, ReLU, biases, LayerNorm, post-norm
                 (pre-norm with norms.position "pre"), scaled embeddings, tied head
    t5           T5 v1.0: relative bias, ReLU, RMSNorm pre-norm, no bias, no score
                 scaling, tied head with output scaled by d_model^-0.5
    t5-v1.1      gated GELU, untied head, no output scaling (Flan-T5's layout)
    rot5         T5 with RoPE in self- and cross-attention, GQA, GELU; MoE with
                 n_experts > 1 (SEEDS.md section 2)
    ar_encdec, parallel_encdec, decoder_only
                 the seeds' nanoGPT-style causal LMs (SEEDS.md sections 3-5): learned
                 positions, pre-LayerNorm without biases, exact GELU, d_ff 4C, tied head,
                 GPT-2 init, no dropout; ar_encdec and parallel_encdec with the seeds'
                 best options (position subtraction, MSE embedding loss / encoder loss);
                 a `research` override replaces those options as a whole
    rnn_seq2seq  GRU encoder and decoder with Luong attention (seed 002)
    whisper      Radford et al. 2022: log-mels through a convolutional stem and fixed sinusoids, pre-LayerNorm
                 with biases but the keys', exact GELU, learned decoder positions, tied head, Whisper's
                 tokenizer's ids (its sizes are Whisper's: tiny 39M, base, small)

A preset sets only fields its family uses: a family refuses the others (see build_model).
"""

from encdec.errors import ConfigError, suggestion
from encdec.models.config_specs import overlaid
from encdec.models.model_config import ModelConfig

# what Vaswani's Transformer and GPT-2 share, unlike T5: LayerNorm (eps 1e-5), attention scaled by sqrt(d_head),
# a tied head without output scaling, N(0, 0.02) init
LAYERNORM_SCALED = dict(
    norms=dict(kind="layernorm", eps=1e-5),
    attention=dict(scale=True),
    embeddings=dict(tie=True),
    output=dict(scale=False),
    init="normal",
)
FAMILIES = {
    "transformer": dict(
        LAYERNORM_SCALED,
        positions=dict(kind="sinusoidal"),
        activation="relu",
        norms=dict(LAYERNORM_SCALED["norms"], position="post"),
        bias=True,
        embeddings=dict(scale=True, tie=True),
        vocab_size=32000,
    ),
    "t5": dict(positions=dict(kind="relative"), activation="relu", vocab_size=32128),
    "t5-v1.1": dict(
        positions=dict(kind="relative"),
        activation="gated_gelu",
        embeddings=dict(tie=False),
        output=dict(scale=False),
        vocab_size=32128,
    ),
    "rot5": dict(
        positions=dict(kind="rope"), cross_attention=dict(rope="relative"), activation="gelu", vocab_size=32502
    ),
}
GPT = dict(
    LAYERNORM_SCALED, positions=dict(kind="learned"), activation="gelu", bias=False, dropout=0.0, vocab_size=50257
)
FAMILIES.update(
    {
        "ar_encdec": dict(
            GPT,
            family="ar_encdec",
            research=dict(sub_pos_embed="YES_NO_LN", embedding_loss="MSE", embedding_loss_coeff=8.0),
        ),
        "parallel_encdec": dict(
            GPT,
            family="parallel_encdec",
            research=dict(add_pos_embed_to_decoder=True, embedding_loss="MSE", embedding_loss_coeff=0.25),
        ),
        "decoder_only": dict(GPT, family="decoder_only"),
        "whisper": dict(
            LAYERNORM_SCALED,
            family="whisper",
            norms=dict(LAYERNORM_SCALED["norms"], position="pre"),
            attention=dict(scale=True, bias="qvo"),
            bias=True,
            activation="gelu",
            positions=dict(kind="learned", max=448),
            dropout=0.0,
            audio=dict(n_mels=80, max_source_positions=1500),
            vocab_size=51865,
            pad_id=50256,
            eos_id=50256,
            decoder_start_id=50257,
        ),
        "rnn_seq2seq": dict(
            family="rnn_seq2seq",
            rnn=dict(cell="gru", attention=True),
            bias=True,
            init="normal",
            embeddings=dict(tie=True),
            dropout=0.1,
            vocab_size=32000,
        ),
    }
)

# d_model, n_heads, d_head, d_ff, encoder layers, decoder layers, extra
SIZES = {
    "transformer": {
        "tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2),
        "small": dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=4),
        "base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6),  # Vaswani's base
    },
    "t5": {
        "tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2),
        "small": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6),  # t5-small
        "base": dict(d_model=768, n_heads=12, d_ff=3072, n_encoder_layers=12),  # t5-base
    },
    "t5-v1.1": {
        "tiny": dict(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2),
        "small": dict(d_model=512, n_heads=6, d_head=64, d_ff=1024, n_encoder_layers=8),  # t5-v1_1-small
        "base": dict(d_model=768, n_heads=12, d_ff=2048, n_encoder_layers=12),  # t5-v1_1-base
    },
    "rot5": {
        "tiny": dict(d_model=64, n_heads=4, n_kv_heads=2, d_ff=256, n_encoder_layers=2),
        "small": dict(d_model=256, n_heads=8, n_kv_heads=2, d_ff=1024, n_encoder_layers=4),
        "mini": dict(d_model=512, n_heads=16, n_kv_heads=4, d_head=32, d_ff=512, n_encoder_layers=10),  # 46.8M
        "base": dict(d_model=768, n_heads=12, n_kv_heads=4, d_ff=3072, n_encoder_layers=12),  # ~195M
    },
    # the research families: n_encoder_layers is the depth of each side, context max_positions
    "ar_encdec": {
        "tiny": dict(
            d_model=64,
            n_heads=4,
            cross_attention=dict(n_heads=8),
            d_ff=256,
            n_encoder_layers=2,
            positions=dict(max=128),
        ),
        "small": dict(
            d_model=150,
            n_heads=5,
            cross_attention=dict(n_heads=10),
            d_ff=600,
            n_encoder_layers=13,
            positions=dict(max=200),
        ),
    },
    "parallel_encdec": {
        "tiny": dict(
            d_model=64,
            n_heads=4,
            cross_attention=dict(n_heads=8),
            d_ff=256,
            n_encoder_layers=2,
            positions=dict(max=128),
        ),
        "small": dict(
            d_model=200,
            n_heads=5,
            cross_attention=dict(n_heads=10),
            d_ff=800,
            n_encoder_layers=5,
            positions=dict(max=200),
        ),
    },
    "decoder_only": {
        "tiny": dict(d_model=64, n_heads=4, d_ff=256, n_encoder_layers=4, positions=dict(max=128)),
        "small": dict(
            d_model=160, n_heads=10, d_ff=640, n_encoder_layers=26, positions=dict(max=200)
        ),  # seed 000 baseline
    },
    "whisper": {  # Whisper's own sizes (openai/whisper-tiny, -base, -small)
        "tiny": dict(d_model=384, n_heads=6, d_ff=1536, n_encoder_layers=4),
        "base": dict(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=6),
        "small": dict(d_model=768, n_heads=12, d_ff=3072, n_encoder_layers=12),
    },
    "rnn_seq2seq": {
        "tiny": dict(d_model=64, n_encoder_layers=1),
        "small": dict(d_model=256, n_encoder_layers=2),
    },
}


def preset_names() -> list[str]:
    return [f"{family}-{size}" for family, sizes in SIZES.items() for size in sizes]


def preset(name: str, **overrides) -> ModelConfig:
    """The ModelConfig of preset `name` ("family-size"), with `overrides` applied."""
    family, _, size = name.rpartition("-")
    if family not in SIZES or size not in SIZES[family]:
        raise ConfigError(f"unknown model preset {name!r}{suggestion(name, preset_names(), 'presets')}")
    return ModelConfig.from_dict(overlaid(overlaid(FAMILIES[family], SIZES[family][size]), overrides))

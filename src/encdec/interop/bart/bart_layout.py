"""BART's weight layout, which BART, mBART, Marian, Pegasus and M2M100 / NLLB share (each folder adds its
positions, norm placement and defaults): the weight names, the config.json keys both ways and the refusals.

BART (Lewis et al. 2020) is the post-norm Transformer with biases, exact GELU, learned positions looked up at
p + 2, a LayerNorm after the embeddings of each stack (`layernorm_embedding`), a tied head and a fixed
`final_logits_bias`. Marian and Pegasus hold sinusoids whose sines fill the first half of each vector: a model
with the canonical interleaved ones is written with its dimensions reordered sines first (interop.model_dim).
transformers is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_weights_with_shared
from encdec.interop.family import (
    IDS,
    Family,
    NameMap,
    config_read_alone,
    first_set,
    hf_layer_sizes,
    id_keys,
    layer_sizes,
    plain_heads_problems,
    shared_table,
)
from encdec.interop.model_dim import halves_order, permute_model_dim
from encdec.models import EncoderDecoder, ModelConfig
from encdec.models.config_specs import overlaid

# The config.json key each ModelConfig field is read from where the names differ (BART, mBART, Marian, Pegasus)
BART_KEYS = {
    "n_heads": "encoder_attention_heads",
    "d_ff": "encoder_ffn_dim",
    "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers",
    "positions.max": "max_position_embeddings",
    "embeddings.scale": "scale_embedding",
} | IDS
# Hugging Face activation_function -> our activation name, and back (the feed-forward is fc1 -> act -> fc2)
HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "swish": "silu", "silu": "silu", "gelu_new": "gelu_tanh"}
OUR_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "silu": "swish", "gelu_tanh": "gelu_new"}

LAYER = "{side}.blocks.{i}."
HF_LAYER = "model.{side}.layers.{i}."
NAMES = NameMap(
    "BART",
    (
        *shared_table("model.shared.weight"),
        ("lm_head.weight", "lm_head.weight"),
        ("final_logits_bias", "final_logits_bias"),
        ("{side}.positions.weight", "model.{side}.embed_positions.weight"),
        ("{side}.embed_norm.{wb}", "model.{side}.layernorm_embedding.{wb}"),
        ("{side}.final_norm.{wb}", "model.{side}.layer_norm.{wb}"),  # mBART's, Pegasus's, M2M100's
        (LAYER + "self_attn.{qkv}.{wb}", HF_LAYER + "self_attn.{qkv}_proj.{wb}"),
        (LAYER + "self_attn.o.{wb}", HF_LAYER + "self_attn.out_proj.{wb}"),
        (LAYER + "self_attn_norm.{wb}", HF_LAYER + "self_attn_layer_norm.{wb}"),
        ("decoder.blocks.{i}.cross_attn.{qkv}.{wb}", "model.decoder.layers.{i}.encoder_attn.{qkv}_proj.{wb}"),
        ("decoder.blocks.{i}.cross_attn.o.{wb}", "model.decoder.layers.{i}.encoder_attn.out_proj.{wb}"),
        ("decoder.blocks.{i}.cross_attn_norm.{wb}", "model.decoder.layers.{i}.encoder_attn_layer_norm.{wb}"),
        (LAYER + "ffn.wi.{wb}", HF_LAYER + "fc1.{wb}"),
        (LAYER + "ffn.wo.{wb}", HF_LAYER + "fc2.{wb}"),
        (LAYER + "ffn_norm.{wb}", HF_LAYER + "final_layer_norm.{wb}"),
    ),
)


def names_for(cfg: ModelConfig) -> NameMap:
    """Every model's names: the layout has one table."""
    return NAMES


def layout_config(hf: dict, untied_head: bool, **family) -> ModelConfig:
    """The ModelConfig of a BART-layout checkpoint; `family` adds the position scheme and may set others over
    BART's (a spec's keys over its: `output={"logits_bias": False}`)."""
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(dec, hf[enc]) != hf[enc]:
            raise CheckpointError(f"{enc} ({hf[enc]}) differs from {dec} ({hf[dec]}), which encdec does not support")
    activation = hf.get("activation_function", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"activation_function {activation!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}"
        )
    eos = hf.get("eos_token_id", 2)
    bart = dict(
        **layer_sizes(hf, BART_KEYS),
        activation=HF_ACTIVATIONS[activation],
        norms={"kind": "layernorm", "eps": 1e-5, "position": "post"},
        bias=True,
        attention={"scale": True},
        positions={"max": hf.get("max_position_embeddings", 1024)},
        # scale as given: ModelConfig's declaration checks it
        embeddings={"scale": hf.get("scale_embedding", False), "tie": not untied_head},
        output={"scale": False, "logits_bias": True},
        dropout=hf.get("dropout", 0.1),
        init="normal",
        pad_id=hf.get("pad_token_id", 1),
        eos_id=eos if isinstance(eos, int) else eos[0],
        decoder_start_id=first_set(hf.get("decoder_start_token_id"), hf.get("bos_token_id"), 2),  # HF's fallback
    )
    return ModelConfig.from_dict(overlaid(bart, family))


def load_layout(
    path: Path, cfg_from_hf, hf_config: dict, names: NameMap = NAMES, prefix: str = "model."
) -> EncoderDecoder:
    """Read the weights, build the model `cfg_from_hf(hf_config, untied)` describes, and fill it by `names` (a
    family's own, whose model's modules are under `prefix`: LED's led.)."""
    check_hf_model_fits(cfg_from_hf(hf_config, True), path)
    weights = read_weights_with_shared(path, prefix=prefix)
    head = weights.get("lm_head.weight")
    untied = head is not None and not torch.equal(head, weights.get(f"{prefix}shared.weight", head))
    model = EncoderDecoder(cfg_from_hf(hf_config, untied))
    return fill_from_hf(model, weights, names.hf, path, reshaped=("final_logits_bias",))


def layout_problems(cfg: ModelConfig, norm_position: str, decoder_norm_first: bool = False) -> list[str]:
    """What keeps `cfg` from the layout BART, mBART, Marian and Pegasus share, positions and norm placement aside:
    `norm_position` the family's, `decoder_norm_first` where its decoder's embedding norm sits (BlenderbotSmall's:
    before the positions)."""
    problems = {
        "norms.kind must be layernorm": cfg.norms.kind != "layernorm",
        "norms.eps must be 1e-05": cfg.norms.eps != 1e-5,
        f"norms.position must be {norm_position}": cfg.norms.position != norm_position,
        f"embeddings.decoder_norm_first must be {str(decoder_norm_first).lower()}": (
            cfg.embeddings.decoder_norm_first != decoder_norm_first
        ),
        "bias must be true": not cfg.bias,
        "attention.scale must be true": not cfg.attention.scale,
        f"activation must be one of {', '.join(OUR_ACTIVATIONS)}, got {cfg.activation}": cfg.activation
        not in OUR_ACTIVATIONS,
        **plain_heads_problems(cfg),
        "d_head must be d_model / n_heads": cfg.head_dim * cfg.n_heads != cfg.d_model,
        "output.scale must be false": cfg.output.scale,
        "experts.count must be 1": cfg.experts.count != 1,
    }
    return [text for text, bad in problems.items() if bad]


def layout_hf_config(cfg: ModelConfig) -> dict:
    """The config.json keys BART and Marian share."""
    return {
        **hf_layer_sizes(cfg, BART_KEYS),
        "decoder_attention_heads": cfg.n_heads,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": OUR_ACTIVATIONS[cfg.activation],
        "max_position_embeddings": cfg.positions.max,
        "scale_embedding": cfg.embeddings.scale,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.dropout,
        "activation_dropout": cfg.dropout,
        "tie_word_embeddings": cfg.embeddings.tie,
        "is_encoder_decoder": True,
        **id_keys(cfg),
        "forced_eos_token_id": None,  # both classes default to forcing EOS at the length limit; encdec does not
    }


def layout_weights(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict under BART / Marian names, with the logits bias and a head HF can read."""
    weights = {NAMES.hf(name): t.detach().cpu().contiguous() for name, t in state.items()}
    for side in ("encoder", "decoder"):  # HF's learned table has 2 rows before position 0
        key = f"model.{side}.embed_positions.weight"
        if key in weights:
            table, offset = weights[key], cfg.positions.offset
            table = table[max(offset - 2, 0) :]
            weights[key] = torch.cat([table.new_zeros(max(2 - offset, 0), table.shape[1]), table])
    bias = weights.pop("final_logits_bias", torch.zeros(cfg.vocab_size))
    weights["final_logits_bias"] = bias.reshape(1, -1).contiguous()
    if not cfg.embeddings.tie:  # with tie_word_embeddings false transformers ties no embeddings at all
        for side in ("encoder", "decoder"):
            weights[f"model.{side}.embed_tokens.weight"] = weights["model.shared.weight"].clone()
    return weights


def check_layout(
    cfg: ModelConfig,
    family: str,
    embeddings: dict[str, bool],
    norm_position: str = "post",
    decoder_norm_first: bool = False,
) -> None:
    """Raise ConfigError (Unmet) naming the settings `family` cannot express: its own embedding checks
    (positions, embedding norm) first, then those of the layout the BART family shares (layout_problems)."""
    problems = [text for text, bad in embeddings.items() if bad] + layout_problems(
        cfg, norm_position, decoder_norm_first
    )
    if problems:
        raise Unmet(f"this model cannot be saved as Hugging Face {family}: " + "{unmet}", problems)


def sinusoidal_embedding_problems(cfg: ModelConfig) -> dict[str, bool]:
    """What keeps `cfg`'s embeddings from Marian's and Pegasus's sines-first sinusoids."""
    return {
        "positions.kind must be sinusoidal": cfg.positions.kind != "sinusoidal",
        "positions.sinusoidal_layout must be interleaved or halves (fairseq's is M2M100's)": cfg.positions.sinusoidal_layout
        == "fairseq",
        "embeddings.norm must be false": cfg.embeddings.norm,
    }


def fairseq_positions(cfg: ModelConfig) -> bool:
    """Whether `cfg` has fairseq's sinusoidal positions (M2M100's, NLLB-MoE's, FSMT's)."""
    return cfg.positions.kind == "sinusoidal" and cfg.positions.sinusoidal_layout == "fairseq"


def fairseq_embedding_problems(cfg: ModelConfig) -> dict[str, bool]:
    """What keeps `cfg`'s embeddings from fairseq's (M2M100's, FSMT's): its sinusoids, no embedding norm, no logits
    bias."""
    return {
        "positions.kind must be sinusoidal with positions.sinusoidal_layout fairseq": not fairseq_positions(cfg),
        "embeddings.norm must be false": cfg.embeddings.norm,
        "output.logits_bias must be false": cfg.output.logits_bias,
    }


def learned_from_zero_problems(cfg: ModelConfig, embedding_norm: bool) -> dict[str, bool]:
    """What keeps `cfg`'s embeddings from Blenderbot's and BlenderbotSmall's: learned positions from 0, with or
    without an embedding norm."""
    return {
        "positions.kind must be learned with positions.offset 0": cfg.positions.kind != "learned"
        or cfg.positions.offset != 0,
        f"embeddings.norm must be {str(embedding_norm).lower()}": cfg.embeddings.norm != embedding_norm,
    }


def sinusoidal_weights(model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """A model with sinusoidal positions (either layout) as BART-layout weights, its dimensions sines first."""
    cfg, state = model.config, model.state_dict()
    if cfg.positions.sinusoidal_layout == "interleaved":
        state = permute_model_dim(state, halves_order(cfg.d_model))
    return layout_weights(state, cfg)


def vaswani_sinusoids(cfg: ModelConfig) -> bool:
    """Sinusoidal positions Marian and Pegasus write (interleaved or halves); fairseq's are M2M100's."""
    return cfg.positions.kind == "sinusoidal" and cfg.positions.sinusoidal_layout != "fairseq"


def named_family(model_type: str, hf_class: str, name: str, config_from_hf, tokenizer_files: tuple[str, ...]) -> Family:
    """A family whose checkpoints are BART's layout exactly (PLBart, MVP), `name` in its refusals: nothing in the
    layout tells it from BART, so `config_from_hf` reads it with hf_model_type `model_type`, which alone makes a
    model written as this family (interop.families.family_for)."""

    def check(cfg: ModelConfig) -> None:
        learned = cfg.positions.kind != "learned" or cfg.positions.offset != 2
        embeddings = {"positions.kind must be learned with positions.offset 2": learned}
        check_layout(cfg, name, embeddings | {"embeddings.norm must be true": not cfg.embeddings.norm})

    return Family(
        model_type,
        hf_class,
        lambda path, hf_config: load_layout(path, config_from_hf, hf_config),
        check,
        lambda model: (layout_weights(model.state_dict(), model.config), layout_hf_config(model.config)),
        lambda cfg: cfg.hf_model_type == model_type,
        BART_KEYS,
        tokenizer_files,
        config_read_alone(config_from_hf),
        names=names_for,
    )

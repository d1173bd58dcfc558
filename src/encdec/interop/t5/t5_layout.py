"""T5's layout, which T5, mT5, UMT5, LongT5 and SwitchTransformers share (each folder adds its own): the weight
names, the config.json keys both ways, the refusals and the loader.

T5 (Raffel et al. 2020) in the v1.0 layout (ReLU, tied head scaled by d_model^-0.5) and the v1.1 / Flan-T5
layout (gated GELU, untied head): pre-norm RMSNorm without biases, a relative position bias in each stack's first
layer, one token table both stacks share. transformers itself is not needed.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError, Unmet
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_weights_with_shared
from encdec.interop.family import IDS, NameMap, hf_layer_sizes, id_keys, layer_sizes, plain_heads_problems, shared_table
from encdec.models import EncoderDecoder, ModelConfig
from encdec.models.config_specs import overlaid

# Hugging Face feed_forward_proj -> our activation name
HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gated-gelu": "gated_gelu",
    "gated-gelu_new": "gated_gelu",
    "gated-silu": "swiglu",
}
OUR_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_new",
    "gated_gelu": "gated-gelu",
    "swiglu": "gated-silu",
}

# The config.json key each ModelConfig field is read from where the names differ, so that a refused value is
# named as the file names it too (SwitchTransformers shares them)
T5_KEYS = {
    "d_head": "d_kv",
    "n_heads": "num_heads",
    "n_encoder_layers": "num_layers",
    "n_decoder_layers": "num_decoder_layers",
    "positions.relative_buckets": "relative_attention_num_buckets",
    "positions.relative_max_distance": "relative_attention_max_distance",
    "dropout": "dropout_rate",
    "norms.eps": "layer_norm_epsilon",
    "experts.count": "num_experts",
} | IDS

NAMES = NameMap(
    "T5",
    (
        *shared_table("shared.weight"),
        ("lm_head.weight", "lm_head.weight"),
        ("{side}.position_bias.embed.weight", "{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        ("{side}.final_norm.weight", "{side}.final_layer_norm.weight"),
        ("{side}.blocks.{i}.self_attn.{qkvo}.weight", "{side}.block.{i}.layer.0.SelfAttention.{qkvo}.weight"),
        ("{side}.blocks.{i}.self_attn_norm.weight", "{side}.block.{i}.layer.0.layer_norm.weight"),
        ("decoder.blocks.{i}.cross_attn.{qkvo}.weight", "decoder.block.{i}.layer.1.EncDecAttention.{qkvo}.weight"),
        ("decoder.blocks.{i}.cross_attn_norm.weight", "decoder.block.{i}.layer.1.layer_norm.weight"),
        ("encoder.blocks.{i}.ffn.{wi}.weight", "encoder.block.{i}.layer.1.DenseReluDense.{wi}.weight"),
        ("encoder.blocks.{i}.ffn_norm.weight", "encoder.block.{i}.layer.1.layer_norm.weight"),
        ("decoder.blocks.{i}.ffn.{wi}.weight", "decoder.block.{i}.layer.2.DenseReluDense.{wi}.weight"),
        ("decoder.blocks.{i}.ffn_norm.weight", "decoder.block.{i}.layer.2.layer_norm.weight"),
    ),
)


def config_from_hf(hf: dict, untied_head: bool, **fields) -> ModelConfig:
    """The ModelConfig of a T5 config.json; `fields` are those of a family built on T5's layout (mT5's, UMT5's)."""
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in HF_ACTIVATIONS:
        raise CheckpointError(f"unsupported T5 feed_forward_proj {proj!r}; supported: {', '.join(HF_ACTIVATIONS)}")
    tie_flag = hf.get("tie_word_embeddings", True)
    t5 = dict(
        **layer_sizes(hf, T5_KEYS),
        d_head=hf["d_kv"],
        positions={
            "kind": "relative",
            "relative_buckets": hf.get("relative_attention_num_buckets", 32),
            "relative_max_distance": hf.get("relative_attention_max_distance", 128),
        },
        dropout=hf.get("dropout_rate", 0.1),
        norms={"eps": hf.get("layer_norm_epsilon", 1e-6)},
        activation=HF_ACTIVATIONS[proj],
        embeddings={"tie": not untied_head},
        output={"scale": hf.get("scale_decoder_outputs", tie_flag is not False)},
        pad_id=hf.get("pad_token_id", 0),
        eos_id=hf.get("eos_token_id", 1) if isinstance(hf.get("eos_token_id", 1), int) else hf["eos_token_id"][0],
        decoder_start_id=hf.get("decoder_start_token_id", hf.get("pad_token_id", 0)),
    )
    return ModelConfig.from_dict(overlaid(t5, fields))


def load_hf_t5(path: Path, hf_config: dict, rename=NAMES.hf, **fields) -> EncoderDecoder:
    """A directory of T5's layout, its head untied where lm_head differs from the token table; a family built on
    it (mT5, UMT5) gives its ModelConfig `fields` and its names' `rename`."""
    check_hf_model_fits(config_from_hf(hf_config, untied_head=True, **fields), path)
    weights = read_weights_with_shared(path)
    head = weights.get("lm_head.weight")
    untied = head is not None and not torch.equal(head, weights["shared.weight"])
    model = EncoderDecoder(config_from_hf(hf_config, untied, **fields))
    return fill_from_hf(model, weights, rename, path)


def layout_problems(cfg: ModelConfig) -> list[str]:
    """What keeps `cfg` from T5's layout (attention, norms, positions, head), feed-forward kind aside."""
    problems = {
        "positions.kind must be relative": cfg.positions.kind != "relative",
        "norms.kind must be rmsnorm": cfg.norms.kind != "rmsnorm",
        "norms.position must be pre": cfg.norms.position != "pre",
        "bias must be false": cfg.bias,
        "attention.scale must be false": cfg.attention.scale,
        "embeddings.scale must be false": cfg.embeddings.scale,
        **plain_heads_problems(cfg),
        "an untied head cannot have scaled output": not cfg.embeddings.tie and cfg.output.scale,
        "embeddings.norm must be false": cfg.embeddings.norm,
        "output.logits_bias must be false": cfg.output.logits_bias,
        "positions.relative_per_layer must be false (a bias in every layer is UMT5's)": cfg.positions.relative_per_layer,
        "attention.encoder must be full (local and transient-global are LongT5's)": cfg.attention.encoder != "full",
    }
    return [text for text, bad in problems.items() if bad]


def check_t5_compatible(cfg: ModelConfig, family: str = "T5") -> None:
    """Raise ConfigError unless `cfg` is expressible as a Hugging Face T5 config (or one of `family`, built on it)."""
    failed = layout_problems(cfg) + (["experts.count must be 1"] if cfg.experts.count != 1 else [])
    if cfg.activation not in OUR_ACTIVATIONS:
        failed.append(f"activation must be one of {', '.join(OUR_ACTIVATIONS)}")
    if failed:
        raise Unmet(f"this model cannot be saved as Hugging Face {family}: " + "{unmet}", failed)


def layout_weights(model: EncoderDecoder, names: NameMap) -> dict[str, torch.Tensor]:
    """The model's tensors under their Hugging Face names (T5 and SwitchTransformers share the layout)."""
    cfg = model.config
    weights = names.weights(model)
    if cfg.embeddings.tie and not cfg.output.scale:  # tied but unscaled: HF expresses it as an equal untied head
        weights["lm_head.weight"] = weights["shared.weight"].clone()
    return weights


def layout_config(cfg: ModelConfig) -> dict:
    """The config.json keys T5's layout writes, each under the name T5_KEYS reads it by."""
    plain = ("positions.relative_buckets", "positions.relative_max_distance", "dropout", "norms.eps")
    return {
        **hf_layer_sizes(cfg, T5_KEYS),
        T5_KEYS["d_head"]: cfg.head_dim,
        **{T5_KEYS[field]: cfg.setting(field) for field in plain},
        "tie_word_embeddings": cfg.output.scale,  # HF ties the head and scales the output together
        "is_encoder_decoder": True,
        **id_keys(cfg),
    }


def deeper_decoder(cfg: ModelConfig) -> str | None:
    """The warning an export of T5's layout logs where the decoder is the deeper stack."""
    if cfg.decoder_layers > cfg.n_encoder_layers:
        return (
            "the decoder is deeper than the encoder: transformers' generate() sizes its cache by the "
            "encoder (num_layers) and fails; its forward() is unaffected"
        )
    return None


def t5_bias(cfg: ModelConfig) -> bool:
    """T5's relative bias, in each stack's first layer (UMT5's is in every layer)."""
    return cfg.positions.kind == "relative" and not cfg.positions.relative_per_layer

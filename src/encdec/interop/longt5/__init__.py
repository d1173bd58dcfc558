"""Hugging Face LongT5 checkpoints <-> encdec's encoder-decoder with a local or transient-global encoder.

LongT5 (Guo et al. 2022) is T5 v1.1 whose encoder self-attention sees only keys within `local_radius` of each
query ("local"), or those and one key per `global_block_size` tokens made from the block's summed inputs
("transient-global"): encdec's attention.encoder local / transient_global (modules.transient_global). Its
decoder is T5's. transformers splits the input into blocks of local_radius + 1 tokens, each seeing its own and
its two neighbours' under a mask of |q - k| <= local_radius: the keys encdec's band mask leaves, so the
arithmetic agrees. The names are T5's with the encoder's attention module renamed (LocalSelfAttention,
TransientGlobalSelfAttention), the global keys' bias in its first layer and a norm of them in every layer.

transformers 5 ties LongT5's head to the token table whatever config.json says (tie_word_embeddings false
means only "do not scale the output", as in T5 v1.1): a model with a head of its own is refused at export.
transformers itself is not needed.
"""

from dataclasses import replace
from pathlib import Path

import torch

from encdec.errors import CheckpointError, ConfigError
from encdec.interop.family import Family, NameMap
from encdec.interop.t5.t5_layout import (
    NAMES,
    OUR_ACTIVATIONS,
    T5_KEYS,
    check_t5_compatible,
    config_from_hf,
    layout_config,
    layout_weights,
    load_hf_t5,
)
from encdec.models import EncoderDecoder, ModelConfig

# config.json's encoder_attention_type -> ours, and the module transformers names each attention's weights by
HF_ATTENTION = {"local": "local", "transient-global": "transient_global"}
OUR_ATTENTION = {ours: theirs for theirs, ours in HF_ATTENTION.items()}
MODULES = {"local": "LocalSelfAttention", "transient_global": "TransientGlobalSelfAttention"}


def longt5_names(attention: str) -> NameMap:
    """T5's names with the encoder's self-attention under `attention`'s module, and its global keys' weights."""
    module = f"encoder.block.{{i}}.layer.0.{MODULES[attention]}."
    first = module.replace("{i}", "0")
    return NAMES.plus(
        "LongT5",
        ("encoder.position_bias.embed.weight", first + "relative_attention_bias.weight"),
        ("encoder.global_bias.embed.weight", first + "global_relative_attention_bias.weight"),
        ("encoder.blocks.{i}.self_attn.global_norm.weight", module + "global_input_layer_norm.weight"),
        ("encoder.blocks.{i}.self_attn.{qkvo}.weight", module + "{qkvo}.weight"),
    )


def longt5_fields(hf_config: dict) -> dict:
    """The ModelConfig fields of LongT5's encoder attention (model.attention), from its config.json."""
    kind = hf_config.get("encoder_attention_type", "local")
    if kind not in HF_ATTENTION:
        raise CheckpointError(f"unsupported LongT5 encoder_attention_type {kind!r}; supported: local, transient-global")
    attention = {"encoder": HF_ATTENTION[kind], "local_radius": hf_config.get("local_radius", 127)}
    if kind == "transient-global":
        attention["global_block_size"] = hf_config.get("global_block_size", 16)
    return {"attention": attention}


def load_hf_longt5(path: Path, hf_config: dict) -> EncoderDecoder:
    fields = longt5_fields(hf_config)
    return load_hf_t5(path, hf_config, longt5_names(fields["attention"]["encoder"]).hf, **fields)


def longt5_model_config(hf_config: dict) -> ModelConfig:
    """A LongT5 config.json's ModelConfig, no weight read (encdec size): the head tied, as transformers ties it."""
    return config_from_hf(hf_config, False, **longt5_fields(hf_config))


def check_longt5_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming what LongT5 cannot express: a full encoder attention, a head of its own, T5's."""
    if cfg.attention.encoder == "full":
        raise ConfigError(
            "this model cannot be saved as Hugging Face LongT5: it needs attention.encoder local or transient_global"
        )
    if not cfg.embeddings.tie:
        raise ConfigError(
            "this model cannot be saved as Hugging Face LongT5: transformers ties its head to the "
            "token table, and this model has a head of its own"
        )
    plain = replace(cfg.attention, encoder="full", local_radius=127, global_block_size=16)  # the defaults: T5's
    check_t5_compatible(replace(cfg, attention=plain), "LongT5")


def longt5_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    cfg = model.config
    config = {
        **layout_config(cfg),
        "feed_forward_proj": OUR_ACTIVATIONS[cfg.activation],
        "encoder_attention_type": OUR_ATTENTION[cfg.attention.encoder],
        "local_radius": cfg.attention.local_radius,
        "global_block_size": cfg.attention.global_block_size,
    }
    return layout_weights(model, longt5_names(cfg.attention.encoder)), config


FAMILIES = (
    Family(
        "longt5",
        "LongT5ForConditionalGeneration",
        load_hf_longt5,
        check_longt5_compatible,
        longt5_files,
        lambda cfg: cfg.attention.encoder != "full",
        T5_KEYS | {"attention.encoder": "encoder_attention_type"},
        ("spiece.model",),
        longt5_model_config,
        names=lambda cfg: longt5_names(cfg.attention.encoder),
    ),
)

"""Hugging Face mT5 and UMT5 checkpoints <-> encdec's encoder-decoder: T5 v1.1's layout, read and written
through T5's names and config keys (interop/t5/t5_layout.py), with what each family changes.

mT5 (Xue et al. 2021) is T5 v1.1 over a multilingual vocabulary. transformers' MT5ForConditionalGeneration
never scales the decoder output before the head, whatever tie_word_embeddings says, while a T5 of the same
config.json scales it by d_model^-0.5 unless that key is false (transformers writes it true): read as T5,
a tied mT5 came out with logits some 22 apart. An mT5 is read with output.scale false and
hf_model_type "mt5", which exports it back as MT5ForConditionalGeneration although T5 computes the same.

UMT5 (Chung et al. 2023) gives every self-attention layer a relative bias of its own, not only each stack's
first (relative_bias_per_layer: encdec's `layer_biases`), and scales the output as T5 does
(scale_decoder_outputs, else tie_word_embeddings not false). transformers itself is not needed.
"""

from dataclasses import replace
from pathlib import Path

import torch

from encdec.errors import ConfigError
from encdec.interop.family import Family
from encdec.interop.t5 import t5_layout
from encdec.models import EncoderDecoder, ModelConfig

# T5's names, each self-attention layer's bias where T5 has the first layer's alone
UMT5_NAMES = t5_layout.NAMES.where(lambda ours, theirs: "position_bias" not in ours, "UMT5").plus(
    "UMT5",
    ("{side}.layer_biases.{i}.embed.weight", "{side}.block.{i}.layer.0.SelfAttention.relative_attention_bias.weight"),
)


def load_hf_mt5(path: Path, hf_config: dict) -> EncoderDecoder:
    """An mT5 directory: T5's layout, the output never scaled (MT5ForConditionalGeneration has no scaling)."""
    return t5_layout.load_hf_t5(path, {**hf_config, "scale_decoder_outputs": False}, hf_model_type="mt5")


def load_hf_umt5(path: Path, hf_config: dict) -> EncoderDecoder:
    """A UMT5 directory: T5's layout with a relative bias in every self-attention layer."""
    return t5_layout.load_hf_t5(path, hf_config, UMT5_NAMES.hf, positions={"relative_per_layer": True})


def mt5_model_config(hf_config: dict) -> ModelConfig:
    """An mT5 config.json's ModelConfig, no weight read (encdec size): the head untied where
    tie_word_embeddings is false, as the released checkpoints say."""
    untied = hf_config.get("tie_word_embeddings", True) is False
    return t5_layout.config_from_hf({**hf_config, "scale_decoder_outputs": False}, untied, hf_model_type="mt5")


def umt5_model_config(hf_config: dict) -> ModelConfig:
    """A UMT5 config.json's ModelConfig, no weight read (encdec size): the head untied where tie_word_embeddings
    or scale_decoder_outputs is false (transformers 5 writes the first true whatever the head, the second false
    for an unscaled one: every released UMT5)."""
    untied = False in (hf_config.get("tie_word_embeddings"), hf_config.get("scale_decoder_outputs"))
    return t5_layout.config_from_hf(hf_config, untied, positions={"relative_per_layer": True})


def check_mt5_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the first setting mT5 cannot express: T5's, an output scaling it lacks."""
    if cfg.output.scale:
        raise ConfigError("this model cannot be saved as Hugging Face mT5: mT5 never scales its output")
    t5_layout.check_t5_compatible(cfg, "mT5")


def check_umt5_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming what UMT5 cannot express: T5's refusals for a model with a bias per layer."""
    if not cfg.positions.relative_per_layer:
        raise ConfigError("this model cannot be saved as Hugging Face UMT5: it needs relative_bias_per_layer")
    t5_layout.check_t5_compatible(replace(cfg, positions=replace(cfg.positions, relative_per_layer=False)), "UMT5")


def mt5_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """T5's weights and config keys, tie_word_embeddings saying whether the head is the token table (which
    mT5 never scales, so it needs no scaling flag)."""
    cfg = model.config
    config = {**t5_layout.layout_config(cfg), "feed_forward_proj": t5_layout.OUR_ACTIVATIONS[cfg.activation]}
    return t5_layout.layout_weights(model, t5_layout.NAMES), {**config, "tie_word_embeddings": cfg.embeddings.tie}


def umt5_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A per-layer-bias model's weights under UMT5's names and its config.json keys (T5's, the scaling said
    twice as transformers writes it)."""
    cfg = model.config
    config = {**t5_layout.layout_config(cfg), "feed_forward_proj": t5_layout.OUR_ACTIVATIONS[cfg.activation]}
    return t5_layout.layout_weights(model, UMT5_NAMES), {**config, "scale_decoder_outputs": cfg.output.scale}


FAMILIES = (
    Family(
        "mt5",
        "MT5ForConditionalGeneration",
        load_hf_mt5,
        check_mt5_compatible,
        mt5_files,
        lambda cfg: cfg.hf_model_type == "mt5",
        t5_layout.T5_KEYS,
        ("spiece.model",),
        mt5_model_config,
        names=lambda cfg: t5_layout.NAMES,
        note=t5_layout.deeper_decoder,
    ),
    Family(
        "umt5",
        "UMT5ForConditionalGeneration",
        load_hf_umt5,
        check_umt5_compatible,
        umt5_files,
        lambda cfg: cfg.positions.kind == "relative" and cfg.positions.relative_per_layer,
        t5_layout.T5_KEYS,
        ("spiece.model",),
        umt5_model_config,
        names=lambda cfg: UMT5_NAMES,
        note=t5_layout.deeper_decoder,
    ),
)

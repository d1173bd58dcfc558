"""Hugging Face T5 (model_type t5: T5ForConditionalGeneration, v1.0 and v1.1 / Flan-T5) <-> encdec's
encoder-decoder with T5's relative bias; the layout the T5 group shares is t5_layout.py's."""

import torch

from encdec.interop.family import Family, config_read_alone
from encdec.interop.t5.t5_layout import (
    NAMES,
    OUR_ACTIVATIONS,
    T5_KEYS,
    check_t5_compatible,
    config_from_hf,
    deeper_decoder,
    layout_config,
    layout_weights,
    load_hf_t5,
    t5_bias,
)
from encdec.models import EncoderDecoder, ModelConfig


def t5_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A T5-compatible model's weights under Hugging Face's names and its config.json keys."""
    config = {**layout_config(model.config), "feed_forward_proj": OUR_ACTIVATIONS[model.config.activation]}
    return layout_weights(model, NAMES), config


def writes_t5(cfg: ModelConfig) -> bool:
    """T5's bias, a dense feed-forward, a full encoder attention, not read from mT5."""
    return t5_bias(cfg) and cfg.experts.count == 1 and cfg.hf_model_type is None and cfg.attention.encoder == "full"


FAMILIES = (
    Family(
        "t5",
        "T5ForConditionalGeneration",
        load_hf_t5,
        check_t5_compatible,
        t5_files,
        writes_t5,
        T5_KEYS,
        ("spiece.model",),
        config_read_alone(config_from_hf),
        names=lambda cfg: NAMES,
        note=deeper_decoder,
    ),
)

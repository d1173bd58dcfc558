"""Hugging Face Pegasus (model_type pegasus) <-> encdec's pre-norm encoder-decoder with sinusoidal positions.

Pegasus (Zhang et al. 2020) is Marian's layout (sines in the first half of each position vector, no embedding
LayerNorm) made pre-norm, with a LayerNorm closing each stack: the pre-norm Transformer (`norms.position: pre`)
exactly, so that is how it leaves encdec. Its defaults: pad 0 (also the decoder start), EOS 1.
"""

from pathlib import Path

import torch

from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig


def pegasus_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    hf = {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0, **hf}
    return bart_layout.layout_config(
        hf, untied_head, positions={"kind": "sinusoidal", "sinusoidal_layout": "halves"}, norms={"position": "pre"}
    )


def load_hf_pegasus(path: Path, hf_config: dict) -> EncoderDecoder:
    return bart_layout.load_layout(path, pegasus_config_from_hf, hf_config)


def check_pegasus_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings Pegasus's layout does not have."""
    bart_layout.check_layout(cfg, "Pegasus", bart_layout.sinusoidal_embedding_problems(cfg), norm_position="pre")


def pegasus_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A pre-norm model with sinusoidal positions (either layout) as Pegasus's weights and config.json keys."""
    return bart_layout.sinusoidal_weights(model), bart_layout.layout_hf_config(model.config)


FAMILIES = (
    Family(
        "pegasus",
        "PegasusForConditionalGeneration",
        load_hf_pegasus,
        check_pegasus_compatible,
        pegasus_files,
        lambda cfg: bart_layout.vaswani_sinusoids(cfg) and cfg.norms.position == "pre",
        bart_layout.BART_KEYS,
        ("spiece.model",),
        config_read_alone(pegasus_config_from_hf),
        names=bart_layout.names_for,
    ),
)

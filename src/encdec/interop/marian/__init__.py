"""Hugging Face MarianMT (model_type marian: Helsinki-NLP/opus-mt-*) <-> encdec's post-norm encoder-decoder with
sinusoidal positions.

Marian (Junczys-Dowmunt et al. 2018) has BART's weight layout (interop/bart/bart_layout.py) with fixed sinusoidal
positions whose sines fill the first half of each vector and cosines the second, no embedding LayerNorm, usually a
SiLU ("swish") feed-forward and embeddings scaled by sqrt(d_model); pad is the decoder-start token.

The canonical Transformer (Vaswani et al. 2017) interleaves its sines and cosines instead: such a model is written
as Marian with its dimensions reordered sin-first (interop.model_dim): the exported weights are a permutation of
ours, not a copy.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError
from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig


def marian_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    decoder_vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
    if decoder_vocab != hf["vocab_size"] or hf.get("share_encoder_decoder_embeddings") is False:
        raise CheckpointError("this Marian checkpoint has separate source and target vocabularies, not supported yet")
    hf = {"pad_token_id": 58100, "eos_token_id": 0, "decoder_start_token_id": 58100, **hf}
    return bart_layout.layout_config(hf, untied_head, positions={"kind": "sinusoidal", "sinusoidal_layout": "halves"})


def load_hf_marian(path: Path, hf_config: dict) -> EncoderDecoder:
    return bart_layout.load_layout(path, marian_config_from_hf, hf_config)


def check_marian_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings Marian's layout does not have."""
    bart_layout.check_layout(cfg, "Marian", bart_layout.sinusoidal_embedding_problems(cfg))


def marian_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A post-norm model with sinusoidal positions (either layout) as MarianMTModel's weights and config keys."""
    cfg = model.config
    config = {
        **bart_layout.layout_hf_config(cfg),
        "decoder_vocab_size": cfg.vocab_size,
        "share_encoder_decoder_embeddings": True,
    }
    return bart_layout.sinusoidal_weights(model), config


FAMILIES = (
    Family(
        "marian",
        "MarianMTModel",
        load_hf_marian,
        check_marian_compatible,
        marian_files,
        lambda cfg: bart_layout.vaswani_sinusoids(cfg) and cfg.norms.position == "post",
        bart_layout.BART_KEYS,
        ("source.spm", "target.spm", "vocab.json"),
        config_read_alone(marian_config_from_hf),
        names=bart_layout.names_for,
    ),
)

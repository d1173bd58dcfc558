"""Hugging Face BART and mBART (model_types bart, mbart) <-> encdec's encoder-decoder with learned positions.

BART (Lewis et al. 2020): post-norm, learned positions looked up at p + 2, a LayerNorm after each stack's
embeddings. mBART (Liu et al. 2020) is the same made pre-norm, with a LayerNorm closing each stack. The weight
layout, which Marian, Pegasus and M2M100 share, is bart_layout.py's.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError
from encdec.interop.bart.bart_layout import (
    BART_KEYS,
    check_layout,
    layout_config,
    layout_hf_config,
    layout_weights,
    load_layout,
    names_for,
)
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig


def bart_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    for flag in ("normalize_before", "add_final_layer_norm"):
        if hf.get(flag):
            raise CheckpointError(f"{flag} is set: this is an mBART-style checkpoint, which encdec does not load yet")
    return layout_config(hf, untied_head, positions={"kind": "learned", "offset": 2}, embeddings={"norm": True})


def mbart_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    """mBART: BART's layout made pre-norm, with a LayerNorm closing each stack."""
    return layout_config(
        hf,
        untied_head,
        positions={"kind": "learned", "offset": 2},
        embeddings={"norm": True},
        norms={"position": "pre"},
    )


def learned_embedding_problems(cfg: ModelConfig) -> dict[str, bool]:
    return {
        "positions.kind must be learned": cfg.positions.kind != "learned",
        "embeddings.norm must be true": not cfg.embeddings.norm,
    }


def check_bart_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings BART's layout does not have."""
    check_layout(cfg, "BART", learned_embedding_problems(cfg))


def check_mbart_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings mBART's (BART's, pre-norm) layout does not have."""
    check_layout(cfg, "mBART", learned_embedding_problems(cfg), norm_position="pre")


def bart_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A model with learned positions and an embedding norm (post-norm: BART; pre-norm: mBART, its final_norm
    mBART's closing layer_norm of each stack) as BART-layout weights and config.json keys."""
    return layout_weights(model.state_dict(), model.config), layout_hf_config(model.config)


def load_hf_bart(path: Path, hf_config: dict) -> EncoderDecoder:
    return load_layout(path, bart_config_from_hf, hf_config)


def load_hf_mbart(path: Path, hf_config: dict) -> EncoderDecoder:
    return load_layout(path, mbart_config_from_hf, hf_config)


FAMILIES = (
    Family(
        "bart",
        "BartForConditionalGeneration",
        load_hf_bart,
        check_bart_compatible,
        bart_files,
        lambda cfg: cfg.positions.kind == "learned" and cfg.norms.position == "post",
        BART_KEYS,
        ("vocab.json", "merges.txt"),
        config_read_alone(bart_config_from_hf),
        names=names_for,  # q_proj, k_proj, v_proj, out_proj, fc1, fc2 (encoder_attn: the cross-attention)
    ),
    Family(
        "mbart",
        "MBartForConditionalGeneration",
        load_hf_mbart,
        check_mbart_compatible,
        bart_files,
        lambda cfg: cfg.positions.kind == "learned" and cfg.norms.position == "pre",
        BART_KEYS,
        ("sentencepiece.bpe.model",),
        config_read_alone(mbart_config_from_hf),
        names=names_for,
    ),
)

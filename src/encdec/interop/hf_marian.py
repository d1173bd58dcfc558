"""Hugging Face MarianMT checkpoints (Helsinki-NLP/opus-mt-*) <-> encdec's encoder-decoder.

Marian (Junczys-Dowmunt et al. 2018) has BART's weight layout (hf_bart.py) with
fixed sinusoidal positions whose sines fill the first half of each vector and
cosines the second, no embedding LayerNorm, usually a SiLU ("swish") feed-forward
and embeddings scaled by sqrt(d_model); pad is the decoder-start token.

The canonical Transformer (Vaswani et al. 2017) interleaves its sines and cosines
instead. Permuting the model dimension of every residual-stream weight by the same
permutation changes no logit (LayerNorm, attention and the tied head are all
equivariant to it), so such a model is written as Marian with its dimensions
reordered sin-first: the exported weights are a permutation of ours, not a copy.
"""

import re
from pathlib import Path

import torch

from encdec.errors import CheckpointError
from encdec.interop.hf_bart import (
    bart_layout_config,
    bart_layout_hf_config,
    bart_layout_weights,
    check_bart_layout,
    load_bart_layout,
)
from encdec.models import EncoderDecoder, ModelConfig

# our parameter name pattern -> the dimension of that tensor that is the model dimension C
MODEL_DIM = [
    (r"((encoder|decoder)\.)?embed\.weight|lm_head\.weight", 1),  # (V, C)
    (r".*_attn\.(q|k|v)\.weight|.*\.ffn\.(wi|wi_0|wi_1)\.weight", 1),  # (out, C): inputs read from the stream
    (r".*_attn\.o\.(weight|bias)|.*\.ffn\.wo\.(weight|bias)", 0),  # (C, in) or (C,): outputs added to it
    (r".*norm\.(weight|bias)", 0),  # (C,)
]


def marian_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    decoder_vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
    if decoder_vocab != hf["vocab_size"] or hf.get("share_encoder_decoder_embeddings") is False:
        raise CheckpointError("this Marian checkpoint has separate source and target vocabularies, not supported yet")
    hf = {"pad_token_id": 58100, "eos_token_id": 0, "decoder_start_token_id": 58100, **hf}
    return bart_layout_config(hf, untied_head, position="sinusoidal", sinusoidal_layout="halves")


def load_hf_marian(path: Path, hf_config: dict) -> EncoderDecoder:
    return load_bart_layout(path, marian_config_from_hf, hf_config)


def halves_order(d_model: int) -> torch.Tensor:
    """(C,) indices: the interleaved layout's sine dimensions 0, 2, 4, ... then its cosine dimensions 1, 3, ..."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permute_model_dim(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor of `state` with its model dimension reordered by `order`; other tensors as they are."""
    permuted = {}
    for name, tensor in state.items():
        dim = next((d for pattern, d in MODEL_DIM if re.fullmatch(pattern, name)), None)
        permuted[name] = tensor if dim is None else tensor.index_select(dim, order.to(tensor.device))
    return permuted


def sinusoidal_embedding_problems(cfg: ModelConfig) -> dict[str, bool]:
    return {
        "position must be sinusoidal": cfg.position != "sinusoidal",
        "sinusoidal_layout must be interleaved or halves (fairseq's is M2M100's)": cfg.sinusoidal_layout == "fairseq",
        "embedding_norm must be false": cfg.embedding_norm,
    }


def check_marian_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings Marian's layout does not have."""
    check_bart_layout(cfg, "Marian", sinusoidal_embedding_problems(cfg))


def sinusoidal_weights(model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """A model with sinusoidal positions (either layout) as BART-layout weights, its dimensions sines first."""
    cfg, state = model.config, model.state_dict()
    if cfg.sinusoidal_layout == "interleaved":
        state = permute_model_dim(state, halves_order(cfg.d_model))
    return bart_layout_weights(state, cfg)


def marian_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A post-norm model with sinusoidal positions (either layout) as MarianMTModel's weights and config keys."""
    cfg = model.config
    config = {
        **bart_layout_hf_config(cfg),
        "decoder_vocab_size": cfg.vocab_size,
        "share_encoder_decoder_embeddings": True,
    }
    return sinusoidal_weights(model), config

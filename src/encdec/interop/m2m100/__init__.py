"""Hugging Face M2M100 and NLLB checkpoints (model_type m2m_100) <-> encdec's pre-norm encoder-decoder.

M2M100 (Fan et al. 2020) and NLLB-200 (NLLB Team 2022) are fairseq's pre-norm Transformer in BART's weight layout
(interop/bart/bart_layout.py): biases, ReLU, a LayerNorm closing each stack, no embedding LayerNorm, no logits bias,
embeddings scaled by sqrt(d_model) and shared by both stacks and the head. Their positions are fairseq's sinusoids
(`sinusoidal_layout: fairseq`): position p at table row pad_id + 1 + p, counted over a row's real tokens, pads a
zero vector. Defaults as M2M100Config's: pad 1, EOS 2, decoder start 2 (EOS). The language codes (NLLB's eng_Latn,
fra_Latn, ...) are tokens of the tokenizer: see tokenizers/languages.py.
"""

from pathlib import Path

import torch

from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig

DEFAULTS = {  # M2M100Config's, where they differ from BART's
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "scale_embedding": True,
    "activation_function": "relu",
}


def m2m100_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    return bart_layout.layout_config(
        {**DEFAULTS, **hf},
        untied_head,
        positions={"kind": "sinusoidal", "sinusoidal_layout": "fairseq"},
        norms={"position": "pre"},
        output={"logits_bias": False},
    )


def load_hf_m2m100(path: Path, hf_config: dict) -> EncoderDecoder:
    return bart_layout.load_layout(path, m2m100_config_from_hf, hf_config)


def check_m2m100_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings M2M100's layout does not have."""
    bart_layout.check_layout(cfg, "M2M100", bart_layout.fairseq_embedding_problems(cfg), norm_position="pre")


def m2m100_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A pre-norm model with fairseq's positions as M2M100's weights (BART's names, no logits bias) and
    config.json keys."""
    weights = bart_layout.layout_weights(model.state_dict(), model.config)
    del weights["final_logits_bias"]
    return weights, bart_layout.layout_hf_config(model.config)


FAMILIES = (
    Family(
        "m2m_100",
        "M2M100ForConditionalGeneration",
        load_hf_m2m100,
        check_m2m100_compatible,
        m2m100_files,
        bart_layout.fairseq_positions,
        bart_layout.BART_KEYS,
        ("sentencepiece.bpe.model", "vocab.json"),  # NLLB's, M2M100's (beside its spm)
        config_read_alone(m2m100_config_from_hf),
        names=bart_layout.names_for,
    ),
)

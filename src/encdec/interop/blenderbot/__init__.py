"""Hugging Face Blenderbot (model_type blenderbot: BlenderbotForConditionalGeneration) <-> encdec's pre-norm
encoder-decoder with learned positions.

Blenderbot (Roller et al. 2021) is BART's weight layout (interop/bart/bart_layout.py) made pre-norm, with a
LayerNorm closing each stack and no LayerNorm after the embeddings: mBART's, but its learned positions are looked
up at p itself (position_offset 0), not p + 2, so its table has no two rows before position 0. Its defaults, as
BlenderbotConfig's: pad 0, EOS 2, decoder start 1.
"""

from pathlib import Path

import torch

from encdec.interop.bart import bart_layout
from encdec.interop.family import Family, config_read_alone
from encdec.models import EncoderDecoder, ModelConfig


def blenderbot_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    hf = {"pad_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 1, **hf}
    return bart_layout.layout_config(
        hf, untied_head, positions={"kind": "learned", "offset": 0}, norms={"position": "pre"}
    )


def load_hf_blenderbot(path: Path, hf_config: dict) -> EncoderDecoder:
    return bart_layout.load_layout(path, blenderbot_config_from_hf, hf_config)


def check_blenderbot_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings Blenderbot's layout does not have."""
    embeddings = bart_layout.learned_from_zero_problems(cfg, embedding_norm=False)
    bart_layout.check_layout(cfg, "Blenderbot", embeddings, norm_position="pre")


def blenderbot_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A pre-norm model with learned positions from 0 as Blenderbot's weights (BART's names, each position table as
    it is: BART's two rows before position 0 taken off again) and config.json keys."""
    weights = bart_layout.layout_weights(model.state_dict(), model.config)
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_positions.weight"
        weights[key] = weights[key][2:].contiguous()
    return weights, bart_layout.layout_hf_config(model.config)


FAMILIES = (
    Family(
        "blenderbot",
        "BlenderbotForConditionalGeneration",
        load_hf_blenderbot,
        check_blenderbot_compatible,
        blenderbot_files,
        lambda cfg: (
            cfg.positions.kind == "learned"
            and cfg.positions.offset == 0
            and cfg.norms.position == "pre"
            and not cfg.embeddings.norm
        ),
        bart_layout.BART_KEYS,
        ("vocab.json", "merges.txt"),  # its byte-level BPE beside tokenizer.json
        config_read_alone(blenderbot_config_from_hf),
        names=bart_layout.names_for,
    ),
)
